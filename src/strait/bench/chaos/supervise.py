"""Restart fleet processes that exit by themselves, as the shipped systemd units do.

`deploy/systemd` runs controllers and workers with `Restart=on-failure` and `RestartSec=5s`: a
worker whose watchdog ends it (exit 70) or that gives up registering during a long coordinator
outage is back five seconds later. A chaos run measures that fleet, not one that shrinks with
each such exit; every restart is recorded in the result so none goes unseen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

RESTART_DELAY_S = 5.0  # RestartSec in deploy/systemd
CHECK_INTERVAL_S = 1.0
LOG_TAIL_LINES = 40


class _Fleet(Protocol):
    processes: dict[str, Any]
    ports: dict[str, int]
    workdir: Path

    def start_worker(self, name: str, pool: str | None = None) -> None: ...

    def start_controller(self, name: str = "c1") -> str: ...


class Supervisor:
    """Watches the fleet's processes; one that exited with a failure (a non-zero code or a
    signal) and is not down by a fault in effect is started again `delay_s` after its exit
    was seen. `struck(name)` tells whether a fault holds the process down (its end restarts it)."""

    def __init__(
        self,
        fleet: _Fleet,
        struck: Callable[[str], bool],
        *,
        log: Callable[[str], None] = lambda _line: None,
        delay_s: float = RESTART_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fleet = fleet
        self._struck = struck
        self._log = log
        self._delay_s = delay_s
        self._clock = clock
        self._started = clock()
        self._seen: dict[str, tuple[int, Any, float]] = {}  # name -> (code, the exited process, seen at)
        self.restarts: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._started = self._clock()
        self._thread = threading.Thread(target=self._run, name="chaos-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _run(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            try:
                self.step()
            except Exception as exc:  # a failed restart is tried again at the next step
                self._log(f"supervisor: {exc}")

    def step(self) -> None:
        """One look at every process: note new failed exits, restart those due."""
        now = self._clock()
        for name, process in list(self._fleet.processes.items()):
            code = process.poll()
            seen = self._seen.get(name)
            if code is None or code == 0 or self._struck(name):
                # Running, stopped cleanly (on-failure leaves it), or a fault's to restart.
                self._seen.pop(name, None)
                continue
            if seen is None or seen[1] is not process:
                self._seen[name] = (code, process, now)
                continue
            if now - seen[2] >= self._delay_s:
                self._restart(name, code, seen[2], now)
                del self._seen[name]

    def _restart(self, name: str, code: int, seen_at: float, now: float) -> None:
        log = self._fleet.workdir / f"{name}.log"
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
        self._log(f"supervisor: {name} exited with {code}; starting it again")
        if name in self._fleet.ports:
            self._fleet.start_controller(name)
        else:
            self._fleet.start_worker(name)
        self.restarts.append(
            {
                "process": name,
                "code": code,
                "exit_seen_at_s": round(seen_at - self._started, 1),
                "restarted_at_s": round(now - self._started, 1),
                "log_tail": tail,
            }
        )
