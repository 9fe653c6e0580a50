"""`strait bench failover`: the counting of re-read and skipped records, MirrorMaker's settings,
and the report section."""

from __future__ import annotations

from pathlib import Path

from strait.bench import report
from strait.bench.mirrormaker import render_properties
from strait.bench.scenarios.failover import DEPTHS, count_resume, mm2_extra, stop_offsets


def test_an_exact_resume_reads_nothing_again_and_skips_nothing() -> None:
    assert count_resume(40, 100, list(range(40, 100))) == {"re_read": 0, "skipped": 0, "first_seq": 40}


def test_a_resume_before_the_committed_offset_re_reads_the_records_in_between() -> None:
    assert count_resume(40, 100, list(range(1, 100))) == {"re_read": 39, "skipped": 0, "first_seq": 1}


def test_a_resume_past_the_committed_offset_skips_the_records_in_between() -> None:
    assert count_resume(40, 100, list(range(45, 100))) == {"re_read": 0, "skipped": 5, "first_seq": 45}
    # Nothing read at all (resumed at the end): everything after the stop is skipped.
    assert count_resume(40, 100, []) == {"re_read": 0, "skipped": 60, "first_seq": 100}
    # A duplicate in the copy after the stop is neither re-read nor skipped.
    assert count_resume(2, 5, [2, 3, 3, 4]) == {"re_read": 0, "skipped": 0, "first_seq": 2}


def test_the_group_stops_at_a_different_depth_of_each_partition_inside_it() -> None:
    stops = stop_offsets(dict.fromkeys(range(len(DEPTHS) + 1), 10_000))
    assert len(set(stops.values())) == len(DEPTHS)  # the 7th partition repeats the 1st depth
    assert all(0 < s < 10_000 for s in stops.values())
    assert stop_offsets({0: 3}) == {0: 2}  # a tiny partition: still a real stop inside it


def test_mirrormaker_runs_its_checkpoints_for_the_run_s_group_only() -> None:
    rendered = render_properties(
        src_bootstrap="a:1",
        dst_bootstrap="b:1",
        topics_pattern="t",
        tasks=1,
        run_id="r",
        extra=mm2_extra("failover-app-ab12.x"),
    )
    props = dict(line.split(" = ", 1) for line in rendered.splitlines())
    assert props["emit.checkpoints.enabled"] == "true" and props["sync.group.offsets.enabled"] == "true"
    assert props["emit.offset-syncs.enabled"] == "true" and props["offset.lag.max"] == "100"
    assert props["sync.group.offsets.interval.seconds"] == "1"
    assert props["groups"] == r"failover\-app\-ab12\.x"


def test_the_report_shows_both_systems_per_partition_and_in_the_summary(tmp_path: Path) -> None:
    def run(system: str, re_read: int, skipped: int) -> dict[str, object]:
        return {
            "system": system,
            "consumed_on_source": 1000,
            "re_read": re_read,
            "skipped": skipped,
            "untranslated_partitions": 0,
            "translated_after_s": 8.2,
            "translation": {"complete_after_s": 3.2, "partitions_with_offsets": 1},
            "per_partition": {
                "0": {
                    "source_committed": 1000,
                    "destination_committed": 1000 - re_read,
                    "first_seq": 1000 - re_read,
                    "re_read": re_read,
                    "skipped": skipped,
                }
            },
        }

    doc = {"scenario": "failover", "params": {}, "runs": [run("strait", 0, 0), run("mm2", 57, 0)]}
    doc["runs"][0]["offset_map"] = {
        "map_records": 12,
        "runs": 6,
        "partitions": 6,
        "bytes": 312,
        "copied_bytes": 6_000_000,
        "bytes_per_gb_copied": 52_000.0,
        "json_bytes": 900,
        "map_records_per_s": 1.5,
    }
    doc["ratios"] = {"re_read": 0.0, "skipped": None}
    results = tmp_path / "results"
    report.save(doc, results, machine={"cores": 2, "load_average_at_start": [1, 2, 3]}, command="strait bench failover")
    markdown = report.write_markdown(results, tmp_path / "BENCHMARKS.md").read_text()
    assert "## Consumer failover: records re-read and skipped" in markdown
    assert "- **Consumer failover** (records a group re-reads / skips on the destination): Strait re-read 0" in markdown
    assert "| MM2 | 1,000 | 57 | 0 | 0 | 3.2 |" in markdown
    assert "| MM2 | 0 | 1,000 | 943 | 943 | 57 | 0 |" in markdown
    assert "failover" not in markdown.split("## Not yet measured")[-1]
    assert (
        "Strait's offset map for this copy: 12 map records (6 runs over 6 partitions), 312 bytes of keys and "
        "values: 52,000.0 bytes per GB copied (6,000,000 bytes copied; 900 in the JSON encoding used before); "
        "written at 1.50 map records/s" in markdown
    )
