"""Exactly-once against at-least-once: Strait alone, both delivery modes in one run on one sandbox.

Two measurements, each made for both modes of the route's ``delivery`` key, alternating:

- throughput: one worker copies a pre-filled topic (same harness as the throughput scenario).
  A copy counts records as they become visible to a ``read_committed`` reader: destination end
  offsets for at-least-once (no transactions there), the route's checkpoints committed in the
  destination (the same transactions as the records) for exactly-once.
- end-to-end latency at fixed produce rates, read by an independent ``read_committed`` reader
  (same harness as the latency scenario): arrival minus the send time stamped in the record.

With ``copies`` both delivery modes run once per Strait copy mode (``record``, ``batch``, None:
the route's default, batch), the route's offset map on as by default (an exactly-once route
writes its runs into its transactions), and each ratio divides exactly-once by at-least-once in
the same copy mode. With ``mm2`` among the bench's
systems, MirrorMaker 2 runs exactly-once too (KIP-618: ``exactly.once.source.support`` on its
destination, the source read ``read_committed``; its copy counted by the source offsets its tasks
commit in the same transactions), and each row also divides Strait's exactly-once (batch mode
where it ran) by MirrorMaker 2's.

The pre-filled copy is large enough by default (2,000,000 records) to measure a steady rate: at
200,000 records of 100 B an at-least-once batch copy takes about a tenth of a second, the
interval at which the destination is polled, and an exactly-once copy mostly its first and last
transaction.

Every run records the machine's load while it ran, and what the Strait processes logged at
WARNING or above (the transactional producer's errors would show there).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strait.bench.machine import LoadWatch
from strait.bench.markdown import missing_words
from strait.bench.scenarios.harness import Bench, mean
from strait.bench.scenarios.latency import _latency_run
from strait.bench.scenarios.throughput import _throughput_run

MODES = ("at-least-once", "exactly-once")
GOAL_THROUGHPUT_RATIO = 0.8  # the goal: exactly-once copies at least 0.8 of at-least-once's records/s
GOAL_VS_MM2_RATIO = 5.0  # and at least 5x MirrorMaker 2's exactly-once records/s

# "2026-11-29 16:11:00,123 WARNING strait.worker...: msg", or librdkafka's "%3|1732...|FAIL|...".
_LOGGED = re.compile(r"^\S+ \S+ (?P<level>WARNING|ERROR|CRITICAL) (?P<text>.*)$")
_RDKAFKA = re.compile(r"^%(?P<level>[0-4])\|[\d.]+\|(?P<text>.*)$")


def delivery(
    bench: Bench,
    *,
    sizes: Sequence[int] = (100, 1024),
    records: int = 2_000_000,
    partitions: int = 4,
    rates: Sequence[float] = (1000, 10000),
    duration_s: float = 20.0,
    warmup_s: float = 15.0,
    latency_size: int = 100,
    repeats: int = 1,
    timeout_s: float = 600.0,
    copies: Sequence[str | None] = (None,),
) -> dict[str, Any]:
    """Both delivery modes of one Strait worker: copy throughput per record size, latency per rate
    (at-least-once once per copy mode in ``copies``)."""
    runs: list[dict[str, Any]] = []
    mm2 = "mm2" in bench.systems
    with LoadWatch() as overall:
        for repeat in range(repeats):
            for i, size in enumerate(sizes):
                for system, mode, copy in variants(copies, repeat + i, mm2=mm2):
                    bench.log(
                        f"delivery: {_system_words(system)}{mode}{_copy_words(copy)} copy of {records:,} records of "
                        f"{size} B, {partitions} partitions (repeat {repeat + 1}/{repeats})"
                    )
                    with LoadWatch() as load:
                        run = _throughput_run(
                            bench,
                            system,
                            1,
                            size,
                            "none",
                            records,
                            partitions,
                            timeout_s,
                            delivery=mode,
                            copy=copy,
                            drop_after=True,
                        )
                    runs.append(_finish(run, "throughput", repeat, load))
                    bench.log(f"  -> {_fmt(runs[-1])}")
            for i, rate in enumerate(rates):
                for system, mode, copy in variants(copies, repeat + i, mm2=mm2):
                    bench.log(
                        f"delivery: {_system_words(system)}{mode}{_copy_words(copy)} at {rate:,.0f} records/s for "
                        f"{warmup_s:.0f}+{duration_s:.0f}s"
                    )
                    with LoadWatch() as load:
                        run = _latency_run(
                            bench,
                            system,
                            rate,
                            duration_s,
                            warmup_s,
                            partitions,
                            latency_size,
                            1,
                            delivery=mode,
                            copy=copy,
                        )
                    runs.append(_finish(run, "latency", repeat, load))
                    bench.log(f"  -> {_fmt(runs[-1])}")
    return {
        "scenario": "delivery",
        "params": {
            "sizes": list(sizes),
            "records": records,
            "partitions": partitions,
            "rates": list(rates),
            "duration_s": duration_s,
            "warmup_s": warmup_s,
            "latency_size": latency_size,
            "workers": 1,
            "reader_isolation": "read_committed",
            "repeats": repeats,
            "copies": [c or "default" for c in copies],
            "mm2_exactly_once": mm2,
        },
        "load": overall.summary(),
        "runs": runs,
        "ratios": delivery_ratios(runs, sizes, rates, copies),
        "goal_throughput_ratio": GOAL_THROUGHPUT_RATIO,
        **({"goal_vs_mm2_ratio": GOAL_VS_MM2_RATIO} if mm2 else {}),
    }


def variants(copies: Sequence[str | None], n: int, *, mm2: bool = False) -> list[tuple[str, str, str | None]]:
    """(system, delivery, copy mode) of each run of one configuration: Strait at-least-once, then
    exactly-once, once per copy mode; MirrorMaker 2 exactly-once with ``mm2``; in alternating
    order, so none always runs first (cold caches, a fresh sandbox)."""
    modes = list(dict.fromkeys(copies))
    order: list[tuple[str, str, str | None]] = [("strait", delivery, copy) for delivery in MODES for copy in modes]
    if mm2:
        order.append(("mm2", "exactly-once", None))
    return order if n % 2 == 0 else order[::-1]


def _copy_words(copy: str | None) -> str:
    return f" ({copy} mode)" if copy else ""


def _system_words(system: str) -> str:
    return "MirrorMaker 2 " if system == "mm2" else ""


def _finish(run: dict[str, Any], kind: str, repeat: int, load: LoadWatch) -> dict[str, Any]:
    run["kind"] = kind
    run["repeat"] = repeat
    if kind == "throughput" and run.get("copy_s"):
        # The harness divides every record by first-to-last poll time, though the first poll already
        # found some (for exactly-once, the whole first transaction): count only those seen after it.
        after = run["records"] - run.get("first_count", 0)
        if after > 0:
            run["steady_records_per_s"] = round(after / run["copy_s"], 1)
            run["steady_cpu_s_per_gb"] = round(run["cpu_s_copy"] / (after * run["size"] / 1e9), 1)
    run["load"] = load.summary()
    run["strait_log"] = log_findings(Path(run["logs"]) / "strait")
    return run


def log_findings(folder: Path, *, examples: int = 8) -> dict[str, Any]:
    """Lines at WARNING or above in the Strait processes' logs: counts per level, a few distinct examples."""
    levels: Counter[str] = Counter()
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        for line in path.read_text(errors="replace").splitlines():
            text, level = _classify(line)
            if level is None:
                continue
            levels[level] += 1
            key = re.sub(r"\d+", "N", text)[:160]  # one example per message shape
            if key not in seen and len(seen) < examples:
                seen[key] = f"{path.stem}: {text[:300]}"
    return {"levels": dict(levels), "examples": list(seen.values())}


