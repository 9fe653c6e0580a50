"""`strait bench delivery` at CI size: both delivery modes run through the harness and report sane figures.

A tiny run (2,000 records, a 3-second latency window) on the session's sandbox: no timing is
asserted (the machine may be starved), only that both modes produced complete, verified
results and that the report renders them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strait.bench import report, scenarios
from strait.bench.scenarios import Bench
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration

MODES = {"at-least-once", "exactly-once"}


@pytest.mark.timeout(600)
def test_delivery_benchmark_measures_both_modes(sandbox: Sandbox, tmp_path: Path) -> None:
    bench = Bench(sandbox=sandbox, workdir=tmp_path / "runs", systems=["strait"], log=lambda _m: None)

    result = scenarios.delivery(
        bench, sizes=(100,), records=2000, partitions=2, rates=(500,), duration_s=3.0, warmup_s=1.0
    )

    runs = result["runs"]
    for kind in ("throughput", "latency"):
        assert {r["delivery"] for r in runs if r["kind"] == kind} == MODES
    for run in runs:
        where = f"{run['kind']} {run['delivery']} (logs: {run['logs']})"
        assert "error" not in run, f"{where}: {run['error']}"
        verdict = run["verify"]
        assert verdict["lost"] == 0 and verdict["out_of_order"] == 0 and verdict["ok"], where
        if run["delivery"] == "exactly-once":
            assert verdict["duplicated"] == 0, where
        assert len(run["load"]["start"]) == 3 and run["load"]["samples"] >= 1
        assert set(run["strait_log"]) == {"levels", "examples"}
        if run["kind"] == "throughput":
            assert verdict["expected"] == 2000
            assert run["records_per_s"] > 0 and run["cpu_s_copy"] >= 0
        else:
            latency = run["latency"]
            assert latency["count"] > 0 and 0 < latency["p50_ms"] <= latency["p99_ms"], where
    assert [q["size"] for q in result["ratios"]["throughput"]] == [100]
    assert [q["rate"] for q in result["ratios"]["latency"]] == [500]
    assert result["ratios"]["latency"][0]["p99_ms"] is not None
    assert result["load"]["samples"] >= 1

    results_dir = tmp_path / "results"
    report.save(result, results_dir, machine={"cores": 2, "load_average_at_start": [0, 0, 0]}, command="test")
    markdown = report.write_markdown(results_dir, tmp_path / "BENCHMARKS.md").read_text()
    assert "## Exactly-once vs at-least-once (Strait)" in markdown
    assert "exactly-once" in markdown and "at-least-once" in markdown
