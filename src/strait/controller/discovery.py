"""Which topics a route replicates, and how many partitions each has on the source.

`plan_topic_updates` is pure: from the source's topic listing and the stored topic specs it
derives the specs to write (topics picked up by a route's patterns, partition counts that
grew). `SourceMetadata` is the I/O edge that lists a cluster's topics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaException

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
    the same name cannot be told apart by name: there the records' origin header stops the loop
    (``active_active``).
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


class SourceMetadata:
    """Lists topics and partition counts of the configured clusters (one admin client each)."""

    def __init__(self, clusters: Mapping[str, Mapping[str, object]], timeout_s: float = 5.0) -> None:
        self._clusters = clusters
        self._timeout_s = timeout_s
        self._admins: dict[str, object] = {}

    def topics(self, cluster: str) -> dict[str, int]:
        """Topic name -> partition count on `cluster`."""
        admin = self._admins.get(cluster)
        if admin is None:
            admin = clients.admin(self._clusters[cluster])
            self._admins[cluster] = admin
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
        """Partitions of one topic, or None when it does not exist on `cluster`."""
        return self.topics(cluster).get(topic)
