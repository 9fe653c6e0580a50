"""The BENCHMARKS.md sections of the result files that `strait bench report` does not keep as the
latest run of a scenario: the scale benchmarks (assignment, balancer planner, ZooKeeper), the
false session expiries, and the folders of compared runs (``bench/results/<comparison>/``, each
with a README.md saying what it compares).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from strait.bench.markdown import _n, _table


def provenance(doc: dict[str, Any]) -> str:
    """The commit a result ran on (written by the harness), else the commit that recorded its file."""
    if doc.get("commit"):
        return f"commit `{doc['commit']}`"
    if doc.get("recorded_in"):
        return f"recorded in commit `{doc['recorded_in']}`"
    return "commit not recorded"


# Options that say where a run wrote its output, not what ran: left out of the commands shown.
_OUTPUT_OPTIONS = {"--workdir", "--results-dir", "--markdown", "--json"}


def shown_command(command: str) -> str:
    """A result's command without the options naming its scratch folders and output files."""
    words, shown, skip = command.split(), [], False
    for word in words:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in _OUTPUT_OPTIONS:
            skip = "=" not in word
            continue
        if word == "--keep":
            continue
        shown.append(word)
    return " ".join(shown)


def _load(values: Sequence[float] | None) -> str:
    return ", ".join(_n(v, 2) for v in values) if values else "—"


def _assignment(doc: dict[str, Any]) -> list[str]:
    params = doc.get("parameters", {})
    death, join = doc.get("death_assign_s", {}), doc.get("join_assign_s", {})
    runs = doc.get("runs", [])
    cpu_death = [r.get("death_assign_cpu_s") for r in runs]
    cpu_join = [r.get("join_assign_cpu_s") for r in runs]
    moved_death = sorted({r.get("death_moved") for r in runs})
    moved_join = sorted({r.get("join_moved") for r in runs})
    present = [v for v in cpu_death + cpu_join if v is not None]
    cpu_span = f"{_n(min(present), 2)}-{_n(max(present), 2)} s" if present else "—"
    return [
        "`strait bench assignment`: the controller's assignment of a generated fleet (no cluster) after one "
        "worker dies and after one joins, from the state before; each repeat kills a different worker.",
        "",
        f"{_n(params.get('partitions'))} partitions, {_n(params.get('workers'))} workers in "
        f"{_n(params.get('pools'))} pools, {_n(params.get('repeats'))} repeats, seed {params.get('seed')}; "
        f"{provenance(doc)}, finished {doc.get('finished')}, load average before "
        f"{_load(doc.get('load_average_before'))} on {doc.get('cpus')} cores.",
        "",
        *_table(
            ["step", "wall, median / max", "partitions moved"],
            [
                ["first assignment", f"{_n(doc.get('first_assign_s'), 2)} s", _n(params.get("partitions"))],
                ["steady cycle", f"{_n(doc.get('steady_cycle_s'), 2)} s", _n(doc.get("steady_cycle_moved"))],
                [
                    "one worker dies",
                    f"{_n(death.get('median'), 2)} / {_n(death.get('max'), 2)} s",
                    ", ".join(_n(m) for m in moved_death),
                ],
                [
                    "one worker joins",
                    f"{_n(join.get('median'), 2)} / {_n(join.get('max'), 2)} s",
                    ", ".join(_n(m) for m in moved_join),
                ],
            ],
        ),
        "",
        f"CPU time of a death or a join: {cpu_span}; the invariant checker found {_n(doc.get('violations'))} "
        f"violations; goal {_n(doc.get('goal_s'), 1)} s.",
    ]


def _planner(doc: dict[str, Any]) -> list[str]:
    rows = []
    for run in doc.get("runs", []):
        stats = run.get("stats", {})
        before, after = stats.get("traffic_spread_before") or {}, stats.get("traffic_spread_after") or {}
        traffic = (
            f"net in {_n((before.get('net_in') or 0) / 1e6, 1)} → {_n((after.get('net_in') or 0) / 1e6, 1)} MB/s"
            if before
            else "—"
        )
        rows.append(
            [
                f"{_n(run.get('brokers'))} brokers, {_n(run.get('dirs_per_broker'))} disks each, "
                f"{_n(run.get('replicas'))} replicas",
                str(run.get("goals")),
                f"{_n(run.get('plan_wall_s'), 2)} / {_n(run.get('plan_cpu_s'), 2)} s",
                f"+{_n((run.get('peak_rss_mb_after') or 0) - (run.get('peak_rss_mb_before') or 0))} MB",
                _n(stats.get("moves")),
                f"{_n(stats.get('spread_before'), 3)} → {_n(stats.get('spread_after'), 3)}",
                traffic,
                _load(run.get("load_average_before")),
            ]
        )
    return [
        "`strait bench planner`: planning a rebalance of a generated cluster (no cluster needed); `traffic` also "
        "evens out network in, leader bytes in and net out with synthetic traffic.",
        "",
        f"{provenance(doc)}, finished {doc.get('finished')}, load at the check {_load(doc.get('load_at_check'))}.",
        "",
        *_table(
            ["cluster", "goals", "plan wall / CPU", "peak RSS added", "moves", "disk spread", "traffic", "load before"],
            rows,
        ),
    ]


