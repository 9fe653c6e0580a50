"""Process and machine sampling of the benchmarks (psutil) agrees with the kernel's own figures."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from strait.bench import machine
from strait.bench.procstat import ProcessMeter, cpu_seconds, peak_rss_mb

_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _proc_stat() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_seconds_is_utime_plus_stime_of_the_process() -> None:
    _burn(0.2)
    before = _proc_cpu_seconds(os.getpid())
    measured = cpu_seconds(os.getpid())
    after = _proc_cpu_seconds(os.getpid())
    assert measured is not None
    assert before - 1e-9 <= measured <= after + 1e-9
    assert measured >= 0.2 - 2 / _TICKS


def test_a_process_that_is_gone_reads_as_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_seconds(child.pid) is None
    assert peak_rss_mb(child.pid) is None
    assert cpu_seconds(-1) is None


def test_peak_rss_is_the_high_water_mark() -> None:
    # The size now first: the process may grow between the two reads, and the mark only rises.
    now = (
        next(
            int(line.split()[1])
            for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        / 1024
    )
    peak = peak_rss_mb(os.getpid())
    assert peak is not None
    assert peak >= now > 0


def test_the_meter_keeps_the_last_values_of_an_exited_process() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)",
        ]
    )
    try:
        meter = ProcessMeter()
        deadline = time.monotonic() + 20
        while meter.sample([child.pid]) < 0.3 - 2 / _TICKS and time.monotonic() < deadline:
            time.sleep(0.05)
        total, rss = meter.sample([child.pid, os.getpid()]), meter.peak_rss_total_mb()
        assert total >= 0.3 - 2 / _TICKS and rss > 0
    finally:
        child.kill()
        child.wait()
    assert meter.sample([child.pid]) >= total  # our own pid moved on; the child's stays
    assert meter.cpu[child.pid] >= 0.3 - 2 / _TICKS and meter.peak_rss_total_mb() >= rss


def test_memory_is_memtotal_in_gib() -> None:
    kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    assert machine._memory_gb() == round(kib / 1024 / 1024, 1)


def test_cpu_busy_share_matches_proc_stat() -> None:
    hand0, ours0 = _proc_stat(), machine._cpu_ticks()
    _burn(0.3)
    hand1, ours1 = _proc_stat(), machine._cpu_ticks()
    assert ours0 is not None and ours1 is not None
    hand = (hand1[0] - hand0[0]) / (hand1[1] - hand0[1])
    ours = (ours1[0] - ours0[0]) / (ours1[1] - ours0[1])
    assert abs(hand - ours) < 0.05  # the two reads are a moment apart on a shared machine
    assert abs(ours0[1] - hand0[1] / _TICKS) < 1.0  # seconds, the kernel's jiffies scaled


def test_load_watch_reports_cpu_busy_percent() -> None:
    with machine.LoadWatch(interval_s=0.1) as watch:
        _burn(0.3)
    summary = watch.summary()
    assert set(summary) >= {"start", "end", "min_1m", "mean_1m", "max_1m", "samples", "cpu_busy_percent"}
    assert 0 < summary["cpu_busy_percent"] <= 100


def test_a_workers_backlog_processes_are_found_as_its_children() -> None:
    from strait.bench.straitrun import children

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert children(2**22 + 1) == []  # no such process
