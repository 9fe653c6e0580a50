"""`strait bench delivery --copy`: both delivery modes once per copy mode; each ratio divides
exactly-once by at-least-once in the same copy mode."""

from __future__ import annotations

from typing import Any

from strait.bench import report_delivery
from strait.bench.scenarios.delivery import delivery_ratios, variants


def test_both_deliveries_run_once_per_copy_mode_in_alternating_order() -> None:
    alo, eo = ("strait", "at-least-once"), ("strait", "exactly-once")
    assert variants([None], 0) == [(*alo, None), (*eo, None)]
    assert variants([None], 1) == [(*eo, None), (*alo, None)]
    assert variants(["record", "batch", "record"], 0) == [
        (*alo, "record"),
        (*alo, "batch"),
        (*eo, "record"),
        (*eo, "batch"),
    ]
    assert variants(["record", "batch"], 1)[0] == (*eo, "batch")
    assert variants(["record"], 0) == [(*alo, "record"), (*eo, "record")]


def test_mirrormaker_runs_exactly_once_when_it_is_among_the_systems() -> None:
    assert variants(["batch"], 0, mm2=True)[-1] == ("mm2", "exactly-once", None)
    assert variants(["batch"], 1, mm2=True)[0] == ("mm2", "exactly-once", None)
    assert all(system == "strait" for system, _, _ in variants(["batch"], 0))


def _run(kind: str, delivery: str, copy: str | None, **figures: Any) -> dict[str, Any]:
    run: dict[str, Any] = {"kind": kind, "delivery": delivery, **({"copy": copy} if copy else {})}
    if kind == "latency":
        run.update(rate=1000, latency=figures)
    else:
        run.update(size=100, **figures)
    return run


RUNS = [
    _run("throughput", "at-least-once", "record", steady_records_per_s=100_000.0),
    _run("throughput", "at-least-once", "batch", steady_records_per_s=400_000.0),
    _run("throughput", "exactly-once", "record", steady_records_per_s=80_000.0),
    _run("latency", "at-least-once", "record", p50_ms=2.0, p99_ms=10.0),
    _run("latency", "at-least-once", "batch", p50_ms=8.0, p99_ms=40.0),
    _run("latency", "exactly-once", "record", p50_ms=4.0, p99_ms=20.0),
]


def test_each_ratio_divides_by_its_own_copy_mode() -> None:
    ratios = delivery_ratios(RUNS, [100], [1000], ["record", "batch"])
    record, batch = ratios["throughput"]
    assert (record["copy"], record["steady_records_per_s"], record["meets_goal"]) == ("record", 0.8, True)
    # No exactly-once run in batch mode: no ratio, rather than one against another mode.
    assert (batch["copy"], batch["steady_records_per_s"], batch["meets_goal"]) == ("batch", None, None)
    assert [(q["copy"], q["p99_ms"]) for q in ratios["latency"]] == [("record", 2.0), ("batch", None)]


def test_without_copy_modes_the_ratios_are_as_before() -> None:
    runs = [{k: v for k, v in r.items() if k != "copy"} for r in RUNS if r.get("copy") != "batch"]
    assert len(runs) == 4
    ratios = delivery_ratios(runs, [100], [1000])
    assert [("copy" in q, q["steady_records_per_s"]) for q in ratios["throughput"]] == [(False, 0.8)]


def test_the_report_names_the_copy_mode_of_each_run_and_ratio() -> None:
    doc = {"runs": RUNS, "ratios": delivery_ratios(RUNS, [100], [1000], ["record", "batch"]), "params": {}}
    text = "\n".join(report_delivery.render(doc))
    assert "at-least-once (batch)" in text and "at-least-once (record)" in text
    assert "100 B, at-least-once batch" in text and "1,000, at-least-once record" in text
    summary = "\n".join(report_delivery.delivery_summary(doc))
    assert "100 B, at-least-once record 0.80" in summary


def test_exactly_once_in_batch_mode_is_divided_by_at_least_once_in_batch_mode() -> None:
    runs = [
        *RUNS,
        _run("throughput", "exactly-once", "batch", steady_records_per_s=360_000.0),
        _run("latency", "exactly-once", "batch", p50_ms=16.0, p99_ms=60.0),
    ]
    ratios = delivery_ratios(runs, [100], [1000], ["record", "batch"])
    record, batch = ratios["throughput"]
    assert (record["exactly_once_copy"], record["steady_records_per_s"]) == ("record", 0.8)
    assert (batch["exactly_once_copy"], batch["steady_records_per_s"], batch["meets_goal"]) == ("batch", 0.9, True)
    assert [(q["exactly_once_copy"], q["p99_ms"]) for q in ratios["latency"]] == [("record", 2.0), ("batch", 1.5)]
    doc = {"runs": runs, "ratios": ratios, "params": {}}
    text = "\n".join(report_delivery.render(doc))
    assert "exactly-once (batch)" in text and "100 B, at-least-once batch, exactly-once batch" in text


def test_an_exactly_once_batch_route_keeps_its_offset_map() -> None:
    from strait.bench.straitrun import render_config

    def route(delivery: str | None, copy: str | None) -> dict[str, Any]:
        config = render_config(
            zookeeper=None,
            root="/r",
            src_props={},
            dst_props={},
            listen="127.0.0.1:1",
            api_token="t",
            session_timeout_s=4.0,
            delivery=delivery,
            copy=copy,
            store="kafka",
        )
        return dict(config["routes"][0])

    # The map is on by default and written inside the transactions in either copy mode.
    assert route("exactly-once", "batch") == {
        "name": "bench",
        "source": "src",
        "destination": "dst",
        "delivery": "exactly-once",
        "copy": "batch",
    }
    assert "offset_map" not in route("exactly-once", None)


def test_strait_exactly_once_is_divided_by_mirrormakers_and_the_report_says_so() -> None:
    mm2 = [
        {**_run("throughput", "exactly-once", None, steady_records_per_s=40_000.0), "system": "mm2"},
        {**_run("latency", "exactly-once", None, p50_ms=30.0, p99_ms=90.0), "system": "mm2"},
    ]
    runs = [
        *RUNS,
        _run("throughput", "exactly-once", "batch", steady_records_per_s=360_000.0),
        _run("latency", "exactly-once", "batch", p50_ms=16.0, p99_ms=60.0),
        *mm2,
    ]
    ratios = delivery_ratios(runs, [100], [1000], ["batch"])
    (batch,) = ratios["throughput"]
    # MirrorMaker's run counts in no Strait figure.
    assert batch["exactly_once_steady_records_per_s"] == 360_000.0
    assert (batch["mm2_exactly_once_steady_records_per_s"], batch["vs_mm2_steady_records_per_s"]) == (40_000.0, 9.0)
    assert batch["meets_mm2_goal"] is True
    (latency,) = ratios["latency"]
    assert (latency["exactly_once_p99_ms"], latency["mm2_exactly_once_p99_ms"]) == (60.0, 90.0)
    doc = {"runs": runs, "ratios": ratios, "params": {}, "goal_vs_mm2_ratio": 5.0}
    text = "\n".join(report_delivery.render(doc))
    assert "MM2 exactly-once" in text and "Strait / MM2 (exactly-once)" in text
    summary = "\n".join(report_delivery.delivery_summary(doc))
    assert "MirrorMaker 2 exactly-once records/s 100 B, at-least-once batch, exactly-once batch 9.00" in summary
