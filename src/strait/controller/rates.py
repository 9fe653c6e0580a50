"""Bytes/s per partition, estimated from the copy counters workers publish. Pure bookkeeping.

Cheap on the control cycle at scale (100,000 partitions): a worker's report is taken in once,
not again on every cycle that finds it unchanged (cycles come every 0.2 s during a hand-over,
a worker reports every few seconds), and the rates handed to the assignment are built again
only when a rate or the set of partitions changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from strait.coordination.model import PartitionKey

# Weight of the newest sample: smooths bursts so a short spike does not reshuffle the fleet.
_SMOOTHING = 0.5


class RateTracker:
    """Follows each partition's cumulative copied bytes and derives a smoothed bytes/s."""

    def __init__(self) -> None:
        self._last: dict[PartitionKey, tuple[float, float]] = {}  # key -> (bytes, at)
        self._rates: dict[PartitionKey, float] = {}
        # Per worker, the report last taken in (its `updated` time and its partitions).
        self._taken: dict[str, tuple[float, Any]] = {}
        self._changed = True  # a rate changed since `rates` last built its answer
        self._answer: tuple[frozenset[PartitionKey], dict[PartitionKey, float]] | None = None

    def observe(self, stats: Mapping[str, Mapping[str, Any]]) -> None:
        """Take in every worker's published stats (`{"updated": t, "partitions": {key: {"bytes": n}}}`).

        A report already taken in (same `updated` time and partitions) is skipped: each sample
        counts once. (Taken in again, a sample changes nothing, as it is not newer than itself;
        only a partition that two reports name during a move could see an old sample again.)"""
        taken: dict[str, tuple[float, Any]] = {}
        for worker, report in stats.items():
            at = float(report.get("updated", 0.0))
            partitions = report.get("partitions", {})
            taken[worker] = (at, partitions)
            before = self._taken.get(worker)
            if before is not None and before[0] == at and (before[1] is partitions or before[1] == partitions):
                continue  # the same object when gathered over HTTP; read anew from ZooKeeper
            for name, entry in dict(partitions).items():
                try:
                    key = PartitionKey.parse(name)
                    copied = float(entry.get("bytes", 0))
                except (ValueError, AttributeError):
                    continue
                self._sample(key, copied, at)
        self._taken = taken

    def _sample(self, key: PartitionKey, copied: float, at: float) -> None:
        last = self._last.get(key)
        if last is not None and at > last[1] and copied >= last[0]:
            rate = (copied - last[0]) / (at - last[1])
            previous = self._rates.get(key)
            self._rates[key] = rate if previous is None else _SMOOTHING * rate + (1 - _SMOOTHING) * previous
            self._changed = True
        if last is None or at > last[1] or copied < last[0]:
            # A smaller counter means the partition changed worker: start counting again.
            self._last[key] = (copied, at)

    def rates(self, keys: Set[PartitionKey]) -> Mapping[PartitionKey, float]:
        """bytes/s for each of `keys`; 0 for partitions not measured yet. The answer may be the
        one given last time (when nothing changed): read it, never modify it."""
        answer = self._answer
        if answer is not None and not self._changed and answer[0] == keys:
            return answer[1]
        rates = self._rates
        result = {key: rates.get(key, 0.0) for key in keys}
        self._answer = (frozenset(keys), result)
        self._changed = False
        return result
