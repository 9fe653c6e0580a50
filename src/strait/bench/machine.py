"""A description of the machine a benchmark ran on, recorded with every result.

Memory and CPU busy time come from psutil; the CPU model is still read from /proc/cpuinfo, for
which psutil has no call.
"""

from __future__ import annotations

import os
import platform
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from strait.sandbox import process


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        return round(float(psutil.virtual_memory().total) / 1024**3, 1)
    except (OSError, RuntimeError):
        return None


def _java_version() -> str:
    try:
        out = subprocess.run(
            [process.java_binary(), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except Exception:
        return "unknown"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def describe() -> dict[str, Any]:
    """CPU, cores, memory, kernel, Python and Java versions, and the load when the run began."""
    load = os.getloadavg()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": _java_version(),
        "kafka_broker": "Apache Kafka 4.4.0 (KRaft, 1 broker per cluster, sandbox)",
        "mirrormaker": "connect-mirror 4.3.1 (newest on Maven Central here)",
        "load_average_at_start": [round(x, 2) for x in load],
    }


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


class MachineBusy(RuntimeError):
    """The machine is too busy for a measured run (the message gives the load and the threshold)."""


def check_quiet(max_load: float | None, load: Sequence[float] | None = None) -> list[float]:
    """The load averages now (or ``load``); raises :class:`MachineBusy` when the 1-minute figure is
    above ``max_load`` (None: never), so a measured run does not start on a busy machine."""
    now = [round(x, 2) for x in load] if load is not None else load_average()
    if max_load is not None and now[0] > max_load:
        raise MachineBusy(
            f"load average {now[0]} (1 minute) is above {max_load} on {os.cpu_count()} CPUs: figures measured "
            "now would say more about the other work than about the replicators; wait for a quiet machine"
        )
    return now


def _cpu_ticks() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of all CPUs since boot (psutil, from /proc/stat); None where unreadable."""
    try:
        times = psutil.cpu_times()
    except (OSError, RuntimeError):
        return None
    # Every column counts towards the total, as the kernel lists them; idle and iowait are not busy.
    total = float(sum(times))
    return total - times.idle - getattr(times, "iowait", 0.0), total


class LoadWatch:
    """The machine's load while a run goes on: load averages at start and end, the 1-minute figure
    sampled every ``interval_s``, and the share of all CPUs that was busy (anyone's work, ours too)."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._samples: list[float] = []
        self._thread = threading.Thread(target=self._run, name="load-watch", daemon=True)
        self._start: list[float] = []
        self._ticks: tuple[float, float] | None = None

    def __enter__(self) -> LoadWatch:
        self._start = load_average()
        self._ticks = _cpu_ticks()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._samples.append(os.getloadavg()[0])
            if self._stop.wait(self._interval_s):
                return

    def summary(self) -> dict[str, Any]:
        """``start`` and ``end`` (1/5/15-minute), min/mean/max of the 1-minute samples, CPU busy %."""
        samples = self._samples or [os.getloadavg()[0]]
        result: dict[str, Any] = {
            "start": self._start,
            "end": load_average(),
            "min_1m": round(min(samples), 2),
            "mean_1m": round(sum(samples) / len(samples), 2),
            "max_1m": round(max(samples), 2),
            "samples": len(samples),
        }
        now = _cpu_ticks()
        if self._ticks is not None and now is not None and now[1] > self._ticks[1]:
            result["cpu_busy_percent"] = round(100 * (now[0] - self._ticks[0]) / (now[1] - self._ticks[1]), 1)
        return result
