"""How fast the backlog's batch pipeline may fetch while the worker copies realtime partitions
of the same route.

The backlog pipeline runs in a process of its own (:mod:`strait.worker.batch.remote`), so the
operating system, not the worker's interpreter, shares the CPU between it and the realtime copy
loop, and an idle core drains a backlog at full speed. What a process cannot protect is what
both need from outside: the brokers' CPU and disks on a machine they share, and the network.
While the worker's realtime pipelines hold partitions (:class:`Sharing`, told by the copier's
moves every second), the backlog's fetch rate is paced (the worker's ``worker.batch_sharing``,
:class:`strait.config.BatchSharingConfig`): by default from the realtime partitions' own
end-to-end p99 (:mod:`strait.worker.batch.pace`, one window per call of :meth:`Sharing.share`),
or at a fixed rate. Without realtime partitions, or while they are idle, the backlog drains
unpaced.

The rate is enforced in the batch loop by a token bucket (:class:`FetchBudget`,
:class:`PacedFetches`): fetches go out while it holds bytes, each answer's record bytes are
taken out of it (it may go below zero: the next fetch then waits longer, so the mean rate
holds), and it refills at the rate, holding at most BURST_S of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from strait.config import BatchSharingConfig
from strait.metrics.histogram import BucketCounts
from strait.worker.batch.pace import LatencyPace, PaceSettings, Window

log = logging.getLogger(__name__)

BURST_S = 0.1


class FetchBudget:
    """Bytes the pipeline may fetch now, refilled at ``bytes_per_s``."""

    def __init__(self, bytes_per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if bytes_per_s <= 0:
            raise ValueError(f"a fetch budget needs a positive rate, got {bytes_per_s}")
        self.rate = bytes_per_s
        self._cap = bytes_per_s * BURST_S
        self._tokens = self._cap
        self._clock = clock
        self._last = clock()

    def set_rate(self, bytes_per_s: float) -> None:
        """Refill at ``bytes_per_s`` from now on."""
        if bytes_per_s <= 0:
            raise ValueError(f"a fetch budget needs a positive rate, got {bytes_per_s}")
        self.rate = bytes_per_s
        self._cap = bytes_per_s * BURST_S

    def available(self) -> int:
        """Bytes a fetch may ask for now; 0 while the pipeline must wait."""
        now = self._clock()
        self._tokens = min(self._cap, self._tokens + (now - self._last) * self.rate)
        self._last = now
        return max(0, int(self._tokens))

    def spend(self, size: int) -> None:
        """Take the bytes a fetch answer brought."""
        self._tokens -= size


class PacedFetches:
    """The batch loop's side of the pace: the rate it was last given (None: unpaced) and the
    source bytes it fetched so far. :meth:`set_rate` from any thread, the rest from the loop's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._budget: FetchBudget | None = None
        self.fetched = 0

    def set_rate(self, bytes_per_s: float | None) -> None:
        budget = self._budget
        if bytes_per_s is None:
            self._budget = None
        elif budget is None:
            self._budget = FetchBudget(bytes_per_s, clock=self._clock)
        else:
            budget.set_rate(bytes_per_s)

    @property
    def rate(self) -> float | None:
        budget = self._budget
        return None if budget is None else budget.rate

    def max_bytes(self, asked: int) -> int:
        """The most a fetch may ask for now (0: wait)."""
        budget = self._budget
        return asked if budget is None else max(0, min(asked, budget.available()))

    def spend(self, size: int) -> None:
        """Take a fetch answer's record bytes out of the bucket, if paced."""
        self.fetched += size
        budget = self._budget
        if budget is not None:
            budget.spend(size)


