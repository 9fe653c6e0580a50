"""The BENCHMARKS.md section of `strait bench delivery`: Strait exactly-once against at-least-once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict

_METHOD = (
    "Strait alone, the route's `delivery` switched between `at-least-once` and `exactly-once` (transactional "
    "producer, checkpoints committed in the same transaction, the route's transaction settings; the route's "
    "default offset map on in both modes, in batch mode written inside the transactions from cf01984 on), one "
    "worker, the "
    "two modes alternating in one invocation on the same sandbox, each on its own fresh topics. Throughput: a "
    "pre-filled topic is copied in full; records count once a `read_committed` reader can see them (destination "
    "end offsets for at-least-once; for exactly-once the checkpoints committed in the destination group, in the "
    "same transactions as the records, since end offsets also count transaction markers), polled every 100 ms; "
    "records/s counts the records that became visible after the first poll that saw any, over the time from that "
    "poll to the one that saw the last (the throughput section's formula, every record over the same time, is "
    "shown too: it can flatter exactly-once, whose first poll finds a whole transaction at once); CPU s/GB is the "
    "Strait processes' CPU (controller + worker) over the same interval per GB of those records. Latency: a "
    "producer at a fixed rate, an independent reader on the destination with "
    "`isolation.level=read_committed` in both modes; latency = arrival at the reader minus the send time stamped "
    "in the record, warm-up excluded. Load is the machine's load average sampled every 2 s during each run (it "
    "counts every process on the machine, not only this benchmark's); logged = lines at WARNING or above in the "
    "Strait processes' logs. MirrorMaker 2 exactly-once, where it ran: dedicated mode, one task, "
    "`dst.exactly.once.source.support = enabled` with the internal REST server (KIP-618: each task writes its "
    "records and its source offsets in one transaction), the source read `read_committed`, the other settings as "
    "in the throughput section; its copy counts the source offsets its tasks committed (the counterpart of "
    "Strait's checkpoints), and its latency runs use the same warm-up."
)


def _load(run: dict[str, Any]) -> str:
    load = run.get("load") or {}
    if not load:
        return "—"
    return f"{_n(load.get('min_1m'), 1)} to {_n(load.get('max_1m'), 1)}"


def _logged(run: dict[str, Any]) -> str:
    levels = (run.get("strait_log") or {}).get("levels") or {}
    return ", ".join(f"{n} {level}" for level, n in sorted(levels.items())) or "none"


def _delivery(run: dict[str, Any]) -> str:
    """The run's delivery, and its copy mode when the run set one (`strait bench delivery --copy`);
    MirrorMaker 2's runs say so."""
    who = "MM2 " if run.get("system") == "mm2" else ""
    return who + str(run.get("delivery", "—")) + (f" ({run['copy']})" if run.get("copy") else "")


def _with_copy(label: str, row: dict[str, Any]) -> str:
    if not row.get("copy"):
        return label
    # Exactly-once divides record by record unless the row says otherwise (the older reports' rows).
    eo = ", exactly-once batch" if row.get("exactly_once_copy") == "batch" else ""
    return label + f", at-least-once {row['copy']}" + eo


def _runs(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in doc.get("runs", []) if r.get("kind") == kind]


