"""How fast the batch pipeline may fetch, so that draining a backlog leaves CPU (and the GIL) to
the realtime pipeline of the same worker, and to the brokers on a machine they share with it.

Two caps, both token buckets (:class:`FetchBudget`):

- ``STRAIT_BATCH_MAX_MB_S`` (megabytes of source record batches per second, for one batch
  pipeline): a fixed cap, off unless set (an experiment, not a setting).
- While the worker's realtime record pipeline holds partitions (:class:`Sharing`, told by the
  copier's moves every second), the batch pipeline shares the process with a copy loop whose
  records wait for every GIL hand-over. It then fetches at most SHARED_FETCH_BYTES per fetch
  answer, the process's GIL switch interval is SHARED_SWITCH_INTERVAL_S instead of CPython's
  5 ms, and its fetch rate is paced (the worker's ``worker.batch_sharing``,
  :class:`strait.config.BatchSharingConfig`): by default from the realtime partitions' own
  end-to-end p99 (:mod:`strait.worker.batch.pace`, one window per call of :meth:`Sharing.share`),
  or at a fixed rate. A thread that gives the GIL up for each librdkafka call (the record
  pipeline) waits up to one switch interval to get it back from a busy thread each time: six
  such hand-overs took 0.03 ms at the median and 14.9 ms at p99 next to a busy Python thread at
  5 ms, 0.11 ms at p99 at 1 ms (load 21, /tmp micro-benchmark, see commit 66b66bb). Without
  realtime partitions the backlog drains unpaced; ``STRAIT_BATCH_SHARING=0`` turns the shared
  caps off (to measure without them).

A bucket: fetches go out while it holds bytes, each answer's record bytes are taken out of it
(it may go below zero: the next fetch then waits longer, so the mean rate holds), and it
refills at the rate, holding at most BURST_S of it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping

from strait.config import BatchSharingConfig
from strait.metrics.histogram import BucketCounts
from strait.worker.batch.pace import LatencyPace, PaceSettings, Window

log = logging.getLogger(__name__)

ENV = "STRAIT_BATCH_MAX_MB_S"
SHARED_ENV = "STRAIT_BATCH_SHARED_MB_S"
SHARING_ENV = "STRAIT_BATCH_SHARING"  # 0: none of the shared caps (to measure without them)
PACE_ENV = "STRAIT_BATCH_PACE"  # latency or fixed
BUDGET_ENV = "STRAIT_BATCH_LATENCY_BUDGET_MS"
BURST_S = 0.1
# While realtime partitions share the worker: the batch pipeline's largest fetch answer (the
# stretch the loop spends decoding and splitting one), and the GIL switch interval. (An unpaced
# drain of 100 B records ran at ~55 MB/s on the quiet machine: the pace's default ceiling is above.)
SHARED_FETCH_BYTES = 1024 * 1024
SHARED_SWITCH_INTERVAL_S = 0.001


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
        """Refill at ``bytes_per_s`` from now on (another thread may be taking bytes: the rate
        and the cap are each replaced whole)."""
        if bytes_per_s <= 0:
            raise ValueError(f"a fetch budget needs a positive rate, got {bytes_per_s}")
        self.rate = bytes_per_s
        self._cap = bytes_per_s * BURST_S

    @classmethod
    def from_env(cls, clock: Callable[[], float] = time.monotonic) -> FetchBudget | None:
        """The budget ``STRAIT_BATCH_MAX_MB_S`` asks for, or None (no cap)."""
        rate = _rate(ENV, None)
        return None if rate is None else cls(rate * 1_000_000, clock=clock)

    def available(self) -> int:
        """Bytes a fetch may ask for now; 0 while the pipeline must wait."""
        now = self._clock()
        self._tokens = min(self._cap, self._tokens + (now - self._last) * self.rate)
        self._last = now
        return max(0, int(self._tokens))

    def spend(self, size: int) -> None:
        """Take the bytes a fetch answer brought."""
        self._tokens -= size


def _rate(env: str, default: float | None, environ: Mapping[str, str] | None = None) -> float | None:
    value = (os.environ if environ is None else environ).get(env, "").strip()
    if not value:
        return default
    try:
        rate = float(value)
    except ValueError as exc:
        raise ValueError(f"{env} must be a number of megabytes per second, got {value!r}") from exc
    return rate if rate > 0 else None


_switch_lock = threading.Lock()
_switch_users = 0
_switch_before = 0.0


def _short_switches(on: bool) -> None:
    """The process's GIL switch interval at SHARED_SWITCH_INTERVAL_S while any batch pipeline
    shares the worker with realtime partitions (counted: a worker may run several), as it was
    once none does."""
    global _switch_users, _switch_before
    with _switch_lock:
        if on:
            if _switch_users == 0:
                _switch_before = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_before, SHARED_SWITCH_INTERVAL_S))
            _switch_users += 1
        elif _switch_users > 0:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_before)


class Sharing:
    """The batch pipeline's caps: the fixed one (``STRAIT_BATCH_MAX_MB_S``) always, the shared
    ones while realtime partitions run in the same worker (:meth:`share`).

    ``config`` is the worker's ``worker.batch_sharing`` (the environment variables above
    override it, see :func:`with_env`); ``latency`` returns the realtime pipeline's end-to-end
    histogram on this worker so far (cumulative; None while it has none), which the latency
    pace (strait.worker.batch.pace) reads once per :meth:`share`.
    """

    def __init__(
        self,
        config: BatchSharingConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        latency: Callable[[], BucketCounts | None] | None = None,
        latency_by_topic: Callable[[], Mapping[str, BucketCounts]] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._clock = clock
        self.fixed = FetchBudget.from_env(clock)
        self.config = with_env(config or BatchSharingConfig(), os.environ if environ is None else environ)
        self._enabled = self.config.enabled
        self._latency = latency
        self.pace: LatencyPace | None = None
        self._shared_rate: float | None = None
        if self.config.pace == "latency" and latency is not None:
            self.pace = LatencyPace(pace_settings(self.config))
            self._shared_rate = self.pace.rate
        elif self.config.fixed_mb_s > 0:  # (a latency pace without a latency to read: fixed)
            self._shared_rate = self.config.fixed_mb_s * 1_000_000
        self._paced: FetchBudget | None = None
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
        self._closed = False
        # share() comes from the copier's control thread, close() from the pipeline's: one at a
        # time, so a share(True) that checked ``_closed`` just before a close() cannot turn the
        # short switches on after close() found nothing to turn off (left at 1 ms for good).
        self._lock = threading.Lock()
        # The latency histogram at the last window's end: from now on, not the process's past
        # (one observer per route lives as long as the process).
        self._seen: BucketCounts | None = latency() if latency is not None else None
        # The same per destination topic, so a window in which some topics' partitions finish a
        # backlog in the realtime pipeline is judged by the other topics' records (below).
        self._by_topic = latency_by_topic
        self._seen_by_topic: Mapping[str, BucketCounts] = latency_by_topic() if latency_by_topic is not None else {}
        self._fetched = 0  # bytes fetched so far (the pipeline's thread adds, the control thread reads)
        self._fetched_seen = 0

    def share(
        self,
        shared: bool,
        *,
        settled: bool = False,
        arriving: frozenset[str] = frozenset(),
    ) -> None:
        """Realtime partitions run in this worker (True) or not any more (False); ``settled``:
        they have every record they know of acknowledged; ``arriving``: the destination topics
        of those that came from a backlog and may have copied its last records in this window
        (the window is judged by the other topics' records; with none, the pace holds). Any
        thread. Called once a second (the copier's classification): each call ends a pacing
        window."""
        with self._lock:
            shared = shared and self._enabled and not self._closed
            # (A window that ran unpaced because the realtime side was idle taught nothing about
            # the pace.)
            self._end_window(paced=self.paced, settled=settled, arriving=arriving)
            self._turn(shared)

    def _turn(self, shared: bool) -> None:
        if shared == self.shared:
            return
        if shared:
            rate = self._shared_rate
            self._paced = None if rate is None else FetchBudget(rate, clock=self._clock)
        else:
            self._paced = None
        _short_switches(shared)
        self.shared = shared

    def _end_window(
        self,
        *,
        paced: bool,
        settled: bool = False,
        arriving: frozenset[str] = frozenset(),
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
        fetched = self._fetched
        batch_bytes, self._fetched_seen = fetched - self._fetched_seen, fetched
        before = pace.rate
        rate = pace.step(
            Window(
                p99_s=None if window is None else window.quantile(0.99),
                samples=0 if window is None else window.count,
                batch_bytes=batch_bytes,
                arriving=held_back,
            ),
            paced=paced,
        )
        self._shared_rate = rate
        budget = self._paced
        if budget is not None and rate != budget.rate:
            budget.set_rate(rate)
        if (
            held_back
            and window is not None
            and pace.last.startswith("hold: a caught-up")
            and ((window.quantile(0.99) or 0) > pace.budget())
        ):
            # (A cut the backlog's last records would have made: the log of a run says whether
            # holding mattered.)
            log.info(
                "batch pace holds at %.1f MB/s: a caught-up backlog may have finished in the realtime "
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

    def close(self) -> None:
        """The pipeline stopped: the process's switch interval as it was, for good (a late
        :meth:`share` from the copier changes nothing)."""
        with self._lock:
            self._closed = True
            self._turn(False)

    @property
    def paced(self) -> bool:
        """Sharing the worker with realtime partitions that are not idle: the shared caps apply."""
        return self.shared and not self.idle

    def max_bytes(self, asked: int) -> int:
        """The most a fetch may ask for now (0: wait)."""
        paced = self.paced
        limit = asked if not paced else min(asked, SHARED_FETCH_BYTES)
        for budget in (self.fixed, self._paced if paced else None):
            if budget is not None:
                limit = min(limit, budget.available())
        return max(0, limit)

    def spend(self, size: int) -> None:
        """Take a fetch answer's record bytes out of the buckets in force."""
        self._fetched += size
        for budget in (self.fixed, self._paced if self.paced else None):
            if budget is not None:
                budget.spend(size)


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


def with_env(config: BatchSharingConfig, environ: Mapping[str, str]) -> BatchSharingConfig:
    """``config`` with the older environment variables applied (they win over the file):
    ``STRAIT_BATCH_SHARING=0`` turns sharing off, ``STRAIT_BATCH_SHARED_MB_S`` a fixed pace at
    that rate (0: unpaced), ``STRAIT_BATCH_PACE`` latency or fixed, ``STRAIT_BATCH_LATENCY_BUDGET_MS``
    the budget."""
    update: dict[str, object] = {}
    if environ.get(SHARING_ENV, "").strip() == "0":
        update["enabled"] = False
    if environ.get(SHARED_ENV, "").strip():
        rate = _rate(SHARED_ENV, None, environ)
        update["pace"] = "fixed"
        update["fixed_mb_s"] = 0.0 if rate is None else rate
    pace = environ.get(PACE_ENV, "").strip()
    if pace:
        if pace not in ("latency", "fixed"):
            raise ValueError(f"{PACE_ENV} must be latency or fixed, got {pace!r}")
        update["pace"] = pace
    budget = environ.get(BUDGET_ENV, "").strip()
    if budget:
        try:
            update["latency_budget_ms"] = float(budget)
            if not 0 < float(budget) < float("inf"):
                raise ValueError
        except ValueError as exc:
            raise ValueError(f"{BUDGET_ENV} must be a positive number of milliseconds, got {budget!r}") from exc
    # (model_copy skips validation: fixed_mb_s 0 means unpaced here, which the file cannot say.)
    return config.model_copy(update=update) if update else config
