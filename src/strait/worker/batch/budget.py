"""How fast the batch pipeline may fetch, so that draining a backlog leaves CPU (and the GIL) to
the realtime pipeline of the same worker, and to the brokers on a machine they share with it.

Two caps, both token buckets (:class:`FetchBudget`):

- ``STRAIT_BATCH_MAX_MB_S`` (megabytes of source record batches per second, for one batch
  pipeline): a fixed cap, off unless set (an experiment, not a setting).
- While the worker's realtime record pipeline holds partitions (:class:`Sharing`, told by the
  copier's moves every second), the batch pipeline shares the process with a copy loop whose
  records wait for every GIL hand-over: it then fetches at most SHARED_MB_S (``STRAIT_BATCH_SHARED_MB_S``
  overrides it; 0: no pacing), at most SHARED_FETCH_BYTES per fetch answer, and the process's
  GIL switch interval is SHARED_SWITCH_INTERVAL_S instead of CPython's 5 ms. A thread that gives
  the GIL up for each librdkafka call (the record pipeline) waits up to one switch interval to get
  it back from a busy thread each time: six such hand-overs took 0.03 ms at the median and 14.9 ms
  at p99 next to a busy Python thread at 5 ms, 0.11 ms at p99 at 1 ms (load 21, /tmp micro-benchmark,
  see the commit). Without realtime partitions the backlog drains unpaced; ``STRAIT_BATCH_SHARING=0``
  turns the shared caps off (to measure without them).

A bucket: fetches go out while it holds bytes, each answer's record bytes are taken out of it
(it may go below zero: the next fetch then waits longer, so the mean rate holds), and it
refills at the rate, holding at most BURST_S of it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

ENV = "STRAIT_BATCH_MAX_MB_S"
SHARED_ENV = "STRAIT_BATCH_SHARED_MB_S"
SHARING_ENV = "STRAIT_BATCH_SHARING"  # 0: none of the shared caps (to measure without them)
BURST_S = 0.1
# While realtime partitions share the worker: the batch pipeline's fetch rate (an unpaced drain
# of 100 B records ran at ~55 MB/s on the quiet machine), its largest fetch answer (the stretch
# the loop spends decoding and splitting one), and the GIL switch interval.
SHARED_MB_S = 32.0
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


def _rate(env: str, default: float | None) -> float | None:
    value = os.environ.get(env, "").strip()
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
    ones while realtime partitions run in the same worker (:meth:`share`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.fixed = FetchBudget.from_env(clock)
        shared_mb_s = _rate(SHARED_ENV, SHARED_MB_S)
        self._shared_rate = None if shared_mb_s is None else shared_mb_s * 1_000_000
        self._paced: FetchBudget | None = None
        self.shared = False
        self._enabled = os.environ.get(SHARING_ENV, "").strip() != "0"
        self._closed = False

    def share(self, shared: bool) -> None:
        """Realtime partitions run in this worker (True) or not any more (False); any thread."""
        shared = shared and self._enabled and not self._closed
        if shared == self.shared:
            return
        if shared:
            self._paced = None if self._shared_rate is None else FetchBudget(self._shared_rate, clock=self._clock)
        else:
            self._paced = None
        _short_switches(shared)
        self.shared = shared

    def close(self) -> None:
        """The pipeline stopped: the process's switch interval as it was, for good (a late
        :meth:`share` from the copier changes nothing)."""
        self.share(False)
        self._closed = True

    def max_bytes(self, asked: int) -> int:
        """The most a fetch may ask for now (0: wait)."""
        limit = asked if not self.shared else min(asked, SHARED_FETCH_BYTES)
        for budget in (self.fixed, self._paced if self.shared else None):
            if budget is not None:
                limit = min(limit, budget.available())
        return max(0, limit)

    def spend(self, size: int) -> None:
        """Take a fetch answer's record bytes out of the buckets in force."""
        for budget in (self.fixed, self._paced if self.shared else None):
            if budget is not None:
                budget.spend(size)