class Sharing:
    """The backlog's pace while realtime partitions run in the same worker (:meth:`share`).

    ``config`` is the worker's ``worker.batch_sharing``; ``latency`` returns the realtime
    pipelines' end-to-end histogram on this worker so far (cumulative; None while it has none),
    which the latency pace (strait.worker.batch.pace) reads once per :meth:`share`; ``fetched``
    the source bytes the backlog pipeline fetched so far. :attr:`rate` is the rate the backlog
    pipeline is to fetch at now (None: unpaced).
    """

    def __init__(
        self,
        config: BatchSharingConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        latency: Callable[[], BucketCounts | None] | None = None,
        latency_by_topic: Callable[[], Mapping[str, BucketCounts]] | None = None,
        fetched: Callable[[], int] = lambda: 0,
    ) -> None:
        self._clock = clock
        self.config = config or BatchSharingConfig()
        self._latency = latency
        self._fetched_of = fetched
        self.pace: LatencyPace | None = None
        self._shared_rate: float = self.config.fixed_mb_s * 1_000_000
        if self.config.pace == "latency" and latency is not None:
            self.pace = LatencyPace(pace_settings(self.config))
            self._shared_rate = self.pace.rate
        self.shared = False
        # The last window saw no realtime record acknowledged and the copier found every realtime
        # partition settled (all it knows of the source acknowledged): caught up and idle (e.g.
        # a topic's first partitions done while the others still lag), nothing to protect, so
        # the backlog drains unpaced until realtime records flow again (the first window with
        # any returns to the pace). Both, because no acknowledgement alone is also what a
        # stalled realtime pipeline (records in flight) or one without end-to-end figures (a
        # LogAppendTime destination) shows. A pace that held at its start rate here made a
        # 1 KB copy 3x slower once its first partition caught up.
        self.idle = False
        # The latency histogram at the last window's end: from now on, not the process's past
        # (one observer per route lives as long as the process).
        self._seen: BucketCounts | None = latency() if latency is not None else None
        # The same per destination topic, so a window in which some topics' partitions finish a
        # backlog in the realtime pipeline is judged by the other topics' records (below).
        self._by_topic = latency_by_topic
        self._seen_by_topic: Mapping[str, BucketCounts] = latency_by_topic() if latency_by_topic is not None else {}
        self._fetched_seen = fetched()

    def share(
        self,
        shared: bool,
        *,
        settled: bool = False,
        arriving: frozenset[str] = frozenset(),
        leaving: bool = False,
    ) -> None:
        """Realtime partitions run in this worker (True) or not any more (False); ``settled``:
        they have every record they know of acknowledged; ``arriving``: the destination topics
        of those that came from a backlog and may have copied its last records in this window
        (the window is judged by the other topics' records; with none, the pace holds);
        ``leaving``: a realtime partition fell behind by a backlog in this window and copied
        some of it before its move out (the realtime records waited behind them in the realtime
        pipeline, whatever the pace: it holds). Called once a second (the copier's
        classification): each call ends a pacing window."""
        # (A window that ran unpaced because the realtime side was idle taught nothing about
        # the pace.)
        self._end_window(paced=self.paced, settled=settled, arriving=arriving, leaving=leaving)
        self.shared = shared and self.config.enabled

    @property
    def paced(self) -> bool:
        """Sharing the worker with realtime partitions that are not idle: the pace applies."""
        return self.shared and not self.idle

    @property
    def rate(self) -> float | None:
        """The backlog's fetch rate now, in bytes per second (None: unpaced)."""
        return self._shared_rate if self.paced else None

    def _end_window(
        self,
        *,
        paced: bool,
        settled: bool = False,
        arriving: frozenset[str] = frozenset(),
        leaving: bool = False,
    ) -> None:
        pace, probe = self.pace, self._latency
        if pace is None or probe is None:
            return
        seen = probe()
        window = seen if self._seen is None or seen is None else seen.minus(self._seen)
        self.idle = settled and (window is None or window.count == 0)
        if seen is not None:
            self._seen = seen
        others = self._others_window(arriving)
        held_back = bool(arriving)  # a caught-up backlog's last records may be in this window
        if held_back and others is not None:
            # The backlog's old records are in their own topics: the rest of the realtime
            # records say what the backlog costs, as in any window. Holding the pace on every
            # such window would keep it high while the realtime topic's own p99 is far over
            # the budget.
            window, held_back = others, False
        held_back = held_back or leaving
        fetched = self._fetched_of()
        batch_bytes, self._fetched_seen = fetched - self._fetched_seen, fetched
        before = pace.rate
        rate = pace.step(
            Window(
                p99_s=None if window is None else window.quantile(0.99),
                samples=0 if window is None else window.count,
                batch_bytes=batch_bytes,
                arriving=held_back,
                leaving=leaving,
            ),
            paced=paced,
        )
        self._shared_rate = rate
        if (
            held_back
            and window is not None
            and pace.last.startswith("hold: a backlog's records")
            and ((window.quantile(0.99) or 0) > pace.budget())
        ):
            # (A cut the backlog's last records would have made: the log of a run says whether
            # holding mattered.)
            log.info(
                "batch pace holds at %.1f MB/s: a backlog's records were copied in the realtime "
                "pipeline (realtime p99 %.1f ms over %d records, budget %.1f ms)",
                rate / 1e6,
                (window.quantile(0.99) or 0) * 1000,
                window.count,
                pace.budget() * 1000,
            )
        if rate != before:
            # A cut at INFO (at most one a second, none once at the floor): the realtime tail
            # rose with the backlog; growing is routine.
            log.log(
                logging.INFO if rate < before else logging.DEBUG,
                "batch pace %s: %.1f -> %.1f MB/s (realtime p99 %s, budget %.1f ms, %d batch bytes)",
                pace.last,
                before / 1e6,
                rate / 1e6,
                "-" if window is None else f"{(window.quantile(0.99) or 0) * 1000:.1f} ms",
                pace.budget() * 1000,
                batch_bytes,
            )

    def _others_window(self, arriving: frozenset[str]) -> BucketCounts | None:
        """This window's end-to-end latency of the realtime topics not in ``arriving`` (None
        without per-topic figures, without arriving topics, or without such records)."""
        probe = self._by_topic
        if probe is None:
            return None
        seen = probe()
        before, self._seen_by_topic = self._seen_by_topic, seen
        if not arriving:
            return None
        merged: BucketCounts | None = None
        for topic, counts in seen.items():
            if topic in arriving:
                continue
            earlier = before.get(topic)
            window = counts if earlier is None else counts.minus(earlier)
            merged = window if merged is None else merged.plus(window)
        return merged if merged is not None and merged.count > 0 else None


def pace_settings(config: BatchSharingConfig) -> PaceSettings:
    """The latency pace ``config`` asks for."""
    mb = 1_000_000
    return PaceSettings(
        floor=config.floor_mb_s * mb,
        ceiling=config.ceiling_mb_s * mb,
        start=config.start_mb_s * mb,
        budget_s=None if config.latency_budget_ms is None else config.latency_budget_ms / 1000,
        budget_ratio=config.budget_ratio,
    )
