"""The batch loop's CPU priority while it shares the worker with realtime partitions.

The latency pace (strait.worker.batch.pace) sets how much a draining backlog fetches per
second, one decision per second; it cannot act within a second. On a machine whose cores are
busy (a drain keeps them so), the realtime records' worst seconds came from the scheduler: the
batch loop, the brokers and the realtime loop all runnable at once, the realtime one waiting
its turn (110-450 ms p99 seconds in drains whose other seconds stayed at 10-40 ms). Linux keeps
a nice value per thread, so the batch loop's thread alone can yield: while it shares the worker
it runs at ``nice`` (the kernel then gives it about a tenth of a core's share against a thread at
0 when both want the CPU, and all of it when nothing else does), and at its own value again once
it drains alone.

Going back needs the privilege to raise a priority (root, CAP_SYS_NICE or RLIMIT_NICE); without
it the loop stays at the lower priority until the pipeline stops, which only costs a backlog
drained next to busy neighbours some speed. The thread is addressed by its native id: one
syscall per change, none per loop turn.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Setter = Callable[[int, int, int], None]
Getter = Callable[[int, int], int]


def _linux(name: str) -> Any:
    """``os.<name>`` where nice values are per thread (Linux), else None."""
    return getattr(os, name, None) if sys.platform.startswith("linux") else None


class ThreadPriority:
    """The nice value of one thread, lowered while shared (``nice`` 0: never changed).

    :meth:`bind` on the thread itself, then :meth:`follow` from it as often as wanted.
    ``setter``/``getter`` are ``os.setpriority``/``os.getpriority`` (tests replace them); on a
    system without per-thread nice values nothing is changed.
    """

    def __init__(self, nice: int, *, setter: Setter | None = None, getter: Getter | None = None) -> None:
        self.nice = nice
        self._set = setter if setter is not None else _linux("setpriority")
        self._get = getter if getter is not None else _linux("getpriority")
        self._thread: int | None = None
        self._base = 0
        self.lowered = False
        self._stuck = False  # going back was refused: stay lowered

    def bind(self) -> None:
        """The calling thread is the one to lower."""
        if self.nice <= 0 or self._set is None or self._get is None:
            return
        thread = threading.get_native_id()
        try:
            self._base = self._get(os.PRIO_PROCESS, thread)
        except OSError as exc:
            log.info("batch loop priority left as it is (cannot read it: %s)", exc)
            return
        self._thread = thread

    def follow(self, shared: bool) -> None:
        """Lower the thread's priority while ``shared``, restore it after (when permitted)."""
        if self._thread is None or self._set is None or shared == self.lowered:
            return
        if shared:
            target = min(19, self._base + self.nice)
        elif self._stuck:
            return
        else:
            target = self._base
        try:
            self._set(os.PRIO_PROCESS, self._thread, target)
        except PermissionError:
            # Only raising a priority needs a privilege: stay lowered from now on.
            log.info(
                "batch loop stays at nice %d after sharing the worker (raising a priority back needs "
                "CAP_SYS_NICE or RLIMIT_NICE)",
                self._base + self.nice,
            )
            self._stuck = True
            return
        except OSError as exc:
            log.info("batch loop priority left as it is (cannot change it: %s)", exc)
            self._thread = None
            return
        self.lowered = shared
