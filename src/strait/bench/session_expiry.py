"""False session expirations of healthy processes: how low the ZooKeeper session timeout may go.

For each session timeout, a controller and two workers copy live traffic on a sandbox while

- ``hog``: a CPU hog busy-loops on every core for the whole window, or
- ``sigstop``: worker w1 is frozen with SIGSTOP for ``stop_s`` seconds, again and again
  (a pause without garbage collection, like a VM or container freeze), or
- ``both``: the two at once.

Nobody dies, so every session the ZooKeeper server expired is a false expiration: a live worker
declared dead, its partitions moved (and, on exactly-once routes, its producers fenced). The
counts come from the processes' own logs:

- ``expired``: "ZooKeeper session lost" (worker agent or controller: the session ended);
- ``dropped``: kazoo's "Connection dropped" / "Connection time-out" (a ping unanswered in time;
  the session survives if the client reconnects before it expires);
- ``cut_off``: the worker stopped copying because it was suspended too long (see the agent).

Run: ``python -m strait.bench.session_expiry --timeouts 2,3,4,6 --window 60``; the JSON goes to
``bench/results``. On a loaded shared machine the counts are indicative, not a proof either way.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from strait.bench import workload
from strait.bench.chaos.starve import CpuHog, LoadSampler
from strait.bench.scenarios.harness import Bench, live, topic_name
from strait.bench.straitrun import StraitReplicator
from strait.sandbox import process

PATTERNS = {
    "expired": ("ZooKeeper session lost",),
    "dropped": ("Connection dropped", "Connection time-out"),
    "cut_off": ("cut off from ZooKeeper",),
}


def count_events(text: str) -> dict[str, int]:
    """How often each event of :data:`PATTERNS` appears in a process log."""
    return {name: sum(text.count(p) for p in patterns) for name, patterns in PATTERNS.items()}


def probe(
    bench: Bench,
    *,
    session_timeout_s: float,
    condition: str,
    window_s: float,
    stop_s: float = 2.0,
    rate: float = 1000,
    partitions: int = 4,
) -> dict[str, Any]:
    """One window under ``condition`` ("hog", "sigstop" or "both"); event counts per process."""
    bench.session_timeout_s = session_timeout_s
    run_dir = bench.run_dir(topic_name("expiry", condition, str(session_timeout_s).replace(".", "_")))
    topic = topic_name("exp", uuid.uuid4().hex[:6])
    workload.create_topics(bench.src, [topic], partitions)
    replicator = bench.replicator("strait", run_dir, parallelism=2)
    assert isinstance(replicator, StraitReplicator)
    result: dict[str, Any] = {"session_timeout_s": session_timeout_s, "condition": condition, "window_s": window_s}
    hog = CpuHog()
    stops = 0
    with live(bench, run_dir, replicator) as session:
        session.warm({topic: partitions}, 100)
        session.produce("steady", {topic: partitions}, rate=rate, duration_s=window_s, size=100)
        sampler = LoadSampler(interval_s=2.0).start()
        started = time.monotonic()
        if condition in ("hog", "both"):
            hog.start()
        try:
            while time.monotonic() - started < window_s:
                if condition in ("sigstop", "both"):
                    pid = replicator.worker_pids()[0]
                    marker = str(replicator._config_path)
                    process.signal_process(pid, signal.SIGSTOP, marker)
                    time.sleep(stop_s)
                    process.signal_process(pid, signal.SIGCONT, marker)
                    stops += 1
                    # Long enough to reconnect and catch up between two freezes.
                    time.sleep(max(3.0, 2 * session_timeout_s))
                else:
                    time.sleep(1.0)
        finally:
            hog.stop()
            load = sampler.stop()
        time.sleep(2.0)  # let a late expiry reach the logs
        # Read before the replicator stops: closing a session is reported as "lost" too.
        per_process = {
            log.stem: count_events(log.read_text(errors="replace"))
            for log in sorted(Path(run_dir / "strait").glob("*.log"))
        }
    result.update(
        stops=stops,
        stop_s=stop_s if condition != "hog" else None,
        load={k: load.get(k) for k in ("min", "mean", "max", "cores")},
        processes=per_process,
        totals={k: sum(p[k] for p in per_process.values()) for k in PATTERNS},
    )
    return result


def main(argv: list[str] | None = None) -> None:
    from strait.bench import machine
    from strait.sandbox import Sandbox, SandboxSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeouts", default="2,3,4,6", help="session timeouts to try, seconds")
    parser.add_argument("--conditions", default="sigstop,hog")
    parser.add_argument("--window", type=float, default=60.0, help="seconds under each condition")
    parser.add_argument("--stop", type=float, default=2.0, help="seconds of each SIGSTOP")
    parser.add_argument("--results-dir", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="strait-expiry-"))
    print(f"work folder: {root}", flush=True)
    sandbox = Sandbox.up(SandboxSpec(clusters=("src", "dst"), brokers=1, log_dirs=1, state_dir=root / "sandbox"))
    runs = []
    try:
        bench = Bench(sandbox=sandbox, workdir=root / "runs", systems=["strait"], log=print)
        for condition in args.conditions.split(","):
            for timeout in [float(t) for t in args.timeouts.split(",")]:
                print(f"session timeout {timeout} s, {condition}, load {os.getloadavg()} ...", flush=True)
                run = probe(
                    bench, session_timeout_s=timeout, condition=condition, window_s=args.window, stop_s=args.stop
                )
                runs.append(run)
                print(f"  -> {json.dumps(run['totals'])}, stops {run['stops']}, load {run['load']}", flush=True)
    finally:
        sandbox.down(keep=True)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"session-expiry-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"scenario": "session-expiry", "machine": machine.describe(), "runs": runs}, indent=2))
    print(f"wrote {out} (logs in {root})")


if __name__ == "__main__":
    main()
