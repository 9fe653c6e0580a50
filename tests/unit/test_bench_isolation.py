"""`strait bench isolation`: the split of realtime records into windows, the ratios and summary,
the busy-machine refusal, and the report section."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
from confluent_kafka import KafkaException

from strait.bench import report
from strait.bench.machine import MachineBusy, check_quiet
from strait.bench.reader import Arrivals
from strait.bench.scenarios.harness import DestinationCount
from strait.bench.scenarios.isolation import (
    by_second,
    drain_figures,
    isolation_summary,
    mode_of,
    pacing_env,
    realtime_sends,
    split_windows,
    watch_drain,
    window_ratios,
)

SEC = 1_000_000


def test_records_are_counted_in_the_window_their_send_time_falls_in() -> None:
    sends = [
        (5 * SEC, 1),  # warm-up
        (10 * SEC, 2),  # without
        (18 * SEC, 3),  # without
        (int(19.5 * SEC), 4),  # the second before the commit: counted nowhere
        (20 * SEC, 5),  # with (sent at the commit)
        (30 * SEC, 6),  # with (sent when the drain ended)
        (31 * SEC, 7),  # after
    ]
    split = split_windows(sends, measure_from_us=10 * SEC, commit_us=20 * SEC, drained_us=30 * SEC)
    assert split == {"without": [2, 3], "with": [5, 6], "after": [7]}


def test_the_drain_s_latencies_are_bucketed_by_the_second_of_their_send_time() -> None:
    start = 100 * SEC
    sends = [
        (start - 1, 999_000),  # before the commit: nowhere
        (start, 1_000),
        (start + SEC - 1, 3_000),
        (start + 2 * SEC, 250_000),  # second 1 sent nothing: no bucket
        (start + 5 * SEC + 1, 7_000),  # after the drain: nowhere
    ]
    rows = by_second(sends, start_us=start, end_us=start + 5 * SEC)
    assert [(r["s"], r["count"], r["max_ms"]) for r in rows] == [(0, 2, 3.0), (2, 1, 250.0)]
    assert rows[1]["p99_ms"] == 250.0


def test_only_the_realtime_topic_s_benchmark_records_count_probes_and_foreign_values_left_out() -> None:
    arrivals = Arrivals()
    rt, other = arrivals.topic_index("rt"), arrivals.topic_index("backlog")
    arrivals.add(rt, 0, 0, 0, 100, 150)  # the probe (sequence 0)
    arrivals.add(rt, 0, 0, 1, 200, 230)
    arrivals.add(rt, 1, -1, 0, 0, 300)  # not a benchmark record
    arrivals.add(other, 0, 0, 5, 200, 900)
    assert realtime_sends(arrivals, "rt") == [(200, 30)]


class _Counts(DestinationCount):
    """A destination count that answers from a list (one answer per poll; an exception is raised)."""

    def __init__(self, answers: list[int | Exception]) -> None:
        self.answers = answers

    def count(self) -> int:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_drain_is_timed_from_the_first_new_record_to_the_last() -> None:
    counter = _Counts([8, 8, KafkaException("slow metadata"), 500, 1008])
    drain = watch_drain(counter, target=1008, already=8, timeout_s=60)
    assert drain["first_us"] < drain["done_us"] and drain["seen"] == 1008
    assert drain["timeline"][-1][1] == 1008


def test_a_drain_that_never_ends_stops_at_its_timeout_without_a_done_time() -> None:
    drain = watch_drain(_Counts([8]), target=1008, already=8, timeout_s=0.3)
    assert "done_us" not in drain and "first_us" not in drain and drain["seen"] == 8


def test_the_ratio_is_with_over_without_and_absent_when_a_window_is_empty() -> None:
    run = {"latency_without": {"p50_ms": 4.0, "p99_ms": 10.0}, "latency_with": {"p50_ms": 6.0, "p99_ms": 25.0}}
    assert window_ratios(run) == {"ratio_p50": 1.5, "ratio_p99": 2.5}
    assert window_ratios({"latency_without": {"p50_ms": 4.0}, "latency_with": {"count": 0}}) == {
        "ratio_p50": None,
        "ratio_p99": None,
    }


def test_drain_figures_count_from_the_commit() -> None:
    drain = {"first_us": 21 * SEC, "done_us": 30 * SEC}
    assert drain_figures(drain, 20 * SEC, 200_000) == {
        "drained": True,
        "first_s": 1.0,
        "drain_s": 10.0,
        "records_per_s": 20_000.0,
    }
    assert drain_figures({"first_us": 21 * SEC}, 20 * SEC, 200_000)["drained"] is False


def _run(system: str, without_p99: float, with_p99: float, **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "system": system,
        "latency_without": {"p50_ms": 2.0, "p99_ms": without_p99, "count": 100},
        "latency_with": {"p50_ms": 3.0, "p99_ms": with_p99, "count": 50},
        "drain": {"drain_s": 10.0, "drained": True},
        **extra,
    }
    run.update(window_ratios(run))
    run["mode"] = mode_of(run)
    return run


def test_the_summary_averages_repeats_per_mode_and_compares_strait_with_each_mm2_profile() -> None:
    runs = [
        _run("strait", 10.0, 15.0),
        _run("strait", 20.0, 25.0),
        _run("mm2", 50.0, 200.0),
        _run("mm2", 40.0, 60.0, mm2_profile="tuned"),
        {"system": "mm2", "mode": "mm2", "error": "RuntimeError: boom"},  # a failed run counts nowhere
    ]
    summary = isolation_summary(runs)
    by = {row["mode"]: row for row in summary["systems"]}
    assert set(by) == {"strait", "mm2", "mm2 tuned"}
    assert by["strait"]["runs"] == 2 and by["strait"]["without_p99_ms"] == 15.0 and by["strait"]["with_p99_ms"] == 20.0
    assert by["strait"]["ratio_p99"] == pytest.approx(1.333, abs=1e-3) and by["strait"]["meets_goal"] is True
    assert by["strait"]["run_ratios_p99"] == [1.5, 1.25]
    assert by["mm2"]["ratio_p99"] == 4.0 and by["mm2"]["meets_goal"] is False
    versus = {(v["strait"], v["mm2"]): v for v in summary["versus"]}
    assert set(versus) == {("strait", "mm2"), ("strait", "mm2 tuned")}
    assert versus[("strait", "mm2")]["with_p99"] == 0.1
    assert versus[("strait", "mm2")]["ratio_p99"] == pytest.approx(1.333 / 4.0, abs=1e-3)


def test_a_busy_machine_is_refused_unless_no_threshold_is_set() -> None:
    assert check_quiet(1.0, [0.4, 0.9, 1.5]) == [0.4, 0.9, 1.5]
    with pytest.raises(MachineBusy, match=r"load average 3\.2 "):
        check_quiet(1.0, [3.2, 1.0, 1.0])
    assert check_quiet(None, [30.0, 1.0, 1.0])[0] == 30.0


def test_the_report_has_the_section_the_summary_line_and_the_load() -> None:
    runs = [
        _run("strait", 10.0, 15.0, load={"min_1m": 0.3, "max_1m": 0.8}, order=0),
        _run("mm2", 50.0, 200.0, load={"min_1m": 0.4, "max_1m": 0.9}, order=1),
    ]
    doc = {
        "scenario": "isolation",
        "params": {"rate": 1000, "backlog": 2_000_000, "partitions": 8, "backlog_partitions": 8, "size": 100},
        "goal_p99_ratio": 2.0,
        "runs": runs,
        "summary": isolation_summary(runs),
    }
    text = report.render_markdown({"isolation": doc})
    assert "## Fetch isolation: realtime latency while a backlog drains" in text
    assert "- **Fetch isolation**" in text and "Strait 10.0 → 15.0 ms (1.50x)" in text
    assert "| Strait | 1, 1st | 2.0 | 10.0 | 3.0 | 15.0 | 1.50 | 1.50 | 100 / 50 | 10.0 |" in text
    assert "| MM2 | 1, 2nd | 2.0 | 50.0 | 3.0 | 200.0 |" in text
    assert "| MM2 | 1 | 50.0 | 200.0 | 1.50 | 4.00 | 10.0 | — |" in text
    assert "0.3 to 0.8" in text and "| met (these runs) |" in text
    assert "isolation" not in text.split("## Not yet measured")[-1]


class _Bench:
    """The little of a Bench that :func:`isolation` uses before its runs: the log and the order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, line: str) -> None:
        self.lines.append(line)

    def order(self, repeat: int) -> list[str]:
        return ["strait", "mm2"] if repeat % 2 == 0 else ["mm2", "strait"]


