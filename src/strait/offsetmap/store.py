"""Writing and reading a route's offset map on the destination cluster."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.offsetmap.codec import MapEntry, decode, encode, encode_json, map_topic
from strait.offsetmap.cost import MapCost
from strait.offsetmap.retention import MAP_SETTINGS
from strait.offsetmap.runs import Run, RunRecorder
from strait.offsetmap.translate import merge

log = logging.getLogger(__name__)

MAP_PARTITIONS = 1  # runs of one source partition stay in order; the map is small
ADMIN_TIMEOUT_S = 15.0
ENSURE_RETRY_S = 30.0


class MapWriter:
    """Publishes the runs of a route's partitions, asynchronously and best effort.

    Called by the copier after each checkpoint commit. A run that cannot be published is
    counted in ``failures`` and logged; it costs failover exactness for that range, which the
    translation then reports, never the data. ``cost`` (the route's, on this worker) counts
    what is written, once per publish.
    """

    def __init__(
        self, destination: Mapping[str, Any], route: str, *, client_id: str, cost: MapCost | None = None
    ) -> None:
        self.topic = map_topic(route)
        self.cost = cost or MapCost()
        self.failures = 0
        self.published = 0
        self.bytes = 0
        self._destination = destination
        self._ready = False
        self._next_ensure = 0.0
        self._producer = clients.producer(
            destination,
            **{"client.id": f"{client_id}-offsetmap", "enable.idempotence": True, "linger.ms": 50},
        )

    def publish(self, entries: Iterable[tuple[str, int, str, RunRecorder]]) -> None:
        """Publish what changed in each (source topic, partition, destination topic, runs)."""
        pending = [(t, p, dt, run) for t, p, dt, recorder in entries for run in recorder.take()]
        self._producer.poll(0)
        if not pending:
            return
        if not self._ready and time.monotonic() >= self._next_ensure:
            # Not on every commit while the topic cannot be created (no ACL for it, say).
            self._next_ensure = time.monotonic() + ENSURE_RETRY_S
            self._ready = ensure_map_topic(self._destination, self.topic)
        written = size = 0
        for topic, partition, destination_topic, run in pending:
            key, value = encode(MapEntry(topic, partition, destination_topic, run))
            try:
                self._producer.produce(self.topic, value, key, partition=0, on_delivery=self._delivered)
            except (BufferError, KafkaException) as exc:
                self._failed(exc)
                continue
            written += 1
            size += len(key) + len(value)
        self.bytes += size
        self.cost.written(written, size)

    def close(self, timeout_s: float = 5.0) -> None:
        # Closed now, not by the garbage collector: an idle producer kept alive reconnects
        # after its cluster went and prints librdkafka's complaints. close() flushes without a
        # bound, so what the bounded flush left is dropped first.
        try:
            if self._producer.flush(timeout_s):
                self._producer.purge()
                self._producer.flush(0)
            self._producer.close()
        except RuntimeError:  # closed already
            pass

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is None:
            self.published += 1
        else:
            self._failed(error)

    def _failed(self, error: Any) -> None:
        self.failures += 1
        self.cost.failed(1)
        if self.failures == 1 or self.failures % 1000 == 0:
            log.warning("offset map %s: a run was not published (%d so far): %s", self.topic, self.failures, error)


class TransactionMap:
    """The offset map of one exactly-once pipeline: its runs go into its own transactions.

    The pipeline produces the runs of a transaction's partitions with its transactional
    producer once every record of the transaction is acknowledged (so their destination offsets
    are known) and before it commits: a ``read_committed`` reader of the map sees a run exactly
    when the records it maps are committed, and never one of an aborted transaction.

    A run that cannot be written (the map topic cannot be created, a write refused) would hold
    back the records with it: the transaction is aborted once, then transactions go without
    runs for ``retry_s`` (those runs are lost to the map and counted in ``failures``, as in
    :class:`MapWriter`; translation then reports the ranges it cannot answer exactly).
    """

    def __init__(
        self,
        destination: Mapping[str, Any],
        route: str,
        *,
        retry_s: float = ENSURE_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
        cost: MapCost | None = None,
    ) -> None:
        self.topic = map_topic(route)
        self.cost = cost or MapCost()  # the route's, on this worker: counted once per transaction
        self.published = 0
        self.failures = 0
        self.bytes = 0
        self._destination = destination
        self._retry_s = retry_s
        self._clock = clock
        self._ready = False
        self._resume_at = 0.0
        self._outstanding = 0
        self._error: Any = None
        self._generation = 0  # which write() a delivery report belongs to

    def writable(self) -> bool:
        """Whether runs may go into the open transaction now (creates the topic when due)."""
        if self._clock() < self._resume_at:
            return False
        if not self._ready:
            self._ready = ensure_map_topic(self._destination, self.topic)
            if not self._ready:
                self._resume_at = self._clock() + self._retry_s
        return self._ready

    def put(self, producer: Any, runs: list[tuple[str, int, str, Run]], flush: Callable[[], Any]) -> str | None:
        """Write ``runs`` into the producer's open transaction and ``flush`` it; why they are
        not all written (the caller aborts the transaction then), or None. While the map is
        not writable, the runs are dropped and counted in ``failures``."""
        if not runs:
            return None
        if not self.writable():
            self.dropped(len(runs))
            return None
        try:
            self._write(producer, runs)
        except BufferError as exc:
            reason = f"producer queue full: {exc}"
            self.failed(reason)
            return reason
        flush()
        return self.failure()

    def _write(self, producer: Any, runs: Iterable[tuple[str, int, str, Run]]) -> int:
        """Produce ``(source topic, partition, destination topic, run)`` entries into the
        producer's open transaction; the caller flushes, then asks :meth:`failure`."""
        self._generation += 1
        self._error = None
        self._outstanding = 0
        delivered = partial(self._delivered, self._generation)
        written = size = 0
        try:
            for topic, partition, destination_topic, run in runs:
                key, value = encode(MapEntry(topic, partition, destination_topic, run))
                producer.produce(self.topic, value, key, partition=0, on_delivery=delivered)
                self._outstanding += 1
                size += len(key) + len(value)
                written += 1
        finally:
            self.bytes += size
            self.cost.written(written, size)
        return written

    def encoded(self, runs: Iterable[tuple[str, int, str, Run]]) -> list[tuple[bytes, bytes]]:
        """The (key, value) records of ``runs`` for a writer that builds its own batch (the
        exactly-once batch pipeline), counted as written; it reports :meth:`appended` or
        :meth:`failed`."""
        records = [encode(MapEntry(topic, partition, dt, run)) for topic, partition, dt, run in runs]
        size = sum(len(k) + len(v) for k, v in records)
        self.bytes += size
        self.cost.written(len(records), size)
        return records

    def appended(self, count: int) -> None:
        """``count`` runs written by :meth:`encoded` were appended to the open transaction."""
        self.published += count

    def dropped(self, count: int) -> None:
        """``count`` runs go without being written (the map is not writable now)."""
        self.failures += count
        self.cost.failed(count)

    def failure(self) -> str | None:
        """Why the runs last written are not all acknowledged (then transactions go without
        runs for a while), or None."""
        if self._error is None and self._outstanding == 0:
            return None
        reason = str(self._error) if self._error is not None else f"{self._outstanding} run(s) not acknowledged"
        self.failed(reason)
        return reason

    def failed(self, reason: str) -> None:
        """Runs could not be written: transactions go without them for ``retry_s``."""
        self._generation += 1  # late reports of those runs (purged by the abort) count for nothing
        self._outstanding = 0
        self._error = None
        self._resume_at = self._clock() + self._retry_s
        self._ready = False  # the topic may be gone: check it again
        log.warning("offset map %s: runs not written (%s); trying again in %.0fs", self.topic, reason, self._retry_s)

    def _delivered(self, generation: int, error: KafkaError | None, _message: Any) -> None:
        if generation != self._generation:
            return
        self._outstanding -= 1
        if error is None:
            self.published += 1
        else:
            self.failures += 1
            self.cost.failed(1)
            self._error = error


def ensure_map_topic(destination: Mapping[str, Any], topic: str) -> bool:
    """Create the map topic if missing; True once it exists.

    Whatever the cluster's defaults, the map is never compacted (its key is the source
    partition: compaction would keep only each partition's last run) nor cut by size; how long
    it keeps its runs is the leading controller's business (:mod:`strait.offsetmap.retention`).
    """
    admin = clients.admin(destination)
    futures = admin.create_topics(
        [NewTopic(topic, MAP_PARTITIONS, -1, config=dict(MAP_SETTINGS))], request_timeout=ADMIN_TIMEOUT_S
    )
    try:
        clients.admin_result(futures[topic], ADMIN_TIMEOUT_S + 5, f"creating {topic}")
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            log.warning("offset map topic %s not created: %s", topic, exc)
            return False
    return True


@dataclass(frozen=True)
class PartitionMap:
    """The merged runs of one source partition, and the destination topic it is copied to."""

    destination_topic: str
    runs: list[Run]


def read_map(
    destination: Mapping[str, Any], route: str, timeout_s: float = 30.0
) -> dict[tuple[str, int], PartitionMap]:
    """Every run of the route's map, merged per source (topic, partition)."""
    runs: dict[tuple[str, int], list[Run]] = {}
    topics: dict[tuple[str, int], str] = {}
    for entry, _size in _entries(destination, route, timeout_s):
        runs.setdefault((entry.topic, entry.partition), []).append(entry.run)
        topics[(entry.topic, entry.partition)] = entry.destination_topic
    return {key: PartitionMap(topics[key], merge(found)) for key, found in runs.items()}


@dataclass(frozen=True)
class MapSize:
    """What a route's map holds for some source topics (committed records only)."""

    records: int  # map records (a run re-published as it grew counts each time)
    runs: int  # distinct runs once merged
    bytes: int  # key and value bytes of those records
    partitions: int
    json_bytes: int  # what the same records took in the JSON encoding used before version 1


def map_size(destination: Mapping[str, Any], route: str, topics: Iterable[str], timeout_s: float = 30.0) -> MapSize:
    """How much of the route's map the source ``topics`` take (benchmarks: the map's cost)."""
    wanted = set(topics)
    records = size = json_size = 0
    runs: dict[tuple[str, int], list[Run]] = {}
    for entry, entry_bytes in _entries(destination, route, timeout_s):
        if entry.topic in wanted:
            records += 1
            size += entry_bytes
            json_size += sum(map(len, encode_json(entry)))
            runs.setdefault((entry.topic, entry.partition), []).append(entry.run)
    return MapSize(records, sum(len(merge(found)) for found in runs.values()), size, len(runs), json_size)


def _entries(destination: Mapping[str, Any], route: str, timeout_s: float) -> Iterator[tuple[MapEntry, int]]:
    """Every committed entry of the route's map, in order, with its key and value bytes."""
    topic = map_topic(route)
    consumer = clients.consumer(
        destination,
        **{
            # Never joins or commits; under the strait. prefix the destination role already grants.
            "group.id": f"strait.offsetmap-reader.{route}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # Exactly-once routes write runs inside their transactions: an aborted one's are not runs.
            "isolation.level": "read_committed",
        },
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            return
        partitions = list(described.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        open_partitions = set(partitions)
        deadline = time.monotonic() + timeout_s
        while open_partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading offset map {topic} took longer than {timeout_s:.0f}s")
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_partitions.discard(message.partition())
                        continue
                    raise KafkaException(error)
                value = message.value() or b""
                try:
                    entry = decode(value)
                except ValueError:
                    log.warning("offset map %s: skipping a record that is not an entry", topic)
                    continue
                yield entry, len(value) + len(message.key() or b"")
    finally:
        consumer.close()
