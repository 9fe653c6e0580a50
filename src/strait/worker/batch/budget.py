"""An optional cap on how fast the batch pipeline fetches, so that draining a backlog leaves CPU
to the realtime pipeline (and to the brokers, on a machine they share with the worker).

Off unless ``STRAIT_BATCH_MAX_MB_S`` is set (megabytes of source record batches per second,
for one batch pipeline): an experiment for the fetch-isolation benchmark, not a setting yet.
A token bucket: fetches go out while the bucket holds bytes, each answer's record bytes are
taken out of it (it may go below zero: the next fetch then waits longer, so the mean rate holds),
and it refills at the rate, holding at most BURST_S of it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

ENV = "STRAIT_BATCH_MAX_MB_S"
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

    @classmethod
    def from_env(cls) -> FetchBudget | None:
        """The budget ``STRAIT_BATCH_MAX_MB_S`` asks for, or None (no cap)."""
        value = os.environ.get(ENV, "").strip()
        if not value:
            return None
        try:
            rate = float(value)
        except ValueError as exc:
            raise ValueError(f"{ENV} must be a number of megabytes per second, got {value!r}") from exc
        return cls(rate * 1_000_000) if rate > 0 else None

    def available(self) -> int:
        """Bytes a fetch may ask for now; 0 while the pipeline must wait."""
        now = self._clock()
        self._tokens = min(self._cap, self._tokens + (now - self._last) * self.rate)
        self._last = now
        return max(0, int(self._tokens))

    def spend(self, size: int) -> None:
        """Take the bytes a fetch answer brought."""
        self._tokens -= size
