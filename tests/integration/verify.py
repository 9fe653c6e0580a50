"""Count lost, duplicated and out-of-order records in a replicated topic.

Records come from `strait.demo.Generator`: value "<partition>:<seq>:<timestamp>", header seq,
and that timestamp. The verifier reads the destination copy and compares it with what the
generator had acknowledged at the source.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from strait import clients


@dataclass
class Report:
    """What the copy of one topic holds compared with the records produced."""

    expected: int = 0
    copied: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0  # first seen after a later record of its partition
    bad_metadata: int = 0  # header or timestamp not preserved
    lost_by_partition: dict[int, int] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return self.lost == 0 and self.duplicates == 0 and self.out_of_order == 0 and self.bad_metadata == 0


def _end_offsets(props: Mapping[str, Any], topic: str, partitions: int) -> dict[int, int]:
    consumer = clients.consumer(props, **{"group.id": "strait-verify", "enable.auto.commit": False})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def copied_counts(props: Mapping[str, Any], topic: str, partitions: int) -> dict[int, int]:
    """End offset of each partition of `topic` (how many records the copy holds, duplicates included)."""
    return _end_offsets(props, topic, partitions)


def verify(
    props: Mapping[str, Any],
    topic: str,
    produced: Mapping[int, int],
    *,
    timeout_s: float = 60.0,
) -> Report:
    """Read `topic` on the destination until every produced record arrived or `timeout_s` passed."""
    partitions = max(produced, default=-1) + 1
    seen: dict[int, set[int]] = {p: set() for p in range(partitions)}
    highest: dict[int, int] = {p: -1 for p in range(partitions)}
    report = Report(expected=sum(produced.values()))
    consumer = clients.consumer(props, **{"group.id": "strait-verify", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + timeout_s

    def complete() -> bool:
        return all(len(seen[p]) >= n for p, n in produced.items())

    try:
        while time.monotonic() < deadline and not complete():
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                value = message.value()
                if message.error() is not None or value is None:
                    continue
                partition, seq_text, timestamp = value.decode().split(":")
                seq, p = int(seq_text), int(partition)
                report.copied += 1
                if seq in seen[p]:
                    report.duplicates += 1
                    continue
                if seq < highest[p]:
                    report.out_of_order += 1
                seen[p].add(seq)
                highest[p] = max(highest[p], seq)
                headers = dict(message.headers() or [])
                if headers.get("seq") != str(seq).encode() or message.timestamp()[1] != int(timestamp):
                    report.bad_metadata += 1
    finally:
        consumer.close()
    for p, n in produced.items():
        missing = sum(1 for s in range(n) if s not in seen[p])
        if missing:
            report.lost_by_partition[p] = missing
    report.lost = sum(report.lost_by_partition.values())
    return report
