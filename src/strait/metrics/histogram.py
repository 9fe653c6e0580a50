"""A lock-free latency histogram for the copy path, cheap enough to observe every record.

prometheus-client's Histogram takes a lock per observation; at hundreds of thousands of records
per second that costs a noticeable share of a core. Each `Buckets` has exactly one writer
thread (a pipeline thread, or the copier's control thread), so plain list increments are safe
under the GIL; scrapes read a copy that may be one observation behind, which is harmless.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

# Upper bounds in seconds: sub-millisecond produce acks up to copies that fell minutes behind.
LATENCY_BOUNDS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
    900.0,
)


@dataclass(frozen=True)
class BucketCounts:
    """A snapshot: per-bucket (not cumulative) counts, the last one for values above every bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs in exposition order, ending with "+Inf"."""
        running = 0
        out: list[tuple[str, int]] = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out

    def minus(self, earlier: BucketCounts) -> BucketCounts:
        """What was observed since `earlier` (a snapshot of the same histogram)."""
        counts = tuple(max(0, a - b) for a, b in zip(self.counts, earlier.counts, strict=True))
        return BucketCounts(self.bounds, counts, max(0.0, self.total - earlier.total))

    def plus(self, other: BucketCounts) -> BucketCounts:
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return BucketCounts(self.bounds, counts, self.total + other.total)

    def quantile(self, q: float) -> float | None:
        """Estimate of the q-quantile by linear interpolation inside its bucket, as PromQL's
        histogram_quantile does; None without observations."""
        total = self.count
        if total == 0:
            return None
        rank = q * total
        running = 0
        lower = 0.0
        for index, count in enumerate(self.counts):
            upper = self.bounds[index] if index < len(self.bounds) else self.bounds[-1]
            if count and running + count >= rank:
                if index == len(self.bounds):
                    return self.bounds[-1]
                return lower + (upper - lower) * (rank - running) / count
            running += count
            lower = upper
        return self.bounds[-1]


def empty(bounds: Sequence[float] = LATENCY_BOUNDS) -> BucketCounts:
    return BucketCounts(tuple(bounds), (0,) * (len(bounds) + 1), 0.0)


class Buckets:
    """One writer thread observes; any thread may take a `snapshot`."""

    __slots__ = ("_bounds", "_counts", "_total")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS) -> None:
        self._bounds = tuple(bounds)
        self._counts = [0] * (len(self._bounds) + 1)
        self._total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        """One observation, or ``count`` observations of the same value (a sample standing for
        ``count`` records: the copy loop samples delivery reports, see strait.worker.deliveries)."""
        self._counts[bisect.bisect_left(self._bounds, value)] += count
        self._total += value * count

    def snapshot(self) -> BucketCounts:
        return BucketCounts(self._bounds, tuple(self._counts), self._total)
