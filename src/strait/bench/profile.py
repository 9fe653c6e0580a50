"""Where a Strait worker spends its time while copying a backlog, sampled with py-spy.

py-spy attaches to the running worker process from outside (no code change, ~100 samples/s),
so the profile is of the same command an operator runs. Samples are folded into self time per
function (the innermost Python frame: time inside a C extension such as librdkafka's is
charged to the Python line that called it) and inclusive time per function.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from typing import Any

from strait.bench import workload
from strait.bench.procstat import ProcessMeter
from strait.bench.scenarios import Bench
from strait.bench.scenarios.harness import DestinationCount
from strait.bench.straitrun import StraitReplicator

_TOP = 15
# Every thread's stack starts with these: at ~100 % inclusive they would only crowd the table.
_THREAD_ROOTS = {
    "Thread._bootstrap (threading.py)",
    "Thread._bootstrap_inner (threading.py)",
    "Thread.run (threading.py)",
}


def fold(raw: str) -> dict[str, Any]:
    """Self and inclusive sample counts per function from py-spy's raw (collapsed) output."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if frames and frames[0].startswith("thread ("):
            threads[frames[0]] += count
            frames = frames[1:]
        if not frames:
            continue
        total += count
        names = [_function(frame) for frame in frames]
        self_time[names[-1]] += count
        for name in set(names) - _THREAD_ROOTS:
            inclusive[name] += count

    def top(counter: Counter[str]) -> list[tuple[str, int, float]]:
        return [(name, n, round(100 * n / max(total, 1), 1)) for name, n in counter.most_common(_TOP)]

    return {"samples": total, "self": top(self_time), "inclusive": top(inclusive), "threads": top(threads)}


def _function(frame: str) -> str:
    # "consume (strait/worker/fetch.py:280)" -> "consume (strait/worker/fetch.py)": lines split one
    # function's time into many rows.
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0] or where.rstrip(")")
    for marker in ("site-packages/", "/src/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})" if path else name


def profile_worker(
    bench: Bench, *, records: int = 300_000, size: int = 100, partitions: int = 8, timeout_s: float = 600
) -> dict[str, Any]:
    """Copy a pre-filled topic with one Strait worker under py-spy; its hot functions."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    run_dir = bench.run_dir("profile-strait")
    topic = f"prof-{uuid.uuid4().hex[:6]}"
    workload.create_topics(bench.src, [topic], partitions)
    workload.prefill(bench.src, topic, partitions, records, size)
    replicator = StraitReplicator(
        zookeeper=bench.sandbox.zookeeper,
        src_props=bench.src,
        dst_props=bench.dst,
        workdir=run_dir / "strait",
        workers=1,
        session_timeout_s=bench.session_timeout_s,
    )
    raw_path = run_dir / "py-spy.txt"
    result: dict[str, Any] = {"scenario": "profile", "params": {"records": records, "size": size}}
    spy: subprocess.Popen[bytes] | None = None
    try:
        replicator.start([])  # workers up with nothing to copy: attach before the first record
        (worker,) = replicator.worker_pids()
        with open(run_dir / "py-spy.log", "ab") as log:
            spy = subprocess.Popen(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(worker),
                    "--rate",
                    "100",
                    "--threads",
                    "--format",
                    "raw",
                    "--output",
                    str(raw_path),
                    "--nonblocking",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        time.sleep(1)
        meter = ProcessMeter()
        cpu0 = meter.sample([worker])
        started = time.monotonic()
        replicator.add_topics([topic])
        if not DestinationCount(bench.dst, {topic: partitions}).wait_for(records, timeout_s):
            raise RuntimeError(f"copy incomplete after {timeout_s:.0f}s")
        elapsed = time.monotonic() - started
        cpu = meter.sample([worker]) - cpu0
        result.update(
            copy_s=round(elapsed, 2),
            records_per_s=round(records / elapsed, 1),
            worker_cpu_percent=round(100 * cpu / elapsed, 1),
        )
    finally:
        if spy is not None and spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
        replicator.stop()
    if not raw_path.exists():
        raise RuntimeError(f"py-spy wrote no profile; see {run_dir / 'py-spy.log'}")
    result["profile"] = fold(raw_path.read_text())
    return result
