"""Writing and reading a route's offset map on the destination cluster."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.offsetmap.codec import MapEntry, decode, encode, map_topic
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
    translation then reports, never the data.
    """

    def __init__(self, destination: Mapping[str, Any], route: str, *, client_id: str) -> None:
        self.topic = map_topic(route)
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
        for topic, partition, destination_topic, run in pending:
            key, value = encode(MapEntry(topic, partition, destination_topic, run))
            try:
                self._producer.produce(self.topic, value, key, partition=0, on_delivery=self._delivered)
            except (BufferError, KafkaException) as exc:
                self._failed(exc)
            self.bytes += len(key) + len(value)

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.flush(timeout_s)

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is None:
            self.published += 1
        else:
            self._failed(error)

    def _failed(self, error: Any) -> None:
        self.failures += 1
        if self.failures == 1 or self.failures % 1000 == 0:
            log.warning("offset map %s: a run was not published (%d so far): %s", self.topic, self.failures, error)


def ensure_map_topic(destination: Mapping[str, Any], topic: str) -> bool:
    """Create the map topic if missing; True once it exists."""
    admin = clients.admin(destination)
    futures = admin.create_topics([NewTopic(topic, MAP_PARTITIONS, -1)], request_timeout=ADMIN_TIMEOUT_S)
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
    topic = map_topic(route)
    consumer = clients.consumer(
        destination,
        **{
            # Never joins or commits; under the strait. prefix the destination role already grants.
            "group.id": f"strait.offsetmap-reader.{route}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        },
    )
    runs: dict[tuple[str, int], list[Run]] = {}
    topics: dict[tuple[str, int], str] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            return {}
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
                try:
                    entry = decode(message.value() or b"")
                except ValueError:
                    log.warning("offset map %s: skipping a record that is not an entry", topic)
                    continue
                runs.setdefault((entry.topic, entry.partition), []).append(entry.run)
                topics[(entry.topic, entry.partition)] = entry.destination_topic
    finally:
        consumer.close()
    return {key: PartitionMap(topics[key], merge(found)) for key, found in runs.items()}
