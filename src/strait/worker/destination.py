"""Destination topics: create them like their source, and grow them when the source grows.

uReplicator never created destination topics; MirrorMaker 2 copies configs lazily. Strait makes
the destination topic before the first record is sent: same partition count as the source (the
copier keeps partition numbers), the source topic's own config overrides, and a replication
factor that fits the destination cluster.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition

# confluent-kafka re-exports these without listing them in __all__, which strict mypy rejects.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from strait import clients
from strait.access_errors import explain

if TYPE_CHECKING:
    from strait.config import RouteConfig

log = logging.getLogger(__name__)

# Settings that describe the source cluster rather than the data, or that could make the
# destination refuse the copy (MirrorMaker 2's default exclusions). The copier sets every
# record's timestamp itself, so the destination must keep CreateTime.
EXCLUDED_CONFIGS = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    }
)

DEFAULT_MAX_REPLICATION_FACTOR = 3

# After creating a topic, its partitions' leaders are looked for after this, then less often.
_FIRST_LEADER_CHECK_S = 0.05

# A partition whose leader is named in the metadata may still refuse requests while its broker
# sets it up (NOT_LEADER_OR_FOLLOWER, seen on a new topic under load for up to about a second);
# these answers to a ListOffsets mean "not serving yet", not a failure. So do the leader epoch
# errors: a broker that has yet to learn the new partition's leader epoch answers
# UNKNOWN_LEADER_EPOCH (seen on the sandbox for a topic created a moment ago, under load).
_NOT_SERVING_YET = frozenset(
    {
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)

# Destination topics made ready at the same time (each is a few admin round trips and a wait
# for partition leaders; ten new topics one after the other took seconds).
_PARALLEL_ENSURES = 8


class DestinationError(Exception):
    """The destination topic cannot be made ready; the message names topic and cause."""


def for_route(source: Mapping[str, Any], destination: Mapping[str, Any], route: RouteConfig) -> DestinationTopics:
    """The route's destination topics: its replication factor, without the source settings it
    keeps apart. The worker's copier and the controller (which creates a topic's destination when
    the topic is added) make them with the same rules."""
    return DestinationTopics(
        source=source,
        destination=destination,
        replication_factor=route.replication_factor,
        excluded_configs=route.topic_config.excluded,
    )


def configs_to_copy(entries: Iterable[ConfigEntry], excluded: Callable[[str], bool] | None = None) -> dict[str, str]:
    """The source topic's own overrides worth carrying to the destination.

    Only values set on the topic itself (not broker or built-in defaults: the destination
    cluster has its own) and not ``excluded`` (default: in :data:`EXCLUDED_CONFIGS`; a route's
    is ``topic_config.excluded``); sensitive values are unreadable.
    """
    if excluded is None:
        excluded = EXCLUDED_CONFIGS.__contains__
    copied: dict[str, str] = {}
    for entry in entries:
        # describe_configs reports the source as a plain int, not as the ConfigSource enum.
        source = getattr(entry.source, "value", entry.source)
        if source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value or entry.is_default:
            continue
        if entry.is_sensitive or entry.value is None or excluded(entry.name):
            continue
        copied[entry.name] = entry.value
    return copied


def default_replication_factor(broker_count: int) -> int:
    """Three replicas where the destination has three brokers, fewer on smaller clusters."""
    return max(1, min(DEFAULT_MAX_REPLICATION_FACTOR, broker_count))


class TopicCreator:
    """Creates topics; those asked for while a CreateTopics request is out go together in the next.

    Measured on the sandbox (load average 44): ten topics in one request had leaders after 0.2 to
    0.8 s, ten requests at once after 2.6 to 5.5 s. A topic asked for alone is sent at once.
    """

    def __init__(self, admin: AdminClient, timeout_s: float) -> None:
        self._admin = admin
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._queue: list[tuple[NewTopic, Future[None]]] = []
        self._sending = False

    def create(self, topic: NewTopic) -> None:
        """Create ``topic``; raises its creation's ``KafkaException`` (TOPIC_ALREADY_EXISTS too)."""
        done: Future[None] = Future()
        with self._lock:
            self._queue.append((topic, done))
            send, self._sending = not self._sending, True
        if send:
            self._send_all()
        done.result()

    def _send_all(self) -> None:
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._sending = False
                    return
            try:
                futures = self._admin.create_topics([t for t, _ in batch], request_timeout=self._timeout_s)
            except Exception as exc:  # refused before it was sent: every topic of the batch fails
                for _, done in batch:
                    done.set_exception(exc)
                continue
            for topic, done in batch:
                try:
                    clients.admin_result(futures[topic.topic], self._timeout_s, f"creating {topic.topic}")
                    done.set_result(None)
                except Exception as exc:
                    done.set_exception(exc)