def _classify(line: str) -> tuple[str, str | None]:
    if m := _LOGGED.match(line):
        return m["text"], m["level"]
    if m := _RDKAFKA.match(line):
        return m["text"], {"0": "CRITICAL", "1": "CRITICAL", "2": "CRITICAL", "3": "ERROR", "4": "WARNING"}[m["level"]]
    if line.startswith("Traceback"):
        return line, "TRACEBACK"
    return line, None


def _fmt(run: dict[str, Any]) -> str:
    load = run["load"]
    tail = f"; load 1m {load['min_1m']}-{load['max_1m']}; logged {run['strait_log']['levels'] or 'nothing'}"
    if run.get("error"):
        return f"FAILED: {run['error']}{tail}"
    v = run.get("verify", {})
    verdict = f"{missing_words(v)}, dup {v.get('duplicated')}"
    if run["kind"] == "throughput":
        return (
            f"{run.get('steady_records_per_s') or 0:,.0f} rec/s ({run['records_per_s']:,.0f} all records / copy time), "
            f"{run.get('steady_cpu_s_per_gb') or 0:.0f} CPU s/GB, {verdict}{tail}"
        )
    lat = run.get("latency", {})
    return (
        f"p50 {lat.get('p50_ms', float('nan')):.1f} ms, p99 {lat.get('p99_ms', float('nan')):.1f} ms, {verdict}{tail}"
    )


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den == 0 else round(num / den, 3)


