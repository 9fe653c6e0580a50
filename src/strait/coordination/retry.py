"""Retry policy as a value: which errors, how many tries, backoff, jitter, deadline.

Callers pass a policy instead of writing their own loops, so every retry in Strait is bounded
and visible in one place (kazoo's `KazooRetry` habit). The sleep function is injectable so
tests do not wait.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


class RetryExhausted(Exception):
    """The policy gave up; `__cause__` is the last error."""


def _retriable_flag(exc: BaseException) -> bool:
    return bool(getattr(exc, "retriable", False))


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded by tries and by a deadline."""

    max_tries: int = 5
    delay_s: float = 0.1
    backoff: float = 2.0
    max_delay_s: float = 2.0
    jitter: float = 0.2  # fraction of each delay added at random so retries do not align
    deadline_s: float | None = None
    retry_on: Callable[[BaseException], bool] = _retriable_flag
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def delays(self) -> list[float]:
        """The waits between tries, before jitter."""
        return [min(self.delay_s * self.backoff**n, self.max_delay_s) for n in range(max(0, self.max_tries - 1))]

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn`, retrying errors the policy accepts; raise `RetryExhausted` when it gives up."""
        started = self.clock()
        delays = self.delays()
        for attempt in range(self.max_tries):
            try:
                return fn()
            except Exception as exc:
                if not self.retry_on(exc) or attempt == self.max_tries - 1:
                    if self.retry_on(exc):
                        raise RetryExhausted(f"gave up after {attempt + 1} tries: {exc}") from exc
                    raise
                wait = delays[attempt] * (1 + random.uniform(0, self.jitter))
                if self.deadline_s is not None and self.clock() + wait - started > self.deadline_s:
                    raise RetryExhausted(f"deadline of {self.deadline_s}s passed: {exc}") from exc
                self.sleep(wait)
        raise AssertionError("unreachable: the loop returns or raises")
