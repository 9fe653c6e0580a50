"""Latency percentiles and arrival gaps: pure functions over microsecond timestamps."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of already sorted values (``q`` in 0..100)."""
    if not sorted_values:
        raise ValueError("no values")
    # The epsilon keeps float noise (99.9 / 100 * 1000 = 999.0000000000001) from skipping a rank.
    rank = max(1, math.ceil(q * len(sorted_values) / 100 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(latencies_us: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / p99.9 / max / mean, in milliseconds."""
    if not latencies_us:
        return {"count": 0}
    ordered = sorted(latencies_us)
    return {
        "count": len(ordered),
        "p50_ms": percentile(ordered, 50) / 1000,
        "p99_ms": percentile(ordered, 99) / 1000,
        "p999_ms": percentile(ordered, 99.9) / 1000,
        "max_ms": ordered[-1] / 1000,
        "mean_ms": sum(ordered) / len(ordered) / 1000,
    }


def longest_gap(times_us: Sequence[int], *, start_us: int | None = None, end_us: int | None = None) -> tuple[int, int]:
    """The longest silence between consecutive arrivals within [start, end]: (gap µs, time it began).

    The window's edges count as arrivals, so a stream that stops for good before ``end``
    shows that silence too.
    """
    ordered = sorted(t for t in times_us if (start_us is None or t >= start_us) and (end_us is None or t <= end_us))
    points = ([start_us] if start_us is not None else []) + ordered + ([end_us] if end_us is not None else [])
    best, began = 0, points[0] if points else 0
    for before, after in itertools.pairwise(points):
        if after - before > best:
            best, began = after - before, before
    return best, began


def first_at_or_after(times_us: Sequence[int], t_us: int) -> int | None:
    """The first arrival at or after ``t_us``, if any."""
    later = [t for t in times_us if t >= t_us]
    return min(later) if later else None
