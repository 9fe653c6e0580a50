"""What a route's offset map costs: runs and bytes written, and bytes per gigabyte copied.

Each worker keeps one :class:`MapCost` per route (on its ``RouteObserver``); the map writers
(:class:`strait.offsetmap.store.MapWriter` after checkpoint commits,
:class:`strait.offsetmap.store.TransactionMap` inside exactly-once transactions) add to it once
per publish or transaction, never per record. The worker exposes it on ``/metrics``:
``strait_offset_map_runs_total`` (the map's write rate), ``strait_offset_map_bytes_total``,
``strait_offset_map_runs_lost_total`` and ``strait_offset_map_bytes_per_gigabyte_copied``.

Bytes are the map records' key and value bytes as produced (a run of an aborted transaction
counts: it takes room in the log until retention removes it), not Kafka's per-batch and
per-record framing nor the commit markers of exactly-once transactions.
"""

from __future__ import annotations

GIGABYTE = 1_000_000_000


class MapCost:
    """Counters of one route's map on one worker (any thread).

    No lock: ``failed`` runs in librdkafka's delivery callbacks, also those of a flush left
    running on a helper thread after it hung (strait.worker.transactional), and a callback must
    never wait on what a pipeline's thread holds: a realtime exactly-once turn stood 105 s and
    more with that thread and such a callback both waiting on this lock (a chaos run's
    watchdog stack dump). A rare lost increment of a metric costs less."""

    __slots__ = ("bytes", "lost", "runs")

    def __init__(self) -> None:
        self.runs = 0
        self.bytes = 0
        self.lost = 0

    def written(self, runs: int, size: int) -> None:
        """``runs`` map records of ``size`` key and value bytes in all were produced."""
        self.runs += runs
        self.bytes += size

    def failed(self, runs: int) -> None:
        """``runs`` were not written (or not acknowledged): lost to the map."""
        self.lost += runs


def per_gigabyte(map_bytes: int, copied_bytes: int) -> float | None:
    """Map bytes per gigabyte (10^9 bytes) copied; None before anything was copied."""
    if copied_bytes <= 0:
        return None
    return map_bytes * GIGABYTE / copied_bytes
