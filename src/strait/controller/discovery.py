"""Which topics a route replicates, and how many partitions each has on the source.

`plan_topic_updates` is pure: from the source's topic listing and the stored topic specs it
derives the specs to write (topics picked up by a route's patterns, partition counts that
grew). `await_topic` is the pure wait for a topic created a moment ago. `SourceMetadata` is the
I/O edge that lists a cluster's topics, or describes one of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, TopicCollection

from strait import clients
from strait.access_errors import explain
from strait.config import RouteConfig
from strait.coordination.model import TopicSpec

log = logging.getLogger(__name__)

_TOPIC_MAX = 249  # Kafka's longest topic name


class MetadataUnavailable(Exception):
    """The source cluster could not be asked for its topics."""

    retriable = True


def copied_back(route: RouteConfig, topic: str, routes: Sequence[RouteConfig]) -> RouteConfig | None:
    """The route in the opposite direction (its destination is ``route``'s source and its source
    ``route``'s destination) that renames its copies and would call one ``topic``, if any.

    With A->B and B->A both renaming (e.g. prefixes "A." and "B."), A->B matching ".*" would
    otherwise copy B->A's copy "B.t" back to B as "A.B.t", and so on without end. Copies under
    the same name cannot be told apart by name: there ``active_active`` stops the loop (copies
    told by producer id in batch mode, by the origin header in record mode).
    """
    for other in routes:
        if other.name == route.name or not other.naming.renames:
            continue
        if other.source != route.destination or other.destination != route.source:
            continue
        original = other.naming.source_topic(
            topic, route=other.name, source=other.source, destination=other.destination
        )
        if original is not None:
            return other
    return None


def plan_topic_updates(
    route: RouteConfig,
    source_topics: Mapping[str, int],
    specs: Mapping[tuple[str, str], TopicSpec],
    removed: frozenset[tuple[str, str]],
    routes: Sequence[RouteConfig] = (),
) -> list[TopicSpec]:
    """Specs to write for `route`: new pattern matches, and topics whose partitions grew.

    A topic removed through the API stays out until it is added again explicitly, even if a
    pattern matches it. Partition counts only grow (Kafka cannot shrink a topic); a topic that
    vanished from the source keeps its spec so that its checkpoints stay meaningful. A new
    topic's destination name comes from the route's naming; a topic that is the renamed copy
    written by the opposite route of ``routes`` is not picked up (see :func:`copied_back`).
    """
    updates: list[TopicSpec] = []
    for topic, count in sorted(source_topics.items()):
        spec = specs.get((route.name, topic))
        if spec is None:
            if route.matches(topic) and (route.name, topic) not in removed:
                if copied_back(route, topic, routes) is not None:
                    continue
                destination = route.destination_topic(topic)
                if len(destination) > _TOPIC_MAX:
                    log.warning(
                        "route %s: topic %s not picked up: its destination name would be longer than %d characters",
                        route.name,
                        topic,
                        _TOPIC_MAX,
                    )
                    continue
                updates.append(
                    TopicSpec(
                        route=route.name,
                        topic=topic,
                        destination_topic=destination,
                        origin="pattern",
                        partitions=count,
                        initial_partitions=count,
                    )
                )
        elif count > spec.partitions:
            updates.append(
                TopicSpec(
                    route=spec.route,
                    topic=spec.topic,
                    destination_topic=spec.destination_topic,
                    start=spec.start,
                    origin=spec.origin,
                    partitions=count,
                    initial_partitions=spec.initial_partitions,
                )
            )
    return updates


# A topic created a moment ago is not in every broker's metadata yet (KRaft brokers learn of it
# asynchronously, later on a loaded machine): asked for by name, it is asked for again this
# often, then less often, until the caller's patience runs out.
_FIRST_ASK_AGAIN_S = 0.05
_LAST_ASK_AGAIN_S = 0.5


def await_topic(
    ask: Callable[[], int | None],
    within_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int | None:
    """``ask()`` (a topic's partition count, None while unknown) until it answers or ``within_s``
    passed; None if the topic stayed unknown. Asked at least once, and once more at the end."""
    deadline = clock() + within_s
    delay = _FIRST_ASK_AGAIN_S
    while True:
        partitions = ask()
        if partitions is not None:
            return partitions
        left = deadline - clock()
        if left <= 0:
            return None
        sleep(min(delay, left))
        delay = min(_LAST_ASK_AGAIN_S, delay * 2)


class SourceMetadata:
    """Lists topics and partition counts of the configured clusters (one admin client each)."""

    def __init__(self, clusters: Mapping[str, Mapping[str, object]], timeout_s: float = 5.0) -> None:
        self._clusters = clusters
        self._timeout_s = timeout_s
        self._admins: dict[str, object] = {}

    def _admin(self, cluster: str) -> object:
        admin = self._admins.get(cluster)
        if admin is None:
            # A metadata request naming a topic must never create it on the source.
            admin = clients.admin(self._clusters[cluster], **{"allow.auto.create.topics": False})
            self._admins[cluster] = admin
        return admin

    def close(self) -> None:
        """Let go of the admin clients (made again if asked later): a client kept after its
        cluster stops keeps logging failed connections."""
        self._admins.clear()

    def topics(self, cluster: str) -> dict[str, int]:
        """Topic name -> partition count on `cluster` (the whole listing: the periodic refresh)."""
        admin = self._admin(cluster)
        try:
            metadata = admin.list_topics(timeout=self._timeout_s)  # type: ignore[attr-defined]
        except KafkaException as exc:
            # Serve the client's queued error callbacks first: a refused login or TLS handshake
            # recorded there names the principal and the cause (strait.access_errors).
            admin.poll(0)  # type: ignore[attr-defined]
            cause = explain(self._clusters[cluster], exc)
            raise MetadataUnavailable(f"cannot list topics of cluster {cluster!r}: {cause}") from exc
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and topic.partitions
        }

    def partition_count(self, cluster: str, topic: str) -> int | None:
        """Partitions of one topic, or None when it does not exist on `cluster`.

        Only that topic is described (DescribeTopics, which never creates one): the REST API adds
        topics one at a time, and a source with thousands of topics must not be listed for each.
        """
        admin = self._admin(cluster)
        try:
            future = admin.describe_topics(  # type: ignore[attr-defined]
                TopicCollection([topic]), request_timeout=self._timeout_s
            )[topic]
            description = clients.admin_result(future, self._timeout_s + 1, f"describing {topic}")
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
                return None
            admin.poll(0)  # type: ignore[attr-defined]
            cause = explain(self._clusters[cluster], exc, topic)
            raise MetadataUnavailable(f"cannot describe topic {topic!r} of cluster {cluster!r}: {cause}") from exc
        return len(description.partitions)