def test_the_brokers_are_warmed_once_before_the_first_run_and_each_run_records_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = importlib.import_module("strait.bench.scenarios.isolation")
    calls: list[str] = []
    monkeypatch.setattr(scenario, "warm_brokers", lambda bench, seconds, **kw: calls.append(f"warm {seconds}"))

    def run(bench: Any, system: str, shape: Any, *, copy: Any, mm2_profile: Any) -> dict[str, Any]:
        calls.append(system)
        return {"system": system, **({"mm2_profile": mm2_profile} if mm2_profile else {})}

    monkeypatch.setattr(scenario, "_isolation_run", run)
    doc = scenario.isolation(_Bench(), repeats=2, warm_brokers_s=7.0)  # type: ignore[arg-type]
    assert calls == ["warm 7.0", "strait", "mm2", "mm2", "strait"]
    assert [(r["system"], r["repeat"], r["order"]) for r in doc["runs"]] == [
        ("strait", 0, 0),
        ("mm2", 0, 1),
        ("mm2", 1, 0),
        ("strait", 1, 1),
    ]
    assert doc["params"]["warm_brokers_s"] == 7.0


def test_a_warm_drain_is_one_unmeasured_strait_run_of_that_backlog_before_the_measured_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = importlib.import_module("strait.bench.scenarios.isolation")
    monkeypatch.setattr(scenario, "warm_brokers", lambda bench, seconds, **kw: None)
    shapes: list[tuple[str, Any]] = []

    def run(bench: Any, system: str, shape: Any, *, copy: Any, mm2_profile: Any) -> dict[str, Any]:
        shapes.append((system, shape))
        return {"system": system, **({"mm2_profile": mm2_profile} if mm2_profile else {})}

    monkeypatch.setattr(scenario, "_isolation_run", run)
    doc = scenario.isolation(_Bench(), backlog=2_000_000, warm_drain=300_000)  # type: ignore[arg-type]
    assert [(system, shape.backlog) for system, shape in shapes] == [
        ("strait", 300_000),
        ("strait", 2_000_000),
        ("mm2", 2_000_000),
    ]
    assert [r["system"] for r in doc["runs"]] == ["strait", "mm2"]  # the warm drain is not a result
    assert doc["params"]["warm_drain"] == 300_000