class DestinationTopics:
    """Makes destination topics exist with at least the source's partition count.

    Thread-safe; remembers what it has ensured so that the common case costs no admin call.
    """

    def __init__(
        self,
        *,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        replication_factor: int | None = None,
        timeout_s: float = 30.0,
        excluded_configs: Callable[[str], bool] | None = None,
    ) -> None:
        self._source_props, self._destination_props = dict(source), dict(destination)
        self._excluded_configs = excluded_configs  # source settings not copied (see configs_to_copy)
        self._source = clients.admin(source)
        self._destination = clients.admin(destination)
        self._replication_factor = replication_factor
        self._timeout_s = timeout_s
        self._lock = threading.Lock()  # guards _topic_locks and _inflight
        self._topic_locks: dict[str, threading.Lock] = {}
        self._ensured: dict[str, int] = {}
        # Topics are made ready on these threads, several at once (see prepare, ensure_many).
        self._pool = ThreadPoolExecutor(max_workers=_PARALLEL_ENSURES, thread_name_prefix="ensure")
        self._inflight: dict[tuple[str, str], Future[int]] = {}
        self._creator = TopicCreator(self._destination, timeout_s)

    def ensure(self, source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        """Create or grow ``destination_topic`` to match ``source_topic``; returns its partition count.

        ``min_partitions`` skips the admin round trips when the destination is already known to
        have that many partitions. Raises :class:`DestinationError`.
        """
        # One lock per destination topic: different topics are made ready at the same time.
        with self._lock:
            lock = self._topic_locks.setdefault(destination_topic, threading.Lock())
        with lock:
            known = self._ensured.get(destination_topic, 0)
            if min_partitions and known >= min_partitions:
                return known
            try:
                count = self._ensure(source_topic, destination_topic)
            except KafkaException as exc:
                reason = explain(self._destination_props, exc, destination_topic)
                raise DestinationError(f"destination topic {destination_topic!r}: {reason}") from exc
            self._ensured[destination_topic] = count
            return count

    def prepare(self, wanted: Mapping[tuple[str, str], int]) -> None:
        """Start making topics ready in the background, e.g. as soon as partitions are assigned;
        :meth:`ensure_many` then waits for what is under way instead of starting it again."""
        with self._lock:
            for pair, partitions in wanted.items():
                if (partitions and self._ensured.get(pair[1], 0) >= partitions) or pair in self._inflight:
                    continue
                self._inflight[pair] = self._pool.submit(self.ensure, pair[0], pair[1], min_partitions=partitions)

    def ensure_many(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        """:meth:`ensure` for many topics at once: their admin round trips overlap, not add up.

        ``wanted`` maps (source topic, destination topic) to ``min_partitions``. Returns each
        pair's partition count, or the :class:`DestinationError` or ``KafkaException`` that
        stopped it: one topic that cannot be made ready does not hold the others back.
        """
        results: dict[tuple[str, str], int | Exception] = {}
        futures: dict[tuple[str, str], Future[int]] = {}
        with self._lock:
            for pair, partitions in wanted.items():
                prepared = self._inflight.pop(pair, None)
                if partitions and self._ensured.get(pair[1], 0) >= partitions and prepared is None:
                    results[pair] = self._ensured[pair[1]]
                else:
                    futures[pair] = prepared or self._pool.submit(
                        self.ensure, pair[0], pair[1], min_partitions=partitions
                    )
        for pair, future in futures.items():
            try:
                count = future.result()
                if count < wanted[pair]:  # prepared for fewer partitions than now wanted
                    count = self.ensure(pair[0], pair[1], min_partitions=wanted[pair])
                results[pair] = count
            except (DestinationError, KafkaException) as exc:
                results[pair] = exc
        return results

    def ready(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        """:meth:`ensure_many` without waiting: each pair made ready (its partition count) or that
        failed (the error); pairs still being made ready are left out, and started if nothing
        was under way for them."""
        results: dict[tuple[str, str], int | Exception] = {}
        with self._lock:
            for pair, partitions in wanted.items():
                future = self._inflight.get(pair)
                if future is None:
                    if partitions and self._ensured.get(pair[1], 0) >= partitions:
                        results[pair] = self._ensured[pair[1]]
                    else:
                        self._inflight[pair] = self._pool.submit(
                            self.ensure, pair[0], pair[1], min_partitions=partitions
                        )
                    continue
                if not future.done():
                    continue
                del self._inflight[pair]
                try:
                    count = future.result()
                except (DestinationError, KafkaException) as exc:
                    results[pair] = exc
                    continue
                if count < partitions:  # prepared for fewer partitions than now wanted
                    self._inflight[pair] = self._pool.submit(self.ensure, pair[0], pair[1], min_partitions=partitions)
                    continue
                results[pair] = count
        return results

    def close(self) -> None:
        """Let go of the admin clients, e.g. before the clusters stop: a client kept after its
        cluster stops keeps logging failed connections. Not usable afterwards."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._inflight.clear()
        del self._source, self._destination, self._creator

    def forget(self, destination_topic: str) -> None:
        """Drop what is known about a topic, e.g. after it was deleted under the copier."""
        self._ensured.pop(destination_topic, None)
        with self._lock:  # a creation prepared earlier may have seen it before the deletion
            for pair in [p for p in self._inflight if p[1] == destination_topic]:
                del self._inflight[pair]

    def _ensure(self, source_topic: str, destination_topic: str) -> int:
        # Both topics are described at once, and what a creation needs (the source's configs, the
        # destination's size) is asked for with them: a new topic's creation waits for one round
        # trip, not four. A destination that exists leaves those answers unread.
        source = _describe_async(self._source, source_topic, self._timeout_s)
        destination = _describe_async(self._destination, destination_topic, self._timeout_s)
        resource = ConfigResource(ResourceType.TOPIC, source_topic)
        configs = self._source.describe_configs([resource], request_timeout=self._timeout_s)[resource]
        cluster = None
        if self._replication_factor is None:
            cluster = self._destination.describe_cluster(request_timeout=self._timeout_s)
        try:
            wanted = _count(source, source_topic, self._timeout_s)
        except KafkaException as exc:
            reason = explain(self._source_props, exc, source_topic)
            raise DestinationError(f"source topic {source_topic!r}: {reason}") from exc
        if wanted is None:
            raise DestinationError(f"source topic {source_topic!r} does not exist")
        have = _count(destination, destination_topic, self._timeout_s)
        if have is None:
            self._create(source_topic, destination_topic, wanted, configs=configs, cluster=cluster)
        elif have < wanted:
            self._grow(destination_topic, wanted)
        elif destination_topic in self._ensured:
            return have
        # A topic met for the first time may have been created a moment ago by someone else (the
        # controller creates it when the topic is added, while the assignment is published):
        # its leaders are checked as after a creation of our own, one round trip when they serve.
        return self._await_partitions(destination_topic, wanted)

    def _create(
        self, source_topic: str, destination_topic: str, partitions: int, *, configs: Any, cluster: Any
    ) -> None:
        """Create the topic; ``configs`` and ``cluster`` are the answers already asked for (futures)."""
        configs = self._source_configs(source_topic, configs)
        replicas = self._replication_factor or default_replication_factor(self._broker_count(cluster))
        log.info(
            "creating destination topic %s: %d partitions, replication factor %d, configs %s",
            destination_topic,
            partitions,
            replicas,
            configs,
        )
        topic = NewTopic(destination_topic, num_partitions=partitions, replication_factor=replicas, config=configs)
        try:
            self._creator.create(topic)
            # Created with every partition. A describe right now may not see them all yet (the
            # brokers learn of a new topic asynchronously), which used to trigger a needless grow.
            return
        except KafkaException as exc:
            # Another worker of the route may have created it first; growing is checked after.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        have = _partition_count(self._destination, destination_topic, self._timeout_s) or 0
        if have < partitions:
            self._grow(destination_topic, partitions)

    def _grow(self, destination_topic: str, partitions: int) -> None:
        log.info("growing destination topic %s to %d partitions", destination_topic, partitions)
        futures = self._destination.create_partitions(
            [NewPartitions(destination_topic, partitions)], request_timeout=self._timeout_s
        )
        try:
            clients.admin_result(futures[destination_topic], self._timeout_s, f"growing {destination_topic}")
        except KafkaException as exc:
            # INVALID_PARTITIONS: a concurrent grow already reached the count (checked next).
            if exc.args[0].code() != KafkaError.INVALID_PARTITIONS:
                raise

    def _await_partitions(self, destination_topic: str, wanted: int) -> int:
        # Creation is asynchronous on the brokers; producing before every partition has a
        # leader would make the producer fail the first records as unknown partitions.
        started = time.monotonic()
        deadline = started + self._timeout_s
        pause = _FIRST_LEADER_CHECK_S
        while True:
            description = _describe(self._destination, destination_topic, self._timeout_s)
            if description is not None:
                partitions = description.partitions
                if (
                    len(partitions) >= wanted
                    and all(p.leader is not None for p in partitions)
                    and _serving(self._destination, destination_topic, len(partitions), self._timeout_s)
                ):
                    log.info(
                        "destination topic %s ready: %d partitions with leaders after %.2fs",
                        destination_topic,
                        len(partitions),
                        time.monotonic() - started,
                    )
                    return len(partitions)
            if time.monotonic() > deadline:
                raise DestinationError(f"destination topic {destination_topic!r} has no {wanted} partitions")
            # Leaders usually follow a creation within a round trip or two: look again soon.
            time.sleep(pause)
            pause = min(0.2, pause * 2)

    def _source_configs(self, source_topic: str, future: Any) -> dict[str, str]:
        try:
            what = f"configs of {source_topic}"
            entries: dict[str, ConfigEntry] = clients.admin_result(future, self._timeout_s, what)
        except KafkaException as exc:
            reason = explain(self._source_props, exc, source_topic)
            raise DestinationError(f"source topic {source_topic!r} configs: {reason}") from exc
        return configs_to_copy(entries.values(), self._excluded_configs)

    def _broker_count(self, future: Any = None) -> int:
        if future is None:
            future = self._destination.describe_cluster(request_timeout=self._timeout_s)
        cluster = clients.admin_result(future, self._timeout_s, "describing the destination cluster")
        return len(cluster.nodes)


def _serving(admin: AdminClient, topic: str, partitions: int, timeout_s: float) -> bool:
    """Whether every partition's leader answers for it (a ListOffsets of each partition).

    The metadata names a new partition's leader before that broker serves it: a producer sending
    then is told NOT_LEADER_OR_FOLLOWER and retries with a backoff that doubles up to a second
    (librdkafka's retry.backoff.ms, retry.backoff.max.ms), which is where a new topic's first
    record lost 0.6 to 1.5 s. Asked here, the answer comes as soon as the leader serves.
    """
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},  # type: ignore[no-untyped-call]
        request_timeout=timeout_s,
    )
    try:
        for tp, future in futures.items():
            clients.admin_result(future, timeout_s + 5, f"offsets of {tp.topic}/{tp.partition}")
    except KafkaException as exc:
        if exc.args[0].code() in _NOT_SERVING_YET:
            return False
        raise
    return True


def _describe_async(admin: AdminClient, topic: str, timeout_s: float) -> Any:
    # describe_topics never auto-creates a topic, unlike a metadata request for one topic.
    return admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]


def _described(future: Any, topic: str, timeout_s: float) -> Any:
    """The description, or None when the topic does not exist."""
    try:
        return clients.admin_result(future, timeout_s, f"describing {topic}")
    except KafkaException as exc:
        if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
            return None
        raise


def _describe(admin: AdminClient, topic: str, timeout_s: float) -> Any:
    return _described(_describe_async(admin, topic, timeout_s), topic, timeout_s)


def _count(future: Any, topic: str, timeout_s: float) -> int | None:
    description = _described(future, topic, timeout_s)
    return None if description is None else len(description.partitions)


def _partition_count(admin: AdminClient, topic: str, timeout_s: float) -> int | None:
    return _count(_describe_async(admin, topic, timeout_s), topic, timeout_s)
