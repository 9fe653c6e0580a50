"""Benchmark results: JSON under ``bench/results/``, PNG plots beside them, and ``BENCHMARKS.md``.

The Markdown file is generated from whatever result files exist, so every figure in it can be
traced to a JSON file and the command that wrote it.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from strait.bench.markdown import VERDICT_HEADER
from strait.bench.markdown import _n as _n
from strait.bench.markdown import _table as _table
from strait.bench.markdown import _verdict as _verdict
from strait.bench.plots import plot as plot
from strait.bench.report_delivery import DELIVERY_SECTION, delivery_summary
from strait.bench.report_failover import FAILOVER_SECTION, failover_summary
from strait.bench.report_isolation import ISOLATION_SECTION, isolation_summary_lines
from strait.bench.report_latency import floor_summary
from strait.bench.report_latency import latency_md as _latency_md
from strait.bench.report_missing import MISSING_TERMS, missing_summary
from strait.bench.report_other import comparison_sections, provenance, scale_sections, shown_command
from strait.bench.report_security import SECURITY_SECTION
from strait.bench.report_throughput import throughput_md as _throughput_md
from strait.bench.report_wan import WAN_SECTION, wan_summary

SCENARIOS = (
    "smoke",
    "throughput",
    "latency",
    "add-topics",
    "worker-failure",
    "profile",
    "delivery",
    "failover",
    "security",
    "isolation",
    "wan",
)

COMMANDS = {
    "smoke": "strait bench smoke",
    "throughput": "strait bench throughput",
    "latency": "strait bench latency",
    "add-topics": "strait bench add-topics",
    "worker-failure": "strait bench worker-failure",
    "profile": "strait bench profile",
    "delivery": "strait bench delivery",
    "failover": "strait bench failover",
    "security": "strait bench security",
    "isolation": "strait bench isolation",
    "wan": "strait bench wan",
}


def run_commit(tree: Path | None = None) -> str | None:
    """The commit the code under measurement was checked out at, with ``+changes`` when the source
    tree differs from it; None outside a git checkout."""
    root = tree or Path(__file__).resolve().parents[3]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return None
    changed = git("status", "--porcelain", "--", "src")
    return f"{head}+changes" if changed else head


def save(result: dict[str, Any], results_dir: Path, *, machine: dict[str, Any], command: str) -> Path:
    """Write one scenario's result as ``<scenario>.json`` (the latest run of each scenario is kept),
    with the command, the commit it ran on and the machine (its load at the start included)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    document = {
        **result,
        "finished_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "commit": run_commit(),
        "machine": machine,
    }
    path = results_dir / f"{result['scenario']}.json"
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def load_all(results_dir: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for scenario in SCENARIOS:
        path = results_dir / f"{scenario}.json"
        if path.exists():
            found[scenario] = json.loads(path.read_text())
    return found


# ---- Markdown -----------------------------------------------------------------------------------


def _add_topics_md(doc: dict[str, Any]) -> list[str]:
    rows = [
        [
            "Strait" if r["system"] == "strait" else "MM2",
            _n(r.get("baseline_gap_a_ms"), 0),
            _n(r.get("gap_a_ms"), 0),
            _n(r.get("first_record_median_s"), 2),
            _n(r.get("first_record_max_s"), 2),
            _n(r.get("new_topics_missing")),
            _verdict(r),
        ]
        for r in doc["runs"]
    ]
    ratios = doc.get("ratios", {})
    return [
        *_table(
            [
                "system",
                "longest gap on A before (ms)",
                "longest gap on A after adding (ms)",
                "new topic first record, median (s)",
                "… slowest (s)",
                "new topics never seen",
                VERDICT_HEADER,
            ],
            rows,
        ),
        "",
        f"Ratios Strait / MM2: gap on A {_n(ratios.get('gap_a_ms'), 2)}, slowest new topic "
        f"{_n(ratios.get('first_record_max_s'), 2)}, median new topic {_n(ratios.get('first_record_median_s'), 2)}.",
    ]


def _failure_md(doc: dict[str, Any]) -> list[str]:
    rows = [
        [
            "Strait" if r["system"] == "strait" else "MM2",
            str(r.get("killed", "—")),
            _n(r.get("resume_s"), 2),
            _n(r.get("longest_gap_s"), 2),
            _n(r.get("stalled_partitions")),
            _verdict(r),
        ]
        for r in doc["runs"]
    ]
    return [
        *_table(
            [
                "system",
                "killed (kill -9)",
                "time until every partition flows again (s)",
                "longest partition gap (s)",
                "partitions stalled",
                VERDICT_HEADER,
            ],
            rows,
        ),
        "",
        f"Ratio Strait / MM2 of the time to resume: {_n(doc.get('ratios', {}).get('resume_s'), 2)}.",
    ]


def _smoke_md(doc: dict[str, Any]) -> list[str]:
    rows = [
        ["Strait" if r["system"] == "strait" else "MM2", _n(r.get("records")), _n(r.get("seconds"), 1), _verdict(r)]
        for r in doc["runs"]
    ]
    return _table(["system", "records", "seconds (start to last record)", VERDICT_HEADER], rows)


def _profile_md(doc: dict[str, Any]) -> list[str]:
    prof = doc.get("profile", {})
    lines = [
        f"One worker copied {_n(doc.get('params', {}).get('records'))} records at {_n(doc.get('records_per_s'))} "
        f"records/s using {_n(doc.get('worker_cpu_percent'), 0, ' %')} CPU (100 % = one core); "
        f"{_n(prof.get('samples'))} samples.",
        "",
        "Self time (innermost Python frame; time in librdkafka is charged to the line that called it):",
        "",
    ]
    lines += _table(["function", "samples", "%"], [[f"`{n}`", _n(c), _n(p, 1)] for n, c, p in prof.get("self", [])])
    lines += ["", "Inclusive time:", ""]
    lines += _table(
        ["function", "samples", "%"], [[f"`{n}`", _n(c), _n(p, 1)] for n, c, p in prof.get("inclusive", [])]
    )
    if prof.get("threads"):
        lines += ["", "By thread:", ""]
        lines += _table(["thread", "samples", "%"], [[f"`{n}`", _n(c), _n(p, 1)] for n, c, p in prof["threads"]])
    return lines


_SECTIONS: dict[str, tuple[str, str, Callable[[dict[str, Any]], list[str]]]] = {
    "throughput": (
        "Throughput",
        "A pre-filled source topic is copied in full. records/s and MB/s are measured from the first to the last "
        "record present on the destination (destination high watermarks polled every 100 ms), so start-up is "
        "excluded (shown separately). CPU s/GB is the replicator processes' user+system CPU over the same interval "
        "per GB of record values; peak RSS is the sum of VmHWM of those processes (Strait: controller + workers).",
        _throughput_md,
    ),
    "latency": (
        "End-to-end latency",
        "A producer sends at a fixed rate (its own process); an independent reader (its own process) consumes the "
        "destination. Latency = arrival at the reader minus the send time stamped in the record, same host clock; "
        "the first seconds (warm-up) are excluded. Replicator CPU is its processes' CPU time over the run divided "
        "by wall time (100 % = one core); the source and destination broker CPU are the sandbox brokers' over the "
        "same interval (one broker per cluster: what the replicator's fetches and produce requests, the producer's "
        "and the reader's cost the clusters on the same two cores).",
        _latency_md,
    ),
    "add-topics": (
        "Adding topics under load",
        "Traffic flows on topic A; ten new topics are created on the source (Strait: then added through "
        "`POST /topics/{topic}`; MM2: picked up by its topic pattern). Reported: the longest silence in A's "
        "arrivals at the destination from one second before the add to the end of traffic, against the longest "
        "one before; and how long after the add each new topic's first record arrives.",
        _add_topics_md,
    ),
    "worker-failure": (
        "Worker failure",
        "Two Strait workers (MM2: two dedicated-mode nodes, tasks.max=2) copy a topic under load; one is killed "
        "with SIGKILL. A partition is stalled when its longest silence after the kill exceeds twice the longest "
        "silence any partition had before it (at least 1 s); reported are the time from the kill until the last "
        "stalled partition's records arrive again, the longest per-partition gap, and the verifier's count of "
        "lost / not yet copied / duplicated / reordered records over the whole run.",
        _failure_md,
    ),
    "profile": (
        "Where Strait's worker spends its time",
        "py-spy (100 samples/s, idle excluded) attached to one Strait worker copying a pre-filled topic "
        "(`pip install py-spy`).",
        _profile_md,
    ),
    "smoke": (
        "Smoke run",
        "The CI-sized run of the harness: a small pre-filled topic copied by each system.",
        _smoke_md,
    ),
    "delivery": DELIVERY_SECTION,
    "failover": FAILOVER_SECTION,
    "security": SECURITY_SECTION,
    "isolation": ISOLATION_SECTION,
    "wan": WAN_SECTION,
}


def _span(values: Sequence[float | None], digits: int = 2) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "—"
    low, high = min(present), max(present)
    return _n(low, digits) if low == high else f"{_n(low, digits)} to {_n(high, digits)}"


def _profile_settings(profile: str) -> str:
    from strait.bench.mirrormaker import profile_properties

    return ", ".join(f"`{key}={value}`" for key, value in profile_properties(profile).items())


def _summary(results: dict[str, dict[str, Any]]) -> list[str]:
    """One line per scenario with its Strait / MM2 ratios, before the detail."""
    lines = []
    if "throughput" in results:
        doc = results["throughput"]
        headline = (doc.get("params", {}).get("payloads") or ["filler"])[0]
        ratios = [q for q in doc["ratios"] if q.get("payload", "filler") == headline]
        lines.append(
            f"- **Throughput** (records/s, Strait / MM2; {headline} records): "
            f"{_span([q.get('records_per_s') for q in ratios])} over "
            f"the {len(ratios)} configurations (means of the repeats; best runs "
            f"{_span([q.get('best_records_per_s') for q in ratios])}); CPU per GB "
            f"{_span([q.get('cpu_s_per_gb') for q in ratios])}; "
            f"peak RSS {_span([q.get('peak_rss_mb') for q in ratios])}."
        )
    if "latency" in results:
        doc = results["latency"]
        headline = (doc.get("params", {}).get("payloads") or ["filler"])[0]
        parts = [
            f"at {_n(q['rate'])}/s{' (' + q['copy'] + ')' if q.get('copy') else ''} "
            f"p50 {_n(q.get('p50_ms'), 2)}, p99 {_n(q.get('p99_ms'), 2)}, "
            f"p99.9 {_n(q.get('p999_ms'), 2)} (best runs: {_n(q.get('best_p50_ms'), 2)}, "
            f"{_n(q.get('best_p99_ms'), 2)}, {_n(q.get('best_p999_ms'), 2)})"
            for q in doc["ratios"]
            if q.get("payload", "filler") == headline
        ]
        lines.append(
            f"- **Latency** (Strait / MM2, lower is better; {headline} records): "
            + "; ".join(parts)
            + floor_summary(doc)
            + "."
        )
    if "add-topics" in results:
        r = results["add-topics"].get("ratios", {})
        lines.append(
            f"- **Adding 10 topics under load** (Strait / MM2): longest gap on the busy topic "
            f"{_n(r.get('gap_a_ms'), 2)}, slowest new topic's first record {_n(r.get('first_record_max_s'), 2)}."
        )
    if "worker-failure" in results:
        r = results["worker-failure"].get("ratios", {})
        lines.append(
            f"- **Worker kill -9** (Strait / MM2): time until every partition flows again {_n(r.get('resume_s'), 2)}."
        )
    lines += delivery_summary(results.get("delivery"))
    lines += failover_summary(results.get("failover"))
    lines += isolation_summary_lines(results.get("isolation"))
    lines += wan_summary(results.get("wan"))
    lines += missing_summary(results)
    return ["## Summary", "", *lines, ""] if lines else []


def render_markdown(results: dict[str, dict[str, Any]], results_dir: Path | None = None) -> str:
    """``BENCHMARKS.md`` from the result documents, and from the other result files of
    ``results_dir`` (scale benchmarks, compared runs) when given."""
    lines = [
        "# Benchmarks: Strait vs MirrorMaker 2",
        "",
        "Generated by `strait bench report` from `bench/results/*.json`; every figure comes from a command below "
        "and can be rerun. Both systems run in the same invocation on the same sandbox clusters (real Kafka 4.4.0, "
        "one broker per cluster, all on 127.0.0.1), alternating, each on its own freshly created topics; every run "
        "ends with the verifier reading the whole destination topic.",
        "",
    ]
    lines += _summary(results)
    machine = next((doc.get("machine") for doc in results.values() if doc.get("machine")), None)
    if machine:
        lines += [
            "## Machine",
            "",
            f"- CPU: {machine.get('cpu')}, {machine.get('cores')} cores; memory {machine.get('memory_gb')} GB; "
            f"Linux {machine.get('kernel')}",
            f"- Python {machine.get('python')}; {machine.get('java')}",
            f"- {machine.get('kafka_broker')}; MirrorMaker 2 from {machine.get('mirrormaker')}",
            "- The machine was shared with other work while these ran (the load average at each run's start is "
            "given with its command; 2 cores): absolute figures are noisy. The two systems ran alternately under "
            "the same conditions, which is why ratios are reported.",
            "",
        ]
    lines += [
        "## How the peers are configured",
        "",
        "- **MirrorMaker 2**: `org.apache.kafka.connect.mirror.MirrorMaker` in dedicated mode, one flow `src->dst`, "
        "`IdentityReplicationPolicy` (same topic names as Strait), `tasks.max` = Strait's worker count, heap 512 MB, "
        "heartbeats / checkpoints / offset-syncs / config and ACL sync off (work Strait does not do), "
        "`refresh.topics.interval.seconds=5`, `scheduled.rebalance.max.delay.ms=10000` (default 300000: with the "
        "default a dead node's tasks wait 5 minutes), producer compression = the source topic's codec, producer "
        "and consumer defaults otherwise (profile `default`).",
        "- **MirrorMaker 2, profile `tuned`** (`strait bench throughput --mm2-profile default,tuned`), what a careful "
        "operator would set for throughput on top of the above: " + _profile_settings("tuned") + ".",
        "- **Strait**: one controller and N worker processes (`python -m strait controller|worker`) from one YAML "
        "config with the configuration's default session timeout, topics added through the REST API with "
        "`start: earliest`.",
        "",
    ]
    lines += [
        "## Reading these results",
        "",
        "- Each figure is one run (or the mean of the listed runs) on a two-core machine that other work was "
        "loading heavily; a replicator that gets starved of CPU for a few seconds falls behind and shows it as "
        "throughput or latency. Runs of the same configuration can differ several-fold; compare the per-run rows, "
        "and rerun with `--repeats N` on a quiet machine before quoting a number.",
        "- MirrorMaker 2 is a JVM: start-up (tens of seconds here) and JIT warm-up (its latency at 10,000 "
        "records/s settles only after 15-20 s) are excluded from throughput (first to last record) and from "
        "latency (warm-up), so the steady state of both systems is compared.",
        "- Every run ends with the verifier: lost / not yet copied / duplicated / reordered are counted per "
        "source partition against the sequence numbers the producer wrote. " + MISSING_TERMS,
        "",
    ]
    for scenario in (
        "throughput",
        "latency",
        "isolation",
        "wan",
        "add-topics",
        "worker-failure",
        "delivery",
        "failover",
        "security",
        "profile",
        "smoke",
    ):
        doc = results.get(scenario)
        if doc is None:
            continue
        title, method, render = _SECTIONS[scenario]
        lines += [f"## {title}", "", method, ""]
        lines += [
            f"Command: `{shown_command(doc.get('command', COMMANDS[scenario]))}` — {provenance(doc)}, finished "
            f"{doc.get('finished_at')}, load "
            f"average at start {doc.get('machine', {}).get('load_average_at_start')}; parameters "
            f"`{json.dumps(doc.get('params', {}))}`.",
            "",
        ]
        lines += render(doc)
        plot = f"bench/results/{scenario}.png"
        if (Path(doc.get("_results_dir", "bench/results")) / f"{scenario}.png").exists():
            lines += ["", f"![{title}]({plot})"]
        lines.append("")
    missing = [s for s in SCENARIOS if s not in results]
    if missing:
        lines += ["## Not yet measured", "", "No result file yet for: " + ", ".join(missing) + ".", ""]
    if results_dir is not None and results_dir.is_dir():
        lines += scale_sections(results_dir)
        compared = comparison_sections(
            results_dir,
            {name: render for name, (_title, _method, render) in _SECTIONS.items()},
            skip=("session-expiry",),
        )
        if compared:
            lines += [
                "## Compared runs",
                "",
                "Runs kept side by side to compare one change or setting, one folder each; every file is rendered as "
                "its scenario's section above.",
                "",
                *compared,
            ]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_markdown(results_dir: Path, target: Path) -> Path:
    """``BENCHMARKS.md`` from the result files in ``results_dir`` alone."""
    results = load_all(results_dir)
    for doc in results.values():
        doc["_results_dir"] = str(results_dir)
    target.write_text(render_markdown(results, results_dir))
    return target