def render(doc: dict[str, Any]) -> list[str]:
    load = doc.get("load") or {}
    lines = [
        f"Load average during the whole run: {load.get('start')} at start, {load.get('end')} at the end, 1-minute "
        f"figure {_n(load.get('min_1m'), 1)} to {_n(load.get('max_1m'), 1)} (mean {_n(load.get('mean_1m'), 1)}) on "
        f"{doc.get('machine', {}).get('cores')} cores; all CPUs {_n(load.get('cpu_busy_percent'), 0, ' %')} busy.",
        "",
    ]
    rows = [
        [
            f"{r['size']} B",
            _delivery(r),
            str(r.get("repeat", 0) + 1),
            _n(r.get("records")),
            _n(r.get("steady_records_per_s")),
            _n(r.get("records_per_s")),
            _n(r.get("steady_cpu_s_per_gb")),
            _n(r.get("startup_s"), 1),
            _load(r),
            _logged(r),
            _verdict(r),
        ]
        for r in sorted(_runs(doc, "throughput"), key=lambda r: (r["size"], _delivery(r), r.get("repeat", 0)))
    ]
    lines += _table(
        [
            "record",
            "delivery",
            "run",
            "records",
            "records/s",
            "all records / copy time",
            "CPU s/GB",
            "start-up s",
            "load 1m",
            "logged",
            VERDICT_HEADER,
        ],
        rows,
    )
    goal = doc.get("goal_throughput_ratio")
    lines += ["", f"Exactly-once / at-least-once (records/s: goal ≥ {_n(goal, 1)}; CPU per GB: lower is better)."]
    if doc.get("params", {}).get("repeats", 1) == 1:
        lines[-1] += (
            " One run per mode and configuration: on a loaded machine runs of one configuration can differ "
            "several-fold, so a single pair does not settle the goal either way (rerun with `--repeats N`)."
        )
    throughput = doc.get("ratios", {}).get("throughput", [])
    mm2 = any("vs_mm2_steady_records_per_s" in q for q in throughput)
    if mm2:
        lines[-1] += f" Strait exactly-once / MirrorMaker 2 exactly-once: goal ≥ {_n(doc.get('goal_vs_mm2_ratio'), 1)}."
    lines += [""]
    yes_no = {True: "yes", False: "no", None: "—"}
    lines += _table(
        [
            "record",
            "at-least-once rec/s",
            "exactly-once rec/s",
            "records/s ratio",
            "goal met (these runs)",
            "ratio of all records / copy time",
            "CPU s/GB ratio",
        ]
        + (["MM2 exactly-once rec/s", "Strait / MM2 (exactly-once)", "goal met (these runs)"] if mm2 else []),
        [
            [
                _with_copy(f"{q['size']} B", q),
                _n(q.get("at_least_once_steady_records_per_s")),
                _n(q.get("exactly_once_steady_records_per_s")),
                _n(q.get("steady_records_per_s"), 2),
                yes_no[q.get("meets_goal")],
                _n(q.get("records_per_s"), 2),
                _n(q.get("steady_cpu_s_per_gb"), 2),
            ]
            + (
                [
                    _n(q.get("mm2_exactly_once_steady_records_per_s")),
                    _n(q.get("vs_mm2_steady_records_per_s"), 2),
                    yes_no[q.get("meets_mm2_goal")],
                ]
                if mm2
                else []
            )
            for q in throughput
        ],
    )
    rows = [
        [
            _n(r["rate"]),
            _delivery(r),
            str(r.get("repeat", 0) + 1),
            _n(r.get("achieved_rate")),
            _n(r.get("latency", {}).get("p50_ms"), 1),
            _n(r.get("latency", {}).get("p99_ms"), 1),
            _n(r.get("latency", {}).get("p999_ms"), 1),
            _n(r.get("latency", {}).get("max_ms"), 1),
            _n(r.get("cpu_percent"), 0, " %"),
            _load(r),
            _logged(r),
            _verdict(r),
        ]
        for r in sorted(_runs(doc, "latency"), key=lambda r: (r["rate"], _delivery(r), r.get("repeat", 0)))
    ]
    size = doc.get("params", {}).get("latency_size")
    lines += ["", f"End-to-end latency at fixed produce rates ({_n(size)} B records, one worker):", ""]
    lines += _table(
        [
            "target rec/s",
            "delivery",
            "run",
            "achieved rec/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "Strait CPU",
            "load 1m",
            "logged",
            VERDICT_HEADER,
        ],
        rows,
    )
    lines += ["", "Latency, exactly-once / at-least-once (`read_committed` reader in both modes):", ""]
    latency = doc.get("ratios", {}).get("latency", [])
    mm2 = any("mm2_exactly_once_p99_ms" in q for q in latency)
    lines += _table(
        [
            "rate",
            "at-least-once p50 ms",
            "exactly-once p50 ms",
            "p50 ratio",
            "at-least-once p99 ms",
            "exactly-once p99 ms",
            "p99 ratio",
        ]
        + (["MM2 exactly-once p50 ms", "MM2 exactly-once p99 ms"] if mm2 else []),
        [
            [
                _with_copy(_n(q["rate"]), q),
                _n(q.get("at_least_once_p50_ms"), 1),
                _n(q.get("exactly_once_p50_ms"), 1),
                _n(q.get("p50_ms"), 2),
                _n(q.get("at_least_once_p99_ms"), 1),
                _n(q.get("exactly_once_p99_ms"), 1),
                _n(q.get("p99_ms"), 2),
            ]
            + ([_n(q.get("mm2_exactly_once_p50_ms"), 1), _n(q.get("mm2_exactly_once_p99_ms"), 1)] if mm2 else [])
            for q in latency
        ],
    )
    examples = [
        f"- {_delivery(r)} {r['kind']} ({_n(r.get('size') or r.get('rate'))}): `{text}`"
        for r in doc.get("runs", [])
        for text in (r.get("strait_log") or {}).get("examples", [])[:3]
    ]
    if examples:
        lines += ["", "What the Strait processes logged at WARNING or above (first examples of each run):", ""]
        lines += examples
    return lines


def delivery_summary(doc: dict[str, Any] | None) -> list[str]:
    """The summary line of the delivery scenario, or nothing when it has not run."""
    if doc is None:
        return []
    ratios = doc.get("ratios", {})
    sizes = ", ".join(
        f"{_with_copy(str(q['size']) + ' B', q)} {_n(q.get('steady_records_per_s'), 2)}"
        for q in ratios.get("throughput", [])
    )
    p99 = "; ".join(
        f"at {_with_copy(_n(q['rate']) + '/s', q)} {_n(q.get('exactly_once_p99_ms'), 1)} ms vs "
        f"{_n(q.get('at_least_once_p99_ms'), 1)} ms"
        for q in ratios.get("latency", [])
    )
    vs_mm2 = ", ".join(
        f"{_with_copy(str(q['size']) + ' B', q)} {_n(q.get('vs_mm2_steady_records_per_s'), 2)}"
        for q in ratios.get("throughput", [])
        if q.get("vs_mm2_steady_records_per_s") is not None
    )
    mm2 = (
        f"; Strait exactly-once / MirrorMaker 2 exactly-once records/s {vs_mm2} "
        f"(goal ≥ {_n(doc.get('goal_vs_mm2_ratio'), 1)})"
        if vs_mm2
        else ""
    )
    load = doc.get("load") or {}
    return [
        f"- **Exactly-once vs at-least-once** (Strait, one worker): records/s ratio {sizes} "
        f"(goal ≥ {_n(doc.get('goal_throughput_ratio'), 1)}){mm2}; p99 through a `read_committed` reader {p99}; "
        f"1-minute load average {_n(load.get('min_1m'), 1)} to {_n(load.get('max_1m'), 1)} during the run."
    ]


DELIVERY_SECTION: tuple[str, str, Callable[[dict[str, Any]], list[str]]] = (
    "Exactly-once vs at-least-once (Strait)",
    _METHOD,
    render,
)
