"""The BENCHMARKS.md section of `strait bench isolation`: a realtime topic's latency while
another topic catches up a backlog, Strait against MirrorMaker 2."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict

_METHOD = (
    "A realtime topic gets a fixed rate of records from a producer process while an independent reader process "
    "times each arrival on the destination (as in the latency section). A second topic holds a backlog written "
    "inside one open transaction after the replicator started; both replicators read `read_committed` (Strait "
    "always; MirrorMaker 2 is given `src.consumer.isolation.level=read_committed`, its only change from the "
    "profile named), so the backlog appears all at once when the harness commits it. The realtime records are "
    "split by send time: without the backlog (after the warm-up, until 1 s before the commit), with it (from the "
    "commit until the destination holds the whole backlog, end offsets polled every 0.1 s) and after. The ratio "
    "with / without is each system's own; the goal is a p99 ratio below 2 for Strait. Strait runs its "
    "defaults: partitions more than 10,000 records behind move to the catch-up fetch pipeline, the others stay in "
    "the realtime one. Before the first measured run an unmeasured Strait run (the latency section's broker "
    "warm-up) warms the brokers; the systems' order alternates per repeat and each row gives its place. Load is "
    "the 1-minute load average sampled every 2 s during each run: on a busy two-core machine the backlog's copy "
    "competes with everything else for CPU, and the ratios are not evidence."
)


_GOAL = {True: "met (these runs)", False: "not met (these runs)", None: "—"}


def _label(mode: str) -> str:
    system, _, rest = mode.partition(" ")
    name = "Strait" if system == "strait" else "MM2"
    return f"{name} ({rest})" if rest else name


def _load(run: dict[str, Any]) -> str:
    load = run.get("load") or {}
    return f"{_n(load.get('min_1m'), 1)} to {_n(load.get('max_1m'), 1)}" if load else "—"


def _run_label(run: dict[str, Any]) -> str:
    """The repeat, and the run's place in it (``1, 2nd``): a first run may meet colder brokers."""
    order = run.get("order")
    place = "" if order is None else f", {('1st', '2nd', '3rd')[order] if order < 3 else f'{order + 1}th'}"
    return f"{run.get('repeat', 0) + 1}{place}"


def _runs_table(doc: dict[str, Any]) -> list[str]:
    rows = []
    for r in sorted(doc.get("runs", []), key=lambda r: (r.get("mode", r["system"]), r.get("repeat", 0))):
        without, with_ = r.get("latency_without") or {}, r.get("latency_with") or {}
        drain = r.get("drain") or {}
        rows.append(
            [
                _label(r.get("mode", r["system"])),
                _run_label(r),
                _n(without.get("p50_ms"), 1),
                _n(without.get("p99_ms"), 1),
                _n(with_.get("p50_ms"), 1),
                _n(with_.get("p99_ms"), 1),
                _n(r.get("ratio_p50"), 2),
                _n(r.get("ratio_p99"), 2),
                f"{_n(without.get('count'))} / {_n(with_.get('count'))}",
                _n(drain.get("drain_s"), 1) if drain.get("drained") else "not drained",
                _n(drain.get("records_per_s")),
                f"{_n(r.get('cpu_percent_without'), 0, ' %')} / {_n(r.get('cpu_percent_with'), 0, ' %')}",
                _load(r),
                _verdict(r),
            ]
        )
    return _table(
        [
            "system",
            "repeat, place",
            "without p50 ms",
            "without p99 ms",
            "with p50 ms",
            "with p99 ms",
            "p50 with / without",
            "p99 with / without",
            "records measured without / with",
            "backlog drained in s",
            "backlog rec/s",
            "replicator CPU without / with",
            "load 1m",
            VERDICT_HEADER,
        ],
        rows,
    )


def render(doc: dict[str, Any]) -> list[str]:
    summary = doc.get("summary") or {}
    params = doc.get("params") or {}
    goal = doc.get("goal_p99_ratio")
    lines = [
        f"Realtime topic at {_n(params.get('rate'))} records/s ({_n(params.get('partitions'))} partitions); backlog "
        f"of {_n(params.get('backlog'))} records of {_n(params.get('size'))} B ({_n(params.get('backlog_partitions'))} "
        f"partitions); {_n(params.get('parallelism'))} Strait worker(s) = MirrorMaker task(s).",
        "",
    ]
    lines += _runs_table(doc)
    lines += ["", f"Per system (means over the repeats; goal for Strait: p99 with / without < {_n(goal, 1)}):", ""]
    lines += _table(
        ["system", "runs", "without p99 ms", "with p99 ms", "p50 ratio", "p99 ratio", "backlog drained in s", "goal"],
        [
            [
                _label(row["mode"]),
                _n(row.get("runs")),
                _n(row.get("without_p99_ms"), 1),
                _n(row.get("with_p99_ms"), 1),
                _n(row.get("ratio_p50"), 2),
                _n(row.get("ratio_p99"), 2),
                _n(row.get("drain_s"), 1),
                _GOAL[row.get("meets_goal")] if row["system"] == "strait" else "—",
            ]
            for row in summary.get("systems", [])
        ],
    )
    if summary.get("versus"):
        lines += ["", "Strait / MM2 (lower is better for Strait):", ""]
        lines += _table(
            ["Strait", "MM2", "p99 with the backlog", "p99 rise (ratio of ratios)", "backlog drain time"],
            [
                [
                    _label(v["strait"]),
                    _label(v["mm2"]),
                    _n(v.get("with_p99"), 2),
                    _n(v.get("ratio_p99"), 2),
                    _n(v.get("drain_s"), 2),
                ]
                for v in summary["versus"]
            ],
        )
    return lines


def isolation_summary_lines(doc: dict[str, Any] | None) -> list[str]:
    """The summary line of the isolation scenario, or nothing when it has not run."""
    if doc is None:
        return []
    parts = [
        f"{_label(row['mode'])} {_n(row.get('without_p99_ms'), 1)} → {_n(row.get('with_p99_ms'), 1)} ms "
        f"({_n(row.get('ratio_p99'), 2)}x)"
        for row in (doc.get("summary") or {}).get("systems", [])
    ]
    loads = [(r.get("load") or {}).get("max_1m") for r in doc.get("runs", [])]
    present = [x for x in loads if x is not None]
    return [
        f"- **Fetch isolation** (realtime p99 without → with a backlog of {_n(doc.get('params', {}).get('backlog'))} "
        f"records draining; goal for Strait: under {_n(doc.get('goal_p99_ratio'), 1)}x): "
        + "; ".join(parts)
        + (f"; 1-minute load up to {_n(max(present), 1)} during the runs." if present else ".")
    ]


ISOLATION_SECTION: tuple[str, str, Callable[[dict[str, Any]], list[str]]] = (
    "Fetch isolation: realtime latency while a backlog drains",
    _METHOD,
    render,
)
