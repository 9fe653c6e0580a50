"""Records the benchmark's reader did not find in the copy: lost, or not yet copied.

When a run's measuring window closes, a benchmark record the reader has not seen at the
destination is one of two things, told apart by the replicator's *committed position* on the
record's source partition (the source offset it resumes from after a restart: Strait's
checkpoint, MirrorMaker 2's source offset as Kafka Connect committed it, plus one):

- **lost**: the committed position is past the record, and the destination still does not hold
  it when read again after the position was read. Nothing will copy it any more: a restart
  resumes after it, and a running replicator only moves forward.
- **not yet copied**: the committed position is not past it, so the replicator (or its
  successor after a restart) still copies it; or it reached the destination after the reader
  stopped (found on the second read).

Pure: the callers read the clusters (`strait.bench.positions`) and pass what they read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

Key = tuple[str, int]  # (topic, source partition)

_MAX_RANGES = 5


@dataclass(frozen=True)
class Missing:
    """The sequence numbers of one source partition the reader did not see: `seen` holds one byte
    per expected sequence number, 1 where it arrived."""

    seen: bytes

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and 0 <= seq < len(self.seen) and not self.seen[seq]

    def __len__(self) -> int:
        return len(self.seen) - self.seen.count(1)

    def __iter__(self) -> Iterator[int]:
        start = self.seen.find(0)
        while start != -1:
            yield start
            start = self.seen.find(0, start + 1)


@dataclass(frozen=True)
class Split:
    """The verdict on one partition's missing records."""

    lost: int
    not_yet_copied: int
    committed: int | None  # the committed position that was read (None: nothing committed)
    arrived_late: int = 0  # behind the committed position, missing at the window's close, found later
    lost_ranges: tuple[tuple[int, int], ...] = ()  # the first runs of lost sequence numbers


def split(
    missing: Mapping[Key, Missing],
    committed: Mapping[Key, int | None],
    *,
    behind: Callable[[Key, int], Iterable[tuple[int, int]]],
    present: Callable[[Key, set[int]], set[int]],
) -> dict[Key, Split]:
    """Split each partition's missing records into lost and not yet copied.

    `committed[key]`: the next source offset the replicator would read after a restart (None
    or absent: it committed nothing, so it starts over and everything is still to be copied).
    `behind(key, position)`: (source offset, sequence number) of the benchmark records of the
    partition at offsets below `position`. `present(key, seqs)`: which of `seqs` the copy holds
    now; asked only after `committed` was read, so a record copied in between is not lost.
    """
    out: dict[Key, Split] = {}
    for key, gone in missing.items():
        position = committed.get(key)
        candidates: set[int] = set()
        if position is not None and position > 0:
            candidates = {seq for offset, seq in behind(key, position) if offset < position and seq in gone}
        late = present(key, candidates) & candidates if candidates else set()
        lost = candidates - late
        out[key] = Split(
            lost=len(lost),
            not_yet_copied=len(gone) - len(lost),
            committed=position,
            arrived_late=len(late),
            lost_ranges=_ranges(sorted(lost)),
        )
    return out


def _ranges(seqs: list[int]) -> tuple[tuple[int, int], ...]:
    """Sorted sequence numbers as the first few inclusive runs: [1, 2, 3, 7] -> ((1, 3), (7, 7))."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1] = (runs[-1][0], seq)
        elif len(runs) == _MAX_RANGES:
            break
        else:
            runs.append((seq, seq))
    return tuple(runs)
