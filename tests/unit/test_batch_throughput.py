"""`strait bench throughput --copy record,batch`: batch rows next to record and MM2 rows, and
the ratios per copy mode."""

from __future__ import annotations

from typing import Any

from strait.bench.report import render_markdown
from strait.bench.scenarios.throughput import _systems, throughput_ratios


def run(system: str, records_per_s: float, copy: str | None = None) -> dict[str, Any]:
    return {
        "system": system,
        "size": 100,
        "compression": "none",
        "parallelism": 1,
        "records": 1000,
        "records_per_s": records_per_s,
        "cpu_s_per_gb": records_per_s / 100,
        "peak_rss_mb": 50.0,
        "verify": {"ok": True, "duplicated": 0},
        **({"copy": copy} if copy else {}),
    }


def test_each_copy_mode_runs_once_next_to_one_mm2_run() -> None:
    assert _systems(["mm2", "strait"], ["record", "batch"]) == [
        ("mm2", None),
        ("strait", "record"),
        ("strait", "batch"),
    ]


def test_ratios_per_copy_mode() -> None:
    runs = [run("mm2", 1000), run("strait", 2000, "record"), run("strait", 6000, "batch")]
    rows = throughput_ratios(runs, [100], ["none"], [1], ["record", "batch"])
    by_copy = {r["copy"]: r for r in rows}
    assert by_copy["record"]["records_per_s"] == 2.0 and by_copy["batch"]["records_per_s"] == 6.0
    assert by_copy["batch"]["mm2_records_per_s"] == 1000


def test_older_results_without_a_copy_mode_count_as_record() -> None:
    rows = throughput_ratios([run("mm2", 1000), run("strait", 3000)], [100], ["none"], [1])
    assert rows[0]["copy"] == "record" and rows[0]["records_per_s"] == 3.0


def test_report_shows_batch_rows() -> None:
    runs = [run("mm2", 1000), run("strait", 2000, "record"), run("strait", 6000, "batch")]
    doc = {
        "scenario": "throughput",
        "params": {},
        "runs": runs,
        "ratios": throughput_ratios(runs, [100], ["none"], [1], ["record", "batch"]),
    }
    text = render_markdown({"throughput": doc})
    assert "Strait (batch)" in text and "Strait (record)" in text and "| batch |" in text
