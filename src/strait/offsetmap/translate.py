"""Translating a source offset into the destination offset of the same record (pure logic).

A consumer group's committed offset C on the source means "the next record to read is C".
On the destination the same group must resume at the copy of C. Rules:

- The copy of C is in a run: resume there. If C was copied more than once (a resend after a
  fault), the latest copy from which every later record can still be read wins (a resend that
  had not caught up yet when the source went away must not hide what only the first copy
  holds); otherwise the earliest copy, which re-reads some records but skips none.
- C falls in a source gap (compacted away, a transaction marker): resume at the copy of the
  first record after C.
- C is past everything copied: resume after the last copy; the records from there to C were
  not replicated yet, and the result says how many (failover would re-read nothing, but those
  records are only on the source).
- C is below every run: exact only when the source holds no record from C up to the first
  copied one (compaction removed them before the copy began, or retention deleted them): the
  caller looks that up on the source and passes the offset of the first record at or after C
  as ``next_record``; the group resumes at the copy of the first copied record. Otherwise
  (records the copy never saw, or the map's retention passed them): no exact answer.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from strait.offsetmap.runs import Run


@dataclass(frozen=True)
class Translation:
    """Where a group resumes on the destination, and how exact that is."""

    destination: int | None  # None: no exact answer (see ``reason``)
    exact: bool
    not_replicated: int  # source records from the last copy up to the committed offset
    reason: str


def merge(runs: Iterable[Run]) -> list[Run]:
    """Runs as published (a run grows while open and is published again): keep each run's
    largest count, sorted by source offset, then destination offset."""
    best: dict[tuple[int, int], Run] = {}
    for run in runs:
        key = (run.source, run.destination)
        if key not in best or best[key].count < run.count:
            best[key] = run
    return sorted(best.values())


def translate(runs: list[Run], committed: int, next_record: int | None = None) -> Translation:
    """The destination offset for a source committed offset, given the merged runs of one
    partition (see :func:`merge`). ``next_record``: the source offset of the first record at or
    after ``committed`` still on the source (None: not looked up); used only below every run."""
    if not runs:
        return Translation(None, False, 0, "nothing of this partition was copied yet")
    containing = [r for r in runs if r.source <= committed < r.source_end]
    if containing:
        return Translation(_resume_at(runs, containing, committed), True, 0, "copy of the committed offset")
    if committed < runs[0].source:
        first = runs[0].source
        if next_record is not None and next_record >= first:
            copies = [r for r in runs if r.source == first]
            return Translation(
                _resume_at(runs, copies, first),
                True,
                0,
                f"source gap: no record from {committed} to the first copied one, {first}",
            )
        return Translation(None, False, 0, f"offset {committed} is older than the map (first {first})")
    # After every run, or in a gap between runs: the first copy of a later record.
    index = bisect.bisect_right([r.source for r in runs], committed)
    later = runs[index:]
    if later:
        first = min(r.source for r in later)
        copies = [r for r in later if r.source == first]
        return Translation(
            _resume_at(runs, copies, first), True, 0, f"source gap: first copied record after it is {first}"
        )
    copied_end = max(r.source_end for r in runs)
    last = max((r for r in runs if r.source_end == copied_end), key=lambda r: r.destination)
    return Translation(
        last.destination + last.count,
        True,
        committed - copied_end,
        "past the last copy: resume after it",
    )


def _resume_at(runs: list[Run], copies: list[Run], offset: int) -> int:
    """The destination offset of the latest copy of ``offset`` (one per run in ``copies``) from
    which every record at or after ``offset`` that was ever copied is still ahead; else the
    earliest copy."""
    needed = _cover((max(offset, r.source), r.source_end) for r in runs if r.source_end > offset)
    for run in sorted(copies, key=lambda r: r.destination, reverse=True):
        start = run.destination_of(offset)
        ahead = [(offset, run.source_end)] + [
            (max(offset, r.source), r.source_end) for r in runs if r.destination > start and r.source_end > offset
        ]
        if _covers(_cover(ahead), needed):
            return start
    return min(copies, key=lambda r: r.destination).destination_of(offset)


def _cover(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of half-open ranges, as sorted disjoint ranges."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted(r for r in ranges if r[1] > r[0]):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _covers(outer: list[tuple[int, int]], inner: list[tuple[int, int]]) -> bool:
    return all(any(lo <= low and high <= hi for lo, hi in outer) for low, high in inner)
