"""Count every record: lost, duplicated and out of order, per source partition.

Pure logic, no I/O: the caller feeds what it read from the destination, in the order the
destination holds it (offset order within a destination partition), and says how many
records each source partition received (sequences ``0 .. n-1``).

Definitions, chosen so that at-least-once redelivery is not mistaken for reordering:
- *missing*: a sequence below the expected count that the reader did not see; split, once the
  replicator's committed positions are known (`strait.bench.missing`), into *lost* (the committed
  position moved past it: it is never going to arrive) and *not yet copied* (the rest);
- *duplicated*: every arrival of a sequence beyond its first;
- *out of order*: the first arrival of a sequence lower than one already seen in the same
  partition (a replay of records already delivered counts as duplicates only);
- *misrouted*: a record that landed in a different destination partition than its source one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strait.bench.missing import Missing, Split
from strait.bench.records import Stamp

PartitionKey = tuple[str, int]  # (topic, partition)

_MAX_RANGES = 5


@dataclass(frozen=True)
class PartitionReport:
    """The verdict for one source partition."""

    topic: str
    partition: int
    expected: int
    received: int
    missing: int
    duplicated: int
    out_of_order: int
    misrouted: int
    unexpected: int
    missing_ranges: tuple[tuple[int, int], ...] = ()
    # The split of `missing` (None until the replicator's committed position was compared).
    lost: int | None = None
    not_yet_copied: int | None = None
    committed: int | None = None  # the replicator's committed source offset, when it was read
    lost_ranges: tuple[tuple[int, int], ...] = ()

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.out_of_order == 0 and self.misrouted == 0 and self.unexpected == 0


@dataclass(frozen=True)
class VerifyReport:
    """The verdict for a whole run."""

    partitions: tuple[PartitionReport, ...]
    foreign: int = 0  # destination values that are not benchmark records

    @property
    def expected(self) -> int:
        return sum(p.expected for p in self.partitions)

    @property
    def received(self) -> int:
        return sum(p.received for p in self.partitions)

    @property
    def missing(self) -> int:
        return sum(p.missing for p in self.partitions)

    @property
    def lost(self) -> int | None:
        """Missing records the committed position moved past (None: not split)."""
        return _sum_split([p.lost for p in self.partitions if p.missing])

    @property
    def not_yet_copied(self) -> int | None:
        """Missing records a restart from the committed position would still copy (None: not split)."""
        return _sum_split([p.not_yet_copied for p in self.partitions if p.missing])

    @property
    def duplicated(self) -> int:
        return sum(p.duplicated for p in self.partitions)

    @property
    def out_of_order(self) -> int:
        return sum(p.out_of_order for p in self.partitions)

    @property
    def misrouted(self) -> int:
        return sum(p.misrouted for p in self.partitions)

    @property
    def unexpected(self) -> int:
        return sum(p.unexpected for p in self.partitions)

    @property
    def ok(self) -> bool:
        """Nothing missing, no reordering, nothing misplaced (duplicates are reported, not failed)."""
        return all(p.ok for p in self.partitions) and self.foreign == 0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "expected": self.expected,
            "received": self.received,
            "missing": self.missing,
            "lost": self.lost,
            "not_yet_copied": self.not_yet_copied,
            "duplicated": self.duplicated,
            "out_of_order": self.out_of_order,
            "misrouted": self.misrouted,
            "unexpected": self.unexpected,
            "foreign": self.foreign,
            "ok": self.ok,
        }
        lost = [
            {"topic": p.topic, "partition": p.partition, "committed": p.committed, "seq": list(p.lost_ranges)}
            for p in self.partitions
            if p.lost
        ]
        if lost:
            out["lost_where"] = lost
        return out


def _sum_split(values: list[int | None]) -> int | None:
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


@dataclass
class _Tally:
    seen: bytearray = field(default_factory=bytearray)
    received: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    misrouted: int = 0
    unexpected: int = 0
    highest: int = -1


class Verifier:
    """Accumulates destination records and judges them against the expected counts."""

    def __init__(self, expected: Mapping[PartitionKey, int]) -> None:
        for key, count in expected.items():
            if count < 0:
                raise ValueError(f"expected count of {key} must be >= 0, got {count}")
        self._expected = dict(expected)
        self._tallies: dict[PartitionKey, _Tally] = {key: _Tally(bytearray(n)) for key, n in expected.items()}
        self._foreign = 0

    def observe(self, topic: str, dst_partition: int, stamp: Stamp | None) -> None:
        """One destination record, in destination offset order within its partition."""
        if stamp is None:
            self._foreign += 1
            return
        key = (topic, stamp.partition)
        tally = self._tallies.get(key)
        if tally is None:
            # A partition nobody wrote to: count it so it is visible rather than dropped.
            tally = self._tallies[key] = _Tally()
            self._expected.setdefault(key, 0)
        tally.received += 1
        if stamp.partition != dst_partition:
            tally.misrouted += 1
        seq = stamp.seq
        if seq >= self._expected[key]:
            tally.unexpected += 1
            return
        if tally.seen[seq]:
            tally.duplicated += 1
            return
        tally.seen[seq] = 1
        if seq < tally.highest:
            tally.out_of_order += 1
        else:
            tally.highest = seq

    def missing(self) -> dict[PartitionKey, Missing]:
        """The sequence numbers not seen, per partition that has any."""
        out = {}
        for key, tally in self._tallies.items():
            gone = Missing(bytes(tally.seen))
            if len(gone):
                out[key] = gone
        return out

    def report(self, split: Mapping[PartitionKey, Split] | None = None) -> VerifyReport:
        """The verdict; with `split` (from `strait.bench.missing.split`), missing records are told
        apart into lost and not yet copied. Without it, they stay unsplit (lost is None)."""
        reports = []
        for key in sorted(self._tallies):
            tally = self._tallies[key]
            expected = self._expected[key]
            missing = expected - tally.seen.count(1)
            verdict = (split or {}).get(key)
            lost: int | None = None
            if verdict is not None:
                lost = verdict.lost
            elif split is not None and missing == 0:
                lost = 0
            reports.append(
                PartitionReport(
                    topic=key[0],
                    partition=key[1],
                    expected=expected,
                    received=tally.received,
                    missing=missing,
                    duplicated=tally.duplicated,
                    out_of_order=tally.out_of_order,
                    misrouted=tally.misrouted,
                    unexpected=tally.unexpected,
                    missing_ranges=_missing_ranges(tally.seen),
                    lost=lost,
                    not_yet_copied=None if lost is None else missing - lost,
                    committed=verdict.committed if verdict else None,
                    lost_ranges=verdict.lost_ranges if verdict else (),
                )
            )
        return VerifyReport(partitions=tuple(reports), foreign=self._foreign)


def _missing_ranges(seen: bytearray) -> tuple[tuple[int, int], ...]:
    """The first few runs of missing sequences, as inclusive (first, last) pairs, for diagnosis."""
    ranges: list[tuple[int, int]] = []
    start = seen.find(0)
    while start != -1 and len(ranges) < _MAX_RANGES:
        end = seen.find(1, start)
        last = (len(seen) if end == -1 else end) - 1
        ranges.append((start, last))
        if end == -1:
            break
        start = seen.find(0, end)
    return tuple(ranges)
