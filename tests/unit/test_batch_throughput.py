"""`strait bench throughput --copy record,batch --mm2-profile default,tuned`: batch rows next to
record and MM2 rows, the ratios per copy mode and MM2 profile, and the timing of fast copies."""

from __future__ import annotations

from typing import Any

import pytest

from strait.bench.mirrormaker import MM2_PROFILES, profile_properties, render_properties
from strait.bench.report import render_markdown
from strait.bench.scenarios.throughput import _systems, copy_timing, throughput_ratios


def run(system: str, records_per_s: float, copy: str | None = None, profile: str | None = None) -> dict[str, Any]:
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
        **({"mm2_profile": profile} if profile else {}),
    }


def test_each_copy_mode_runs_once_next_to_one_mm2_run() -> None:
    assert _systems(["mm2", "strait"], ["record", "batch"]) == [
        ("mm2", None, "default"),
        ("strait", "record", None),
        ("strait", "batch", None),
    ]


def test_each_mm2_profile_runs_once() -> None:
    assert _systems(["strait", "mm2"], ["batch"], ["default", "tuned"]) == [
        ("strait", "batch", None),
        ("mm2", None, "default"),
        ("mm2", None, "tuned"),
    ]


def test_ratios_per_copy_mode_and_mm2_profile() -> None:
    runs = [
        run("mm2", 1000),  # older results: no profile, MirrorMaker's defaults
        run("mm2", 2000, profile="tuned"),
        run("strait", 2000, "record"),
        run("strait", 6000, "batch"),
    ]
    rows = throughput_ratios(runs, [100], ["none"], [1], ["record", "batch"], ["default", "tuned"])
    by = {(r["copy"], r["mm2_profile"]): r for r in rows}
    assert by[("batch", "default")]["records_per_s"] == 6.0
    assert by[("batch", "tuned")]["records_per_s"] == 3.0
    assert by[("record", "tuned")]["mm2_records_per_s"] == 2000


def test_the_tuned_profile_reaches_mirrormakers_clients() -> None:
    tuned = profile_properties("tuned")
    assert profile_properties("default") == {}
    assert int(tuned["dst.producer.batch.size"]) >= 1_000_000 and 20 <= int(tuned["dst.producer.linger.ms"]) <= 50
    assert int(tuned["src.consumer.max.poll.records"]) >= 2000
    text = render_properties(
        src_bootstrap="s:1",
        dst_bootstrap="d:1",
        topics_pattern="t",
        tasks=1,
        run_id="r",
        compression="lz4",
        extra=tuned,
    )
    lines = set(text.splitlines())
    assert "dst.producer.compression.type = lz4" in lines  # the source's codec, in both profiles
    for key, value in tuned.items():
        assert f"{key} = {value}" in lines
    with pytest.raises(ValueError, match="unknown"):
        profile_properties("fast")
    assert set(MM2_PROFILES) == {"default", "tuned", "wan"}


def test_a_fast_copy_is_timed_over_the_records_between_polls() -> None:
    # Polls: (seconds, records at the destination, CPU seconds).
    timeline = [(0.0, 0, 0.0), (0.01, 0, 0.1), (0.02, 50_000, 0.2), (0.03, 150_000, 0.3), (0.04, 200_000, 0.4)]
    timing = copy_timing(timeline, 200_000, 100)
    assert timing is not None and not timing["resolution_limited"]
    # 150,000 records arrived between the first poll that saw any and the one that saw all.
    assert timing["records_per_s"] == pytest.approx(150_000 / 0.02)
    assert timing["timed_records"] == 150_000 and timing["first_count"] == 50_000
    assert timing["cpu_s_per_gb"] == pytest.approx(0.2 / (150_000 * 100 / 1e9), abs=0.1)


def test_a_copy_between_two_polls_is_flagged() -> None:
    timeline = [(0.0, 0, 0.0), (0.5, 0, 0.1), (0.52, 200_000, 0.3)]
    timing = copy_timing(timeline, 200_000, 100)
    assert timing is not None and timing["resolution_limited"]
    assert timing["records_per_s"] == pytest.approx(200_000 / 0.02)
    assert copy_timing([(0.0, 0, 0.0), (0.1, 10, 0.1)], 200_000, 100) is None


def test_report_labels_the_tuned_mm2_rows() -> None:
    runs = [run("mm2", 1000), run("mm2", 2000, profile="tuned"), run("strait", 6000, "batch")]
    doc = {
        "scenario": "throughput",
        "params": {},
        "runs": runs,
        "ratios": throughput_ratios(runs, [100], ["none"], [1], ["batch"], ["default", "tuned"]),
    }
    text = render_markdown({"throughput": doc})
    assert "MM2 (tuned)" in text and "| tuned |" in text


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
