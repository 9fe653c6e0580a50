"""What the chaos runner reads from the clusters: ends, checkpoints, the copy, the source.

Every consumer here is assigned partitions by hand and never commits, so reading cannot move
a checkpoint or join a group.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from strait import clients
from strait.bench.chaos.check import CopyCheck, Key
from strait.bench.records import decode

_READER = {"group.id": "strait-chaos-check", "enable.auto.commit": False, "log_level": 0}


def partition_counts(props: Mapping[str, Any], topics: Iterable[str]) -> dict[str, int]:
    """Partitions of each topic that exists (absent topics are left out)."""
    metadata = clients.admin(props, log_level=0).list_topics(timeout=30).topics
    return {t: len(metadata[t].partitions) for t in topics if t in metadata and metadata[t].error is None}


def end_offsets(props: Mapping[str, Any], keys: Iterable[Key]) -> dict[Key, int]:
    consumer = clients.consumer(props, **_READER)
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1] for t, p in keys}
    finally:
        consumer.close()


def checkpoints(props: Mapping[str, Any], group: str, keys: Iterable[Key]) -> dict[Key, int | None]:
    """The offsets committed by `group` (None where it committed nothing); reading joins no group."""
    consumer = clients.consumer(props, **{**_READER, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in found}


def lag(source: Mapping[str, Any], group: str, keys: list[Key]) -> dict[Key, int]:
    """Records each partition's checkpoint is behind the source's end (partitions with lag only)."""
    ends = end_offsets(source, keys)
    done = checkpoints(source, group, keys)
    return {k: ends[k] - (done.get(k) or 0) for k in keys if ends[k] > (done.get(k) or 0)}


def read_copy(
    props: Mapping[str, Any],
    topics: Mapping[str, int],
    check: CopyCheck,
    *,
    read_committed: bool,
    timeout_s: float,
    progress: Callable[[str], None] = lambda _m: None,
) -> set[Key]:
    """Feed every record of `topics` (name -> partitions) to `check`; the partitions not read to the end.

    With `read_committed`, a transaction left open by a killed writer holds the reader back
    until the broker aborts it (the transaction timeout), hence the generous `timeout_s`.
    """
    keys = [(t, p) for t, n in topics.items() for p in range(n)]
    ends = end_offsets(props, keys)
    consumer = clients.consumer(
        props, **{**_READER, "isolation.level": "read_committed" if read_committed else "read_uncommitted"}
    )
    remaining = {k for k in keys if ends[k] > 0}
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(remaining)])
    deadline = time.monotonic() + timeout_s
    reported = time.monotonic()
    try:
        while remaining and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=5000, timeout=0.5)
            for message in messages:
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if message.error() is not None or topic is None or partition is None or offset is None:
                    continue
                stamp = decode(message.value())
                if stamp is None:
                    check.observe(topic, partition, offset, None, 0)
                else:
                    check.observe(topic, partition, offset, stamp.partition, stamp.seq, stamp.sent_us)
                if offset + 1 >= ends[(topic, partition)]:
                    remaining.discard((topic, partition))
            if not messages and remaining:
                # Control records (transaction markers) at the end move the position, not messages.
                for tp in consumer.position([TopicPartition(t, p) for t, p in remaining]):
                    if tp.offset >= ends[(tp.topic, tp.partition)]:
                        remaining.discard((tp.topic, tp.partition))
            if time.monotonic() - reported > 15:
                reported = time.monotonic()
                progress(f"reading the copy: {len(remaining)} partitions not at their end yet")
    finally:
        consumer.close()
    return remaining


def locate(props: Mapping[str, Any], key: Key, seqs: set[int], timeout_s: float = 120.0) -> dict[int, tuple[int, int]]:
    """(source offset, send time in µs) of the records of one partition with sequence numbers `seqs`."""
    topic, partition = key
    found: dict[int, tuple[int, int]] = {}
    end = end_offsets(props, [key])[key]
    consumer = clients.consumer(props, **_READER)
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    deadline = time.monotonic() + timeout_s
    position = 0
    try:
        while position < end and len(found) < len(seqs) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                offset = message.offset()
                if message.error() is not None or offset is None:
                    continue
                position = offset + 1
                stamp = decode(message.value())
                if stamp is not None and stamp.seq in seqs:
                    found.setdefault(stamp.seq, (offset, stamp.sent_us))
    finally:
        consumer.close()
    return found
