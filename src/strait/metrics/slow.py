"""Slow-worker detection: a worker copying far less per partition than its peers. Pure.

Only partitions with a backlog count: a worker whose partitions are idle is not slow, it has
nothing to do. A worker is slow when its bytes/s per backlogged partition is below `ratio`
times the median of the other workers'.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Throughput:
    """A worker's copy rate over the last window."""

    bytes_per_s: float
    backlogged: int  # partitions with lag > 0


@dataclass(frozen=True)
class SlowWorker:
    worker: str
    per_partition: float
    peers_median: float


def find_slow_workers(
    throughput: Mapping[str, Throughput], *, ratio: float = 0.25, min_peers: int = 1
) -> list[SlowWorker]:
    """Workers whose per-partition rate is below `ratio` x the peers' median."""
    rates = {w: t.bytes_per_s / t.backlogged for w, t in throughput.items() if t.backlogged > 0}
    slow: list[SlowWorker] = []
    for worker, rate in sorted(rates.items()):
        peers = [r for w, r in rates.items() if w != worker]
        if len(peers) < min_peers:
            continue
        median = statistics.median(peers)
        if median > 0 and rate < ratio * median:
            slow.append(SlowWorker(worker, rate, median))
    return slow