def test_each_pacing_runs_strait_once_with_its_worker_environment_and_its_own_label(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = importlib.import_module("strait.bench.scenarios.isolation")
    monkeypatch.setattr(scenario, "warm_brokers", lambda bench, seconds, **kw: None)
    # The caller's own: hidden from the runs, then back.
    monkeypatch.setenv("STRAIT_WORKER__BATCH_SHARING__PACE", "fixed")
    seen: list[tuple[str, dict[str, str]]] = []

    def run(bench: Any, system: str, shape: Any, *, copy: Any, mm2_profile: Any) -> dict[str, Any]:
        seen.append((system, {k: os.environ[k] for k in scenario.PACING_ENV if k in os.environ}))
        return {"system": system, **({"mm2_profile": mm2_profile} if mm2_profile else {})}

    monkeypatch.setattr(scenario, "_isolation_run", run)
    doc = scenario.isolation(_Bench(), pacings=["latency:40", "fixed:8", "off"])  # type: ignore[arg-type]
    assert seen == [
        (
            "strait",
            {"STRAIT_WORKER__BATCH_SHARING__PACE": "latency", "STRAIT_WORKER__BATCH_SHARING__LATENCY_BUDGET_MS": "40"},
        ),
        ("strait", {"STRAIT_WORKER__BATCH_SHARING__PACE": "fixed", "STRAIT_WORKER__BATCH_SHARING__FIXED_MB_S": "8"}),
        ("strait", {"STRAIT_WORKER__BATCH_SHARING__ENABLED": "false"}),
        ("mm2", {}),
    ]
    assert os.environ["STRAIT_WORKER__BATCH_SHARING__PACE"] == "fixed"
    assert [mode_of(r) for r in doc["runs"]] == [
        "strait pacing latency:40",
        "strait pacing fixed:8",
        "strait pacing off",
        "mm2",
    ]
    assert doc["params"]["pacings"] == ["latency:40", "fixed:8", "off"]
    assert pacing_env(None) == {} and pacing_env("fixed") == {"STRAIT_WORKER__BATCH_SHARING__PACE": "fixed"}
    for word in ("fast", "fixed:0", "latency:x", "off:3"):
        with pytest.raises(ValueError, match="pacing"):
            pacing_env(word)


def test_the_order_of_a_systems_modes_alternates_per_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = importlib.import_module("strait.bench.scenarios.isolation")
    monkeypatch.setattr(scenario, "warm_brokers", lambda bench, seconds, **kw: None)

    def run(bench: Any, system: str, shape: Any, *, copy: Any, mm2_profile: Any) -> dict[str, Any]:
        return {"system": system, **({"mm2_profile": mm2_profile} if mm2_profile else {})}

    monkeypatch.setattr(scenario, "_isolation_run", run)
    doc = scenario.isolation(_Bench(), repeats=3, pacings=["latency", "fixed"], mm2_profiles=["default", "tuned"])  # type: ignore[arg-type]
    assert [(r.get("pacing") or r["mm2_profile"], r["repeat"], r["order"]) for r in doc["runs"]] == [
        ("latency", 0, 0),
        ("fixed", 0, 1),
        ("default", 0, 2),
        ("tuned", 0, 3),
        ("tuned", 1, 0),
        ("default", 1, 1),
        ("fixed", 1, 2),
        ("latency", 1, 3),
        ("latency", 2, 0),
        ("fixed", 2, 1),
        ("default", 2, 2),
        ("tuned", 2, 3),
    ]