def delivery_ratios(
    runs: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    rates: Sequence[float],
    copies: Sequence[str | None] = (None,),
) -> dict[str, Any]:
    """Exactly-once / at-least-once, per record size (records/s, CPU s/GB) and per rate (p50, p99);
    one row per copy mode, exactly-once divided by at-least-once in that mode (a row names it as
    ``copy`` and ``exactly_once_copy`` when one was set)."""
    mm2_ran = any(r.get("system") == "mm2" for r in runs)

    def avg(
        kind: str, key: str, value: float, mode: str, copy: str | None, metric: str, system: str = "strait"
    ) -> float | None:
        values = []
        for r in runs:
            if r.get("kind") != kind or r.get(key) != value or r.get("delivery") != mode or r.get("error"):
                continue
            if r.get("system", "strait") != system:
                continue
            if system == "strait" and r.get("copy") != copy:
                continue
            figure = r.get("latency", {}).get(metric) if kind == "latency" else r.get(metric)
            if figure is not None:
                values.append(figure)
        return mean(values)

    def row_of(kind: str, key: str, value: float, copy: str | None, metrics: Sequence[str]) -> dict[str, Any]:
        row: dict[str, Any] = {key: value, **({"copy": copy} if copy else {})}
        if copy:
            row["exactly_once_copy"] = copy
        for metric in metrics:
            alo, eo = (avg(kind, key, value, m, copy, metric) for m in MODES)
            row[f"at_least_once_{metric}"], row[f"exactly_once_{metric}"] = alo, eo
            row[metric] = _ratio(eo, alo)
            if mm2_ran:
                theirs = avg(kind, key, value, "exactly-once", None, metric, system="mm2")
                row[f"mm2_exactly_once_{metric}"] = theirs
                row[f"vs_mm2_{metric}"] = _ratio(eo, theirs)
        return row

    throughput = []
    for size in sizes:
        for copy in dict.fromkeys(copies):
            row = row_of(
                "throughput",
                "size",
                size,
                copy,
                ("steady_records_per_s", "steady_cpu_s_per_gb", "records_per_s", "cpu_s_per_gb"),
            )
            ratio = row["steady_records_per_s"]
            row["meets_goal"] = None if ratio is None else ratio >= GOAL_THROUGHPUT_RATIO
            if mm2_ran:
                theirs = row["vs_mm2_steady_records_per_s"]
                row["meets_mm2_goal"] = None if theirs is None else theirs >= GOAL_VS_MM2_RATIO
            throughput.append(row)
    latency = [
        row_of("latency", "rate", rate, copy, ("p50_ms", "p99_ms")) for rate in rates for copy in dict.fromkeys(copies)
    ]
    return {"throughput": throughput, "latency": latency}
