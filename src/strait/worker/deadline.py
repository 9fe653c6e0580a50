"""Blocking client calls that may never return, run with a deadline.

librdkafka 2.16's ``send_offsets_to_transaction`` can wait forever, past its own timeout, when
the consumer group's coordinator broker went away during the call (librdkafka issues #5456 and
#5511, both open): a destination broker restart left an exactly-once pipeline blocked, holding
its partitions, until the chaos run gave up. Such calls run on a helper thread here; the caller
stops waiting at the deadline and recovers (for a transactional producer: a new producer with
the same transactional id fences the stuck one and aborts its transaction). The stuck helper
thread is left behind, blocked inside the abandoned client; a fresh one serves the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")


class CallHung(Exception):
    """A call did not return within its deadline; it may still be running."""


class DeadlineRunner:
    """Runs one call at a time on a helper thread and waits at most a deadline for it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self.abandoned = 0  # helper threads left blocked in a call that never returned

    def call(self, method: Callable[..., T], *args: Any, deadline_s: float) -> T:
        """``method(*args)``; its exceptions propagate. Raises :class:`CallHung` at the deadline."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        future = self._executor.submit(method, *args)
        try:
            return future.result(timeout=deadline_s)
        except FutureTimeout:
            self._executor.shutdown(wait=False)
            self._executor = None
            self.abandoned += 1
            raise CallHung(f"{getattr(method, '__name__', method)} did not return within {deadline_s:.0f}s") from None

    def close(self) -> None:
        """Let the helper thread end (without waiting for a call still blocked in it)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
