"""The benchmark's source side: topics, a pre-filled backlog, and traffic at a fixed rate.

Each partition's records carry sequences 0, 1, 2, ... in produce order, so the verifier
can tell exactly which ones reached the destination.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.bench.records import STAMP_SIZE, encode, payload_pool

Counts = dict[tuple[str, int], int]  # records produced per (topic, partition)


def create_topics(props: Mapping[str, Any], topics: Sequence[str], partitions: int, *, timeout_s: float = 30) -> None:
    """Create ``topics`` (replication factor 1: the sandbox clusters are small) and wait for them."""
    admin = clients.admin(props)
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics])
    for _topic, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=5)
        if all(t in metadata.topics and len(metadata.topics[t].partitions) == partitions for t in topics):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics {list(topics)} did not appear within {timeout_s}s")


def delete_topics(props: Mapping[str, Any], topics: Sequence[str], *, timeout_s: float = 30) -> None:
    """Delete ``topics`` (a long benchmark's copies would otherwise fill the disk)."""
    admin = clients.admin(props)
    for _topic, future in admin.delete_topics(list(topics), operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if "UNKNOWN_TOPIC_OR_PART" not in str(exc):
                raise


def _make_producer(props: Mapping[str, Any], compression: str, linger_ms: int, failures: list[str]) -> Any:
    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    return clients.producer(
        props,
        **{
            "acks": "all",
            "enable.idempotence": True,  # per-partition order of sequences must hold at the source
            "compression.type": compression,
            "linger.ms": linger_ms,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            "on_delivery": on_delivery,
            "log_level": 3,
        },
    )


def _produce(producer: Any, topic: str, partition: int, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value=value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)  # local queue full: let deliveries drain


def _flush(producer: Any, failures: list[str]) -> None:
    """Flush, then close the producer at once: one left to the garbage collector can outlive
    the sandbox and print librdkafka's connection failures on the terminal."""
    remaining = producer.flush(120)
    if remaining:
        producer.purge()  # close() itself flushes without a bound
    producer.close()
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered to the source within 120s")
    if failures:
        raise RuntimeError(f"{len(failures)} source deliveries failed, first: {failures[0]}")


def prefill(
    props: Mapping[str, Any],
    topic: str,
    partitions: int,
    records: int,
    size: int,
    *,
    compression: str = "none",
    payload: str = "filler",
) -> Counts:
    """Write ``records`` records of ``size`` bytes (bodies of the ``payload`` kind) spread evenly
    over the partitions, as fast as possible."""
    failures: list[str] = []
    # Batching favours throughput here: only the backlog's content matters, not its timing.
    producer = _make_producer(props, compression, 20, failures)
    counts = _fill(producer, topic, {(topic, p): 0 for p in range(partitions)}, records, size, payload)
    _flush(producer, failures)
    return counts


def _fill(producer: Any, topic: str, counts: Counts, records: int, size: int, payload: str = "filler") -> Counts:
    """Send ``records`` records round-robin over the partitions in ``counts`` (next sequence of each)."""
    counts = dict(counts)
    partitions = sorted(p for t, p in counts if t == topic)
    now_us = time.time_ns() // 1000
    for i in range(records):
        partition = partitions[i % len(partitions)]
        seq = counts[(topic, partition)]
        _produce(producer, topic, partition, encode(partition, seq, now_us, size, payload))
        counts[(topic, partition)] = seq + 1
        if i % 10_000 == 0:
            producer.poll(0)
            now_us = time.time_ns() // 1000
    return counts


class HeldBacklog:
    """A backlog written inside one open transaction: invisible to ``read_committed`` readers
    (Strait's fetchers, and MirrorMaker given ``isolation.level=read_committed``) until
    :meth:`commit`, when all of it appears at once. The transaction must be committed within
    ``timeout_s`` of its first record (the broker's ``transaction.max.timeout.ms`` caps it,
    15 minutes by default)."""

    def __init__(
        self, props: Mapping[str, Any], topic: str, start_seq: Counts, records: int, size: int, *, timeout_s: int = 900
    ) -> None:
        self._failures: list[str] = []
        self._open = True
        self._producer = clients.producer(
            props,
            **{
                "acks": "all",
                "transactional.id": f"strait-bench-backlog-{topic}",
                "transaction.timeout.ms": timeout_s * 1000,
                "linger.ms": 20,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 500_000,
                "on_delivery": self._delivered,
                "log_level": 3,
            },
        )
        self._producer.init_transactions(60)
        self._producer.begin_transaction()
        try:
            self.counts = _fill(self._producer, topic, start_seq, records, size)
            remaining = self._producer.flush(120)
            if remaining or self._failures:
                raise RuntimeError(
                    f"backlog not written: {remaining} records undelivered, {len(self._failures)} failed"
                    + (f" (first: {self._failures[0]})" if self._failures else "")
                )
        except BaseException:
            self.close()
            raise

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._failures.append(str(err))

    def commit(self) -> None:
        """Make the whole backlog visible, then release the producer."""
        try:
            self._producer.commit_transaction(60)
        finally:
            self._open = False
            self._producer.close()

    def close(self) -> None:
        """Abort (nothing becomes visible) and release the producer; a no-op after :meth:`commit`."""
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(KafkaException):
            self._producer.abort_transaction(30)
        self._producer.close()


def produce_at_rate(
    props: Mapping[str, Any],
    topics: Mapping[str, int],
    *,
    rate: float,
    duration_s: float,
    size: int,
    start_seq: Mapping[tuple[str, int], int] | None = None,
    compression: str = "none",
    stop: Callable[[], bool] | None = None,
    payload: str = "filler",
) -> Counts:
    """Send ``rate`` records/s for ``duration_s`` round-robin over every partition of ``topics``.

    Each record's stamp holds the wall-clock time of its send call, the origin of its
    end-to-end latency. The schedule is absolute (record i is due at start + i/rate), so a
    late wake-up is caught up rather than lowering the rate. Bodies are of the ``payload`` kind.
    """
    # Built before the schedule starts: a first record late by the pool's build would start a burst.
    payload_pool(payload, max(0, size - STAMP_SIZE))
    failures: list[str] = []
    # No batching delay: latency is the measurement, not producer efficiency.
    producer = _make_producer(props, compression, 0, failures)
    slots = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    counts: Counts = {slot: (start_seq or {}).get(slot, 0) for slot in slots}
    total = int(rate * duration_s)
    start = time.monotonic()
    for i in range(total):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0.001:
            producer.poll(0)
            time.sleep(delay)
        slot = slots[i % len(slots)]
        seq = counts[slot]
        _produce(producer, slot[0], slot[1], encode(slot[1], seq, time.time_ns() // 1000, size, payload))
        counts[slot] = seq + 1
        if stop is not None and i % 100 == 0 and stop():
            break
    _flush(producer, failures)
    return counts


def probe(props: Mapping[str, Any], topics: Mapping[str, int], size: int) -> Counts:
    """One record (sequence 0) per partition, to see when a replicator is copying."""
    failures: list[str] = []
    producer = _make_producer(props, "none", 0, failures)
    now_us = time.time_ns() // 1000
    counts: Counts = {}
    for topic, partitions in sorted(topics.items()):
        for p in range(partitions):
            _produce(producer, topic, p, encode(p, 0, now_us, size))
            counts[(topic, p)] = 1
    _flush(producer, failures)
    return counts
