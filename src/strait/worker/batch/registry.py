"""The producer registry: which producer ids on a cluster are Strait's two-way batch copies.

One compacted topic per cluster, ``__strait_producers``, one partition, one record per producer
id (the key: the id in decimal; the value: the cluster it copies from, which pipeline, and
when). A two-way route's batch pipeline publishes each producer id it gets from its
destination here, on the destination, and waits for every in-sync replica to acknowledge it
before the id writes its first batch; the opposite route reads it on its source
(:mod:`strait.worker.batch.provenance`). Records are never deleted: keys never repeat and no
tombstone is written, so compaction keeps them all and an id stays known as long as the
batches it wrote can be fetched. Each record is about 100 bytes; a partition start or rewind
on a two-way route adds one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients

log = logging.getLogger(__name__)

TOPIC = "__strait_producers"
# Compacted, and nothing ever removes a record: no key repeats, no tombstone is written.
TOPIC_SETTINGS: Mapping[str, str] = {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}
ADMIN_TIMEOUT_S = 15.0
ENSURE_RETRY_S = 30.0
PUBLISH_TIMEOUT_MS = 30_000
READ_TIMEOUT_S = 30.0


def encode(producer_id: int, source: str, by: str, at_ms: int) -> tuple[bytes, bytes]:
    """The registry record (key, value) of ``producer_id``, whose batches are copies from the
    cluster ``source``, published by the client ``by`` (``strait-<route>-<worker>-<pipeline>``)."""
    value = {"source": source, "by": by, "at_ms": at_ms}
    return str(producer_id).encode(), json.dumps(value, separators=(",", ":")).encode()


def decode_key(key: bytes | None) -> int | None:
    """The producer id a registry record names, None for a record that names none."""
    try:
        return int(key) if key else None
    except ValueError:
        return None


def decode_source(value: bytes | None) -> str | None:
    """The cluster whose records a registered producer id copies, None when unreadable."""
    try:
        source = json.loads(value or b"").get("source")
    except (ValueError, AttributeError):
        return None
    return source if isinstance(source, str) else None


def ensure_topic(props: Mapping[str, Any]) -> None:
    """Create the registry topic if missing (raises when it can be neither found nor made)."""
    admin = clients.admin(dict(props))
    futures = admin.create_topics(
        [NewTopic(TOPIC, 1, -1, config=dict(TOPIC_SETTINGS))], request_timeout=ADMIN_TIMEOUT_S
    )
    try:
        clients.admin_result(futures[TOPIC], ADMIN_TIMEOUT_S + 5, f"creating {TOPIC}")
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class Published:
    """One publication under way: ``done`` once the cluster answered, ``error`` if it refused."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = False
        self.error: str | None = None

    def _delivered(self, err: Any, _msg: Any) -> None:
        self.error = None if err is None else str(err)
        self.done = True


class RegistryWriter:
    """Publishes a pipeline's producer ids to its destination's registry (acks=all, polled by
    the pipeline's loop: never blocks it except to create the topic once)."""

    def __init__(self, props: Mapping[str, Any], *, source: str, by: str, client_id: str) -> None:
        self._props = props
        self._source = source
        self._by = by
        self._ready = False
        self._next_ensure = 0.0
        self._producer = clients.producer(
            dict(props),
            **{
                "client.id": f"{client_id}-producers",
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": True,
                # A registry that cannot be written holds its partitions: said within this.
                "message.timeout.ms": PUBLISH_TIMEOUT_MS,
            },
        )

    def publish(self, producer_id: int) -> Published:
        """Publish ``producer_id``; the answer comes through :meth:`poll`."""
        handle = Published()
        if not self._ready and time.monotonic() >= self._next_ensure:
            try:
                ensure_topic(self._props)
                self._ready = True
            except KafkaException as exc:
                # (Created by an operator, it is written all the same.)
                log.warning("%s not created (%s); writing to it anyway", TOPIC, exc)
                self._next_ensure = time.monotonic() + ENSURE_RETRY_S
        try:
            key, value = encode(producer_id, self._source, self._by, int(time.time() * 1000))
            self._producer.produce(TOPIC, value, key, partition=0, on_delivery=handle._delivered)
        except (BufferError, KafkaException) as exc:
            handle.error, handle.done = f"{type(exc).__name__}: {exc}", True
        return handle

    def poll(self) -> None:
        """Serve delivery answers that arrived."""
        self._producer.poll(0)

    def close(self) -> None:
        self._producer.flush(5)


class RegistryReader:
    """Reads a cluster's registry, each read from where the last one stopped to the end, for
    the producer ids that copy from ``source`` (the reading route's destination: with more than
    two clusters, copies that came from a third one are not this route's to skip)."""

    def __init__(self, props: Mapping[str, Any], *, source: str, client_id: str) -> None:
        self._source = source
        self._consumer = clients.consumer(
            dict(props),
            **{
                "group.id": f"{client_id}-producers",  # never committed: the position is kept here
                "client.id": f"{client_id}-producers",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            },
        )
        self._props = props
        self._position = 0
        self._assigned = False
        self._exists = False

    def read(self, timeout_s: float = READ_TIMEOUT_S) -> set[int]:
        """The producer ids published since the last read, up to the registry's end now.
        Raises when the end cannot be read in ``timeout_s``.

        The first read creates the topic if it is missing: a topic reported missing is then a
        broker not yet told of it, an error, never an empty registry (which would make the
        opposite route's copies look like a user's)."""
        if not self._exists:
            self._exists = True
            try:
                ensure_topic(self._props)
            except KafkaException as exc:  # (no CREATE here: one that exists is read all the same)
                log.warning("%s not created on the source (%s)", TOPIC, exc)
        partition = TopicPartition(TOPIC, 0)
        low, high = self._consumer.get_watermark_offsets(partition, timeout=timeout_s, cached=False)
        found: set[int] = set()
        if high <= self._position:
            return found
        if not self._assigned or self._position < low:
            self._position = max(self._position, low)
            self._consumer.assign([TopicPartition(TOPIC, 0, self._position)])
            self._assigned = True
        deadline = time.monotonic() + timeout_s
        while self._position < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{TOPIC} not read to {high} in {timeout_s:.0f}s (at {self._position})")
            for message in self._consumer.consume(1000, 0.2):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(error)
                offset = message.offset()
                assert offset is not None  # (a message without an error has one)
                self._position = offset + 1
                producer_id = decode_key(message.key())
                if producer_id is not None and decode_source(message.value()) == self._source:
                    found.add(producer_id)
        return found

    def close(self) -> None:
        self._consumer.close()