def _zookeeper(doc: dict[str, Any]) -> list[str]:
    first, death = doc.get("znodes_after_first") or {}, doc.get("znodes_after_death") or {}
    reads, reads_after = doc.get("worker_read_s") or {}, doc.get("worker_read_after_death_s") or {}
    return [
        "`strait bench zookeeper`: a real controller publishes an assignment on a real ZooKeeper; workers "
        "are simulated.",
        "",
        f"{_n(doc.get('partitions'))} partitions, {_n(doc.get('workers'))} workers, {_n(doc.get('topics'))} "
        f"topics; {provenance(doc)}, finished {doc.get('finished')}, load average before "
        f"{_load(doc.get('load_average_before'))} on {doc.get('cpus')} cores (times are upper bounds).",
        "",
        *_table(
            ["", "first publish", "after a worker died"],
            [
                ["publish", f"{_n(doc.get('first_publish_s'), 2)} s", f"{_n(doc.get('death_publish_s'), 2)} s"],
                ["control cycle", f"{_n(doc.get('first_cycle_s'), 2)} s", f"{_n(doc.get('death_cycle_s'), 2)} s"],
                [
                    "a worker reads its part, median / max",
                    f"{_n(reads.get('median'), 2)} / {_n(reads.get('max'), 2)} s",
                    f"{_n(reads_after.get('median'), 2)} / {_n(reads_after.get('max'), 2)} s",
                ],
                [
                    "largest node",
                    f"{_n(first.get('max_bytes'))} B",
                    f"{_n(death.get('max_bytes'))} B",
                ],
            ],
        ),
        "",
        f"The same assignment as one node would take {_n(doc.get('layout1_assignment_bytes'))} B (ZooKeeper's "
        "limit is 1 MB).",
    ]


def _session_expiry(doc: dict[str, Any], name: str) -> list[str]:
    rows = [
        [
            _n(r.get("session_timeout_s"), 0) + " s",
            str(r.get("condition")),
            _n(r.get("window_s"), 0) + " s",
            _n(r.get("stops")),
            _n((r.get("totals") or {}).get("expired")),
            f"{_n((r.get('load') or {}).get('mean'), 1)} / {_n((r.get('load') or {}).get('max'), 1)}",
        ]
        for r in doc.get("runs", [])
    ]
    return [
        f"`{name}`: {provenance(doc)}, load average at start "
        f"{_load((doc.get('machine') or {}).get('load_average_at_start'))}.",
        "",
        *_table(["session timeout", "condition", "window", "SIGSTOPs", "sessions expired", "load mean / max"], rows),
    ]


def _readme(folder: Path) -> tuple[str, list[str]]:
    """A comparison folder's title and description, from its README.md."""
    readme = folder / "README.md"
    if not readme.exists():
        return folder.name, []
    lines = readme.read_text().splitlines()
    title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else folder.name
    body = lines[1:] if lines and lines[0].startswith("#") else lines
    while body and not body[0].strip():
        body = body[1:]
    return title, body


def _run_line(doc: dict[str, Any]) -> str:
    machine = doc.get("machine") or {}
    load = machine.get("load_average_at_start") or (doc.get("params") or {}).get("load_at_check")
    return (
        f"Command: `{shown_command(str(doc.get('command', '—')))}` — {provenance(doc)}, finished "
        f"{doc.get('finished_at', '—')}, load average at start {_load(load)}."
    )


def comparison_sections(
    results_dir: Path,
    renderers: dict[str, Callable[[dict[str, Any]], list[str]]],
    skip: Sequence[str] = (),
) -> list[str]:
    """One section per folder of compared runs: its README, then each result file rendered as its
    scenario's section is."""
    lines: list[str] = []
    for folder in sorted(p for p in results_dir.iterdir() if p.is_dir() and p.name not in skip):
        title, body = _readme(folder)
        lines += [f"### {title}", "", f"Result files in `bench/results/{folder.name}/`.", ""]
        lines += [*body, ""] if body else []
        for path in sorted(folder.rglob("*.json")):
            doc = json.loads(path.read_text())
            render = renderers.get(str(doc.get("scenario")))
            name = path.relative_to(folder).as_posix()
            lines += [f"#### `{name}`", "", _run_line(doc), ""]
            if render is not None:
                try:
                    lines += render(doc)
                except (KeyError, TypeError, ValueError):
                    lines.append("(this file's layout predates the report's; its figures are in the JSON file)")
            lines.append("")
    return lines


def scale_sections(results_dir: Path) -> list[str]:
    """The assignment, planner, ZooKeeper and session-expiry results, each from its own file(s)."""
    lines: list[str] = []
    single: list[tuple[str, str, Callable[[dict[str, Any]], list[str]]]] = [
        ("assignment.json", "Assignment at scale", _assignment),
        ("planner.json", "Balancer planner at scale", _planner),
        ("zookeeper_scale.json", "ZooKeeper at scale", _zookeeper),
    ]
    for name, title, render in single:
        path = results_dir / name
        if path.exists():
            lines += [f"## {title}", "", *render(json.loads(path.read_text())), ""]
    expiry = sorted((results_dir / "session-expiry").glob("*.json"))
    if expiry:
        title, body = _readme(results_dir / "session-expiry")
        lines += [f"## {title}", "", *body, ""]
        for path in expiry:
            lines += [*_session_expiry(json.loads(path.read_text()), path.name), ""]
    return lines
