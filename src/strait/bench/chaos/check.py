"""Judge the copy record by record, per source partition. Pure: the caller reads, this counts.

The producer knows exactly which sequence numbers the source acknowledged (`acked`: one byte
per sequence number, 1 = acknowledged); the destination is fed to `CopyCheck.observe` in offset
order. Counted per partition:
- *duplicates*: every arrival of a sequence number after its first;
- *out of order*: a first arrival below the highest sequence number already seen (a re-sent
  range after a failure repeats records and counts as duplicates only);
- *interleaved*: a repeat that neither starts nor continues an ascending re-sent range, i.e.
  two writers at once rather than one writer going back to its checkpoint;
- *missing*: acknowledged records that never arrived, split by where the route's checkpoint
  stands: *lost* if the checkpoint moved past them (no owner will ever copy them again) or the
  source no longer has them, *not yet copied* if it did not (the copy had not caught up when
  the wait ran out). Both fail a run; the split says which problem it is.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, int]  # (topic, partition)

_MAX_RUNS = 10
_MAX_RESENDS = 3
_MAX_PROBLEMS = 5


@dataclass(frozen=True)
class MissingRun:
    """Consecutive missing sequence numbers of one partition, and where they were."""

    first: int
    last: int
    verdict: str  # "lost" | "not yet copied"
    source_offsets: tuple[int | None, int | None] = (None, None)
    sent_us: tuple[int | None, int | None] = (None, None)  # when the producer sent the first and last
    next_destination_offset: int | None = None  # of the first record copied after the run

    @property
    def records(self) -> int:
        return self.last - self.first + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": [self.first, self.last],
            "records": self.records,
            "verdict": self.verdict,
            "source_offsets": list(self.source_offsets),
            "sent_us": list(self.sent_us),
            "next_destination_offset": self.next_destination_offset,
        }


@dataclass(frozen=True)
class PartitionVerdict:
    topic: str
    partition: int
    produced: int  # acknowledged by the source
    checked: int  # distinct acknowledged records found in the copy
    lost: int
    not_yet_copied: int
    duplicates: int
    out_of_order: int
    interleaved: int
    resent_ranges: int
    misrouted: int
    unacknowledged_copied: int  # records whose produce failed but which reached the source anyway
    checkpoint: int | None
    runs: tuple[MissingRun, ...] = ()
    # The largest re-sent ranges as (first sequence number, records, its first send time in µs):
    # how far behind the copy its checkpoint was when an owner went back to it.
    largest_resends: tuple[tuple[int, int, int], ...] = ()
    # Every re-sent range as (records, first and last send time in µs), to place it next to the
    # fault that caused it; not part of the JSON (the summary aggregates it per fault kind).
    resends: tuple[tuple[int, int, int], ...] = ()
    # Where the first out-of-order and interleaved records are, for a person to look at.
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "topic",
                "partition",
                "produced",
                "checked",
                "lost",
                "not_yet_copied",
                "duplicates",
                "out_of_order",
                "interleaved",
                "resent_ranges",
                "misrouted",
                "unacknowledged_copied",
                "checkpoint",
            )
        }
        if self.runs:
            out["missing_runs"] = [r.to_json() for r in self.runs]
        if self.problems:
            out["problems"] = list(self.problems)
        if self.largest_resends:
            out["largest_resends"] = [{"seq": s, "records": n, "sent_us": t} for s, n, t in self.largest_resends]
        return out


@dataclass
class _Partition:
    seen: bytearray
    first_offset: array[int]  # destination offset of each sequence number's first arrival
    highest: int = -1
    previous: int = -2
    in_range: bool = False
    duplicates: int = 0
    out_of_order: int = 0
    interleaved: int = 0
    resent_ranges: int = 0
    misrouted: int = 0
    beyond: int = 0
    # [first seq, records, first send time µs, last send time µs]
    resends: list[list[int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def note(self, problem: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(problem)


@dataclass
class CopyCheck:
    """Accumulates the destination's records and judges them against what was acknowledged."""

    acked: Mapping[Key, bytes]
    _parts: dict[Key, _Partition] = field(default_factory=dict)
    foreign: int = 0  # destination values that are not chaos records

    def observe(
        self, topic: str, dst_partition: int, dst_offset: int, partition: int | None, seq: int, sent_us: int = 0
    ) -> None:
        """One destination record, in offset order within its partition (`partition` None: not ours)."""
        if partition is None:
            self.foreign += 1
            return
        state = self._state((topic, partition))
        if partition != dst_partition:
            state.misrouted += 1
        if seq >= len(state.seen):
            state.beyond += 1
            return
        if state.seen[seq]:
            state.duplicates += 1
            if state.in_range and seq != state.previous + 1:
                state.interleaved += 1
                state.note(f"interleaved: destination offset {dst_offset} repeats {seq} after {state.previous}")
            if not state.in_range or seq != state.previous + 1:
                state.resent_ranges += 1
                state.resends.append([seq, 0, sent_us, sent_us])
            state.resends[-1][1] += 1
            state.resends[-1][3] = sent_us
            state.in_range = True
        else:
            state.seen[seq] = 1
            state.first_offset[seq] = dst_offset
            if seq < state.highest:
                state.out_of_order += 1
                state.note(f"out of order: destination offset {dst_offset} holds {seq} after {state.highest}")
            else:
                state.highest = seq
                state.in_range = False
        state.previous = seq

    def _state(self, key: Key) -> _Partition:
        state = self._parts.get(key)
        if state is None:
            size = len(self.acked.get(key, b""))
            state = self._parts[key] = _Partition(bytearray(size), array("q", bytes(8 * size)))
        return state

    def missing(self) -> dict[Key, list[int]]:
        """Acknowledged sequence numbers not (yet) found in the copy, per partition."""
        out = {}
        for key, acked in self.acked.items():
            seen = self._state(key).seen
            gone = [seq for seq, flag in enumerate(acked) if flag and not seen[seq]]
            if gone:
                out[key] = gone
        return out

    def verdicts(
        self,
        *,
        checkpoints: Mapping[Key, int | None],
        located: Mapping[Key, Mapping[int, tuple[int, int]]],
    ) -> list[PartitionVerdict]:
        """The verdict per partition; `located` gives (source offset, send time in µs) of missing records."""
        missing = self.missing()
        out = []
        for key in sorted(set(self.acked) | set(self._parts)):
            state = self._state(key)
            acked = self.acked.get(key, b"")
            found = located.get(key, {})
            offsets = {seq: where[0] for seq, where in found.items()}
            checkpoint = checkpoints.get(key)
            runs: list[MissingRun] = []
            lost = pending = 0
            for first, last in _runs(missing.get(key, [])):
                verdict = _verdict(range(first, last + 1), offsets, checkpoint)
                if verdict == "lost":
                    lost += last - first + 1
                else:
                    pending += last - first + 1
                if len(runs) < _MAX_RUNS:
                    after = [state.first_offset[s] for s in range(last + 1, len(state.seen)) if state.seen[s]]
                    runs.append(
                        MissingRun(
                            first,
                            last,
                            verdict,
                            (offsets.get(first), offsets.get(last)),
                            (found[first][1] if first in found else None, found[last][1] if last in found else None),
                            min(after, default=None),
                        )
                    )
            checked = sum(1 for seq, flag in enumerate(acked) if flag and state.seen[seq])
            out.append(
                PartitionVerdict(
                    topic=key[0],
                    partition=key[1],
                    produced=sum(acked),
                    checked=checked,
                    lost=lost,
                    not_yet_copied=pending,
                    duplicates=state.duplicates,
                    out_of_order=state.out_of_order,
                    interleaved=state.interleaved,
                    resent_ranges=state.resent_ranges,
                    misrouted=state.misrouted,
                    unacknowledged_copied=sum(1 for seq, flag in enumerate(state.seen) if flag and not acked[seq])
                    + state.beyond,
                    checkpoint=checkpoint,
                    runs=tuple(runs),
                    problems=tuple(state.problems),
                    largest_resends=tuple(
                        (s, n, t) for s, n, t, _ in sorted(state.resends, key=lambda r: -r[1])[:_MAX_RESENDS]
                    ),
                    resends=tuple((n, first, last) for _, n, first, last in state.resends),
                )
            )
        return out


def _verdict(seqs: range, located: Mapping[int, int], checkpoint: int | None) -> str:
    """Lost when the checkpoint is past a record of the run, or the source does not hold it."""
    for seq in seqs:
        offset = located.get(seq)
        if offset is None or (checkpoint is not None and checkpoint > offset):
            return "lost"
    return "not yet copied"


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    """Sorted sequence numbers as inclusive runs: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs
