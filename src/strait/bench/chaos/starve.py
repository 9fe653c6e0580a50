"""A starved machine: busy-loop processes that compete for every core, and the load they cause.

The hog's processes are ours alone: started here, stopped by their pid, never by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any


class CpuHog:
    """One busy-looping Python process per core (or `processes`), until `stop`."""

    def __init__(self, processes: int | None = None) -> None:
        self.count = processes if processes is not None else (os.cpu_count() or 1)
        self._children: list[subprocess.Popen[bytes]] = []

    def start(self) -> CpuHog:
        for _ in range(self.count):
            self._children.append(
                subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C meant for the runner is handled by the runner
                )
            )
        return self

    @property
    def pids(self) -> list[int]:
        return [child.pid for child in self._children]

    def stop(self) -> None:
        for child in self._children:
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
        for child in self._children:
            child.wait(timeout=10)
        self._children.clear()


class LoadSampler:
    """The 1-minute load average every `interval_s` seconds, while the run goes on."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self._interval = interval_s
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="chaos-load-average", daemon=True)

    def start(self) -> LoadSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop sampling; min, mean and max of the samples, and the samples (at most 120 of them)."""
        self._stop.set()
        self._thread.join(timeout=10)
        values = [v for _, v in self._samples]
        if not values:
            return {"samples": []}
        step = max(1, len(self._samples) // 120)
        return {
            "min": round(min(values), 2),
            "mean": round(sum(values) / len(values), 2),
            "max": round(max(values), 2),
            "cores": os.cpu_count(),
            "samples": [[round(t, 1), round(v, 2)] for t, v in self._samples[::step]],
        }

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._samples.append((time.monotonic() - self._started, os.getloadavg()[0]))
