"""CPU time and peak memory of the replicator's processes, sampled with psutil.

Both replicators are measured the same way, from the outside: user+system CPU seconds
(psutil's ``cpu_times()``: utime and stime of ``/proc/PID/stat``) and peak resident set size.
Peak RSS stays read by hand, ``VmHWM`` in ``/proc/PID/status`` (the kernel's high-water mark):
psutil has no peak figure (``memory_info().rss`` is the size now, and sampling it every few
seconds would miss the peaks in between). A process that has exited keeps the last values
seen, so sample before stopping it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, or None when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, ValueError):  # gone, not ours to read, or not a pid at all
        return None
    return float(times.user + times.system)


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory of a live process in MiB, or None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


@dataclass
class ProcessMeter:
    """Remembers the latest CPU and peak-RSS reading of each process it was asked about."""

    cpu: dict[int, float] = field(default_factory=dict)
    rss: dict[int, float] = field(default_factory=dict)

    def sample(self, pids: Iterable[int]) -> float:
        """Read every pid; return the total CPU seconds so far (exited processes keep their last value)."""
        for pid in pids:
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self.cpu[pid] = cpu
            rss = peak_rss_mb(pid)
            if rss is not None:
                self.rss[pid] = rss
        return sum(self.cpu.values())

    def peak_rss_total_mb(self) -> float:
        return sum(self.rss.values())
