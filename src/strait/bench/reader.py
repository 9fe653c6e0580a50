"""The independent destination reader: every benchmark record's arrival, timed on this host.

It reads with its own consumer assigned to every partition from the beginning (no group,
no commits), so it measures what a downstream consumer would see and never disturbs the
replicator. Topics that do not exist yet on the destination are picked up as they appear,
which is how the add-topics scenario times a new topic's first record.
"""

from __future__ import annotations

import json
import time
import uuid
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from strait import clients
from strait.bench.records import Stamp, decode
from strait.bench.verifier import Verifier, VerifyReport

_ROW = 6  # topic index, destination partition, source partition, sequence, sent µs, arrived µs
_FOREIGN = -1


@dataclass
class Arrivals:
    """Columnar record of what arrived, in destination order per partition."""

    topics: list[str] = field(default_factory=list)
    rows: array[int] = field(default_factory=lambda: array("q"))

    def topic_index(self, topic: str) -> int:
        try:
            return self.topics.index(topic)
        except ValueError:
            self.topics.append(topic)
            return len(self.topics) - 1

    def add(self, topic_idx: int, dst_partition: int, src_partition: int, seq: int, sent_us: int, at_us: int) -> None:
        self.rows.extend((topic_idx, dst_partition, src_partition, seq, sent_us, at_us))

    def __len__(self) -> int:
        return len(self.rows) // _ROW

    def iter_rows(self) -> Iterator[tuple[str, int, int, int, int, int]]:
        """(topic, destination partition, source partition, sequence, sent µs, arrived µs) per record."""
        rows = self.rows
        for i in range(0, len(rows), _ROW):
            yield self.topics[rows[i]], rows[i + 1], rows[i + 2], rows[i + 3], rows[i + 4], rows[i + 5]

    def arrival_times(self, topic: str, partition: int | None = None) -> list[int]:
        """Arrival µs of the records of ``topic`` (optionally one source partition), in read order."""
        if topic not in self.topics:
            return []
        idx = self.topics.index(topic)
        rows = self.rows
        return [
            rows[i + 5]
            for i in range(0, len(rows), _ROW)
            if rows[i] == idx and (partition is None or rows[i + 2] == partition)
        ]

    def latencies_us(self, *, sent_after_us: int = 0, min_seq: int = 0) -> list[int]:
        rows = self.rows
        return [
            rows[i + 5] - rows[i + 4]
            for i in range(0, len(rows), _ROW)
            if rows[i + 2] != _FOREIGN and rows[i + 4] >= sent_after_us and rows[i + 3] >= min_seq
        ]

    def verifier(self, expected: Mapping[tuple[str, int], int]) -> Verifier:
        """A verifier fed everything read, against the counts produced per partition."""
        verifier = Verifier(expected)
        for topic, dst_partition, src_partition, seq, sent_us, _ in self.iter_rows():
            stamp = None if src_partition == _FOREIGN else Stamp(src_partition, seq, sent_us)
            verifier.observe(topic, dst_partition, stamp)
        return verifier

    def verify(self, expected: Mapping[tuple[str, int], int]) -> VerifyReport:
        """The verifier's verdict on everything read (missing records not split: see `strait.bench.positions`)."""
        return self.verifier(expected).report()

    def save(self, path: Path) -> None:
        path.with_suffix(".topics.json").write_text(json.dumps(self.topics))
        with open(path, "wb") as out:
            self.rows.tofile(out)

    @classmethod
    def load(cls, path: Path) -> Arrivals:
        rows: array[int] = array("q")
        rows.frombytes(path.read_bytes())
        return cls(json.loads(path.with_suffix(".topics.json").read_text()), rows)


def read(
    props: Mapping[str, Any],
    topics: Sequence[str],
    *,
    done: Callable[[int], bool],
    deadline_s: float,
    arrivals: Arrivals | None = None,
    on_ready: Callable[[], None] | None = None,
    ready_topics: Sequence[str] = (),
    isolation_level: str | None = None,
) -> Arrivals:
    """Read ``topics`` from the beginning until ``done(distinct records)`` or the deadline passes.

    ``done`` is asked after every batch with the number of distinct benchmark records so far
    (duplicates do not count), so a caller that knows how many records were produced can
    stop exactly when the last one arrived. ``on_ready`` is called once every topic in
    ``ready_topics`` is assigned, so a caller can hold its producers until the reader is set.
    ``isolation_level`` (``read_committed`` / ``read_uncommitted``) is librdkafka's default when None.
    """
    arrivals = arrivals or Arrivals()
    consumer = clients.consumer(
        props,
        **{
            "group.id": f"strait-bench-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            # Small waits: arrival times are the measurement, the broker must not sit on data.
            "fetch.wait.max.ms": 20,
            "log_level": 3,
            **({"isolation.level": isolation_level} if isolation_level is not None else {}),
        },
    )
    seen: dict[tuple[int, int], bytearray] = {}
    distinct = 0
    pending = list(topics)
    next_metadata = 0.0
    end = time.monotonic() + deadline_s
    try:
        while True:
            now = time.monotonic()
            if pending and now >= next_metadata:
                pending = _assign_new(consumer, pending)
                next_metadata = now + 0.2
            if on_ready is not None and not set(ready_topics) & set(pending):
                on_ready()
                on_ready = None
            # consume(n, t) waits for n records or t: at low rates that would stamp every arrival
            # up to t late. Take what is ready; if nothing is, wait for the first record only.
            messages = consumer.consume(num_messages=1000, timeout=0)
            if not messages:
                messages = consumer.consume(num_messages=1, timeout=0.05)
            at_us = time.time_ns() // 1000
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                        continue
                    raise RuntimeError(f"destination reader: {error}")
                topic = message.topic()
                assert topic is not None
                idx = arrivals.topic_index(topic)
                stamp = decode(message.value())
                dst_partition = message.partition() or 0
                if stamp is None:
                    arrivals.add(idx, dst_partition, _FOREIGN, 0, 0, at_us)
                    continue
                arrivals.add(idx, dst_partition, stamp.partition, stamp.seq, stamp.sent_us, at_us)
                bitmap = seen.setdefault((idx, stamp.partition), bytearray())
                if stamp.seq >= len(bitmap):
                    bitmap.extend(bytes(stamp.seq + 1 - len(bitmap) + 4096))
                if not bitmap[stamp.seq]:
                    bitmap[stamp.seq] = 1
                    distinct += 1
            if done(distinct) or time.monotonic() > end:
                return arrivals
    finally:
        consumer.close()


def _assign_new(consumer: Any, pending: list[str]) -> list[str]:
    """Assign the partitions of every pending topic that now exists; return those still missing."""
    try:
        metadata = consumer.list_topics(timeout=2)
    except Exception:
        return pending
    still: list[str] = []
    partitions = []
    for topic in pending:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            still.append(topic)
            continue
        partitions += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(meta.partitions)]
    if partitions:
        consumer.incremental_assign(partitions)
    return still
