"""CPU time and peak memory of the replicator's processes, read from /proc.

Both replicators are measured the same way, from the outside: user+system CPU seconds
(``/proc/PID/stat``) and peak resident set size (``VmHWM`` in ``/proc/PID/status``). A
process that has exited keeps the last values seen, so sample before stopping it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; everything after its closing ')' is fixed.
    fields = raw.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICKS


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
