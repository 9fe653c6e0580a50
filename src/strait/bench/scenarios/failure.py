"""Worker failure: kill -9 one of two copying processes under load; time to resume, lost, duplicated."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from strait.bench import workload
from strait.bench.markdown import missing_words
from strait.bench.scenarios.harness import (
    SEC,
    Bench,
    live,
    rate_series,
    ratio,
    run_safely,
    topic_name,
    verdict,
)
from strait.bench.stats import longest_gap
from strait.bench.straitrun import StraitReplicator


def worker_failure(
    bench: Bench,
    *,
    rate: float = 2000,
    partitions: int = 8,
    before_s: float = 10.0,
    after_s: float = 45.0,
    size: int = 100,
    mm2_rebalance_delay_ms: int = 10_000,
) -> dict[str, Any]:
    """kill -9 one of two workers (MirrorMaker: one of two nodes) under load; time to resume, lost, dup."""
    runs = []
    for system in bench.order(0):
        bench.log(f"worker-failure: {system}, 2 workers/nodes, {rate:,.0f} rec/s, kill -9 after {before_s:.0f}s")
        run = _failure_run(bench, system, rate, partitions, before_s, after_s, size, mm2_rebalance_delay_ms)
        runs.append(run)
        v = run.get("verify", {})
        bench.log(
            f"  -> resumed after {run.get('resume_s')} s, stalled partitions {run.get('stalled_partitions')}, "
            f"{missing_words(v)}, dup {v.get('duplicated')}, load {run.get('load')}"
            + (f" FAILED: {run['error']}" if run.get("error") else "")
        )
    by = {r["system"]: r for r in runs}
    return {
        "scenario": "worker-failure",
        "params": {
            "rate": rate,
            "partitions": partitions,
            "before_s": before_s,
            "after_s": after_s,
            "size": size,
            "mm2_rebalance_delay_ms": mm2_rebalance_delay_ms,
            "session_timeout_s": bench.session_timeout_s,
            "store": bench.store,
        },
        "runs": runs,
        "ratios": {"resume_s": ratio(by.get("strait", {}).get("resume_s"), by.get("mm2", {}).get("resume_s"))},
    }


def _failure_run(
    bench: Bench,
    system: str,
    rate: float,
    partitions: int,
    before_s: float,
    after_s: float,
    size: int,
    mm2_rebalance_delay_ms: int,
) -> dict[str, Any]:
    run_dir = bench.run_dir(topic_name("worker-failure", system))
    topic = topic_name("fail", uuid.uuid4().hex[:6], system)
    workload.create_topics(bench.src, [topic], partitions)
    replicator = bench.replicator(
        system, run_dir, parallelism=2, nodes=2, mm2_rebalance_delay_ms=mm2_rebalance_delay_ms
    )
    result: dict[str, Any] = {"system": system, "replicator": replicator.describe(), "logs": str(run_dir)}

    def body() -> None:
        with live(bench, run_dir, replicator) as session:
            session.warm({topic: partitions}, size)
            session.read([topic], [topic], deadline_s=before_s + after_s + 900)
            session.produce("steady", {topic: partitions}, rate=rate, duration_s=before_s + after_s, size=size)
            time.sleep(before_s)
            if isinstance(replicator, StraitReplicator):
                owners = replicator.assignment()
                result["assignment_before"] = owners
            t_kill_us = time.time_ns() // 1000
            result["load"] = [round(x, 2) for x in os.getloadavg()]  # at the kill
            result["killed"] = replicator.kill_one()
            arrivals, windows = session.finish(drain_s=max(120.0, mm2_rebalance_delay_ms / 1000 + 90))
            start_us, end_us = windows[0]
            # A partition of the killed process may still show a record or two right after the kill
            # (its last produce requests complete at the broker), so the stall is measured as the
            # longest silence, and "resumed" as the end of that silence.
            baseline = max(
                longest_gap(arrivals.arrival_times(topic, p), start_us=start_us + SEC, end_us=t_kill_us - SEC)[0]
                for p in range(partitions)
            )
            threshold_us = max(SEC, 2 * baseline)
            per_partition: dict[int, dict[str, float | None]] = {}
            resumed: list[float] = []
            stalls: list[float] = []
            never = 0
            for p in range(partitions):
                gap, began = longest_gap(arrivals.arrival_times(topic, p), start_us=t_kill_us - SEC, end_us=end_us)
                stalled = gap > threshold_us
                resumed_s = round((began + gap - t_kill_us) / SEC, 3) if stalled else None
                if stalled and began + gap >= end_us:  # silent until traffic ended: it never resumed
                    never += 1
                    resumed_s = None
                per_partition[p] = {"longest_gap_s": round(gap / SEC, 3), "resumed_after_kill_s": resumed_s}
                stalls.append(gap / SEC)
                if resumed_s is not None:
                    resumed.append(resumed_s)
            result.update(
                per_partition=per_partition,
                baseline_gap_s=round(baseline / SEC, 3),
                resume_s=None if never else max(resumed, default=0.0),
                never_resumed_partitions=never,
                stalled_partitions=len(resumed) + never,
                longest_gap_s=round(max(stalls), 3),
                rate_series=rate_series(arrivals.arrival_times(topic), t_kill_us),
                verify=verdict(bench, replicator, arrivals, session.expected),
            )

    return run_safely(result, body)
