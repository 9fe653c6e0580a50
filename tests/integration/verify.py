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
    # Where the losses are: per partition, runs of lost sequence numbers as (first, last), and
    # for each run the destination offset of the first record copied after it (None: the run is
    # the partition's tail, i.e. never copied, or not yet when the timeout hit) and, if the
    # source was given, the source offsets of the run's first and last records.
    lost_seqs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    gap_at_destination_offset: dict[int, list[int | None]] = field(default_factory=dict)
    lost_source_offsets: dict[int, list[tuple[int | None, int | None]]] = field(default_factory=dict)
    # Records whose sequence number is at or beyond the produced count (acknowledged after the
    # count was taken): not counted as copies of expected records.
    beyond_expected: int = 0

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


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    """Sorted sequence numbers as runs of consecutive ones: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def source_offsets(
    props: Mapping[str, Any], topic: str, partition: int, seqs: set[int], timeout_s: float = 30.0
) -> dict[int, int]:
    """Source offsets of the records with sequence numbers `seqs` in one partition of `topic`."""
    found: dict[int, int] = {}
    consumer = clients.consumer(props, **{"group.id": "strait-verify", "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout_s
        position = 0
        while time.monotonic() < deadline and position < end and len(found) < len(seqs):
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                value, offset = message.value(), message.offset()
                if message.error() is not None or value is None or offset is None:
                    continue
                position = offset + 1
                seq = int(value.decode().split(":")[1])
                if seq in seqs:
                    found.setdefault(seq, offset)
    finally:
        consumer.close()
    return found


def verify(
    props: Mapping[str, Any],
    topic: str,
    produced: Mapping[int, int],
    *,
    timeout_s: float = 60.0,
    source: Mapping[str, Any] | None = None,
) -> Report:
    """Read `topic` on the destination until every produced record arrived or `timeout_s` passed.

    With `source` (the source cluster's properties), lost records are also located at the source.
    """
    # Sequence numbers the generator's producer never got into the source (a failed delivery):
    # the records acknowledged are 0..n+f-1 without those f.
    failed: Mapping[int, set[int]] = getattr(produced, "failed", {})
    ends = {p: n + len(failed.get(p, ())) for p, n in produced.items()}
    partitions = max(produced, default=-1) + 1
    seen: dict[int, set[int]] = {p: set() for p in range(partitions)}
    highest: dict[int, int] = {p: -1 for p in range(partitions)}
    # Destination offset at which each sequence number was first seen.
    offsets: dict[int, dict[int, int]] = {p: {} for p in range(partitions)}
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
                if seq >= ends.get(p, 0):
                    report.beyond_expected += 1
                if seq in seen[p]:
                    report.duplicates += 1
                    continue
                if seq < highest[p]:
                    report.out_of_order += 1
                seen[p].add(seq)
                offsets[p][seq] = message.offset() or 0
                highest[p] = max(highest[p], seq)
                headers = dict(message.headers() or [])
                if headers.get("seq") != str(seq).encode() or message.timestamp()[1] != int(timestamp):
                    report.bad_metadata += 1
    finally:
        consumer.close()
    for p, end in ends.items():
        missing = [s for s in range(end) if s not in seen[p] and s not in failed.get(p, ())]
        if not missing:
            continue
        report.lost_by_partition[p] = len(missing)
        runs = _runs(missing)
        report.lost_seqs[p] = runs
        # The first record copied after each run: its destination offset locates the hole.
        after = sorted(offsets[p].items())
        report.gap_at_destination_offset[p] = [
            next((offset for seq, offset in after if seq > last), None) for _, last in runs
        ]
        if source is not None:
            located = source_offsets(source, topic, p, set(missing))
            report.lost_source_offsets[p] = [(located.get(first), located.get(last)) for first, last in runs]
    report.lost = sum(report.lost_by_partition.values())
    return report
