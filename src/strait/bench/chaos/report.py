"""Chaos results: `bench/results/chaos-*.json`, one per delivery mode, duration and seed, and
`RELIABILITY.md` generated from all of them, in the style of `BENCHMARKS.md`."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strait.bench.report import _n, _table, run_commit
from strait.bench.report_other import provenance, shown_command

PATTERN = "chaos-*.json"


def result_name(doc: Mapping[str, Any]) -> str:
    """`chaos-<delivery>[-<copy>][-<store>]-<duration>-seed<N>.json`: a rerun of the same run
    replaces its file (the copy mode is named when the run chose one or recorded the default it
    resolved to, the store when it is known)."""
    seconds = int(doc["duration_s"])
    duration = f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"
    copy = copy_mode(doc)
    mode = f"-{copy}" if copy else ""
    store = (doc.get("shape") or {}).get("store")
    on = f"-{store}" if store else ""
    return f"chaos-{doc['delivery']}{mode}{on}-{duration}-seed{doc['seed']}.json"


def store(doc: Mapping[str, Any]) -> str:
    """The coordination store of a run (runs that do not name one coordinated on ZooKeeper)."""
    return str((doc.get("shape") or {}).get("store") or "zookeeper")


def save(result: Mapping[str, Any], results_dir: Path, *, machine: Mapping[str, Any], command: str) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    document = {
        **result,
        "finished_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "commit": run_commit(),
        "machine": dict(machine),
    }
    path = results_dir / result_name(result)
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def load_all(results_dir: Path) -> list[dict[str, Any]]:
    """Every chaos result, longest runs first."""
    docs = [json.loads(path.read_text()) for path in sorted(results_dir.glob(PATTERN))]
    return sorted(docs, key=lambda d: (-d["duration_s"], d["delivery"], d["seed"]))


def write_markdown(results_dir: Path, target: Path) -> Path:
    target.write_text(render(load_all(results_dir)))
    return target


# ---- Markdown -----------------------------------------------------------------------------------


_STORES = {"kafka": "the destination cluster (Kafka store)", "zookeeper": "ZooKeeper"}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 and seconds % 60 == 0 else f"{seconds:.0f} s"


def _verdict(doc: Mapping[str, Any]) -> str:
    return "**pass**" if doc.get("ok") else "**FAIL**: " + "; ".join(doc.get("failures", []))


def _configuration(d: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two runs the same experiment: a later run of it supersedes an earlier one."""
    shape = d["shape"]
    return (
        d["delivery"],
        copy_mode(d),
        store(d),
        d["duration_s"],
        d["seed"],
        shape["brokers"],
        shape["workers"],
        shape["controllers"],
        bool(shape.get("hog_processes")),
    )


def latest(docs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The latest run of each configuration, in the order of ``docs``."""
    newest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for d in docs:
        key = _configuration(d)
        if key not in newest or str(d.get("finished_at", "")) > str(newest[key].get("finished_at", "")):
            newest[key] = d
    kept = {id(d) for d in newest.values()}
    return [d for d in docs if id(d) in kept]


def _commit(d: Mapping[str, Any]) -> str:
    return provenance(dict(d)).replace("recorded in commit", "recorded in").replace("commit ", "")


def _summary(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for d in sorted(docs, key=lambda d: str(d.get("finished_at", "")), reverse=True):
        t, shape, load = d["totals"], d["shape"], d.get("load_average", {})
        rows.append(
            [
                str(d.get("finished_at", "—")),
                _commit(d),
                d["delivery"] + _copy(d),
                _minutes(d["duration_s"]),
                str(d["seed"]),
                f"{shape['brokers']}+{shape['brokers']} brokers, {shape['workers']} workers, "
                f"{shape['controllers']} controllers on {store(d)}"
                + ("" if shape.get("hog_processes") else ", no CPU hog"),
                _n(t["checked"]),
                _n(sum(d["faults_injected"].values())),
                _n(t["lost"]),
                _n(t["not_yet_copied"]),
                _n(t["duplicates"]),
                _n(t["out_of_order"]),
                f"{_n(load.get('mean'), 1)} / {_n(load.get('max'), 1)}",
                _verdict(d),
            ]
        )
    return _table(
        [
            "finished",
            "commit",
            "delivery",
            "duration",
            "seed",
            "shape",
            "records checked",
            "faults",
            "lost",
            "not yet copied",
            "duplicates",
            "out of order",
            "load avg mean / max",
            "verdict",
        ],
        rows,
    )


def _faults(d: Mapping[str, Any]) -> list[str]:
    planned = d["schedule"]["planned"]
    kinds = sorted(set(planned) | set(d["faults_injected"]))
    rows = [
        [
            kind,
            _n(planned.get(kind, 0)),
            _n(d["faults_injected"].get(kind, 0)),
            _n(d["faults_skipped"].get(kind, 0)),
            _n(d["fault_errors"].get(kind, 0)),
        ]
        for kind in kinds
    ]
    return _table(["fault", "planned", "injected", "skipped", "failed to inject"], rows)


def _topics(d: Mapping[str, Any]) -> list[str]:
    rows = [
        [
            f"`{topic}`",
            _n(r["produced"]),
            _n(r["checked"]),
            _n(r["lost"]),
            _n(r["not_yet_copied"]),
            _n(r["duplicates"]),
            _n(r["resent_ranges"]),
            _n(r["out_of_order"]),
            _n(r["interleaved"]),
        ]
        for topic, r in sorted(d["per_topic"].items())
    ]
    return _table(
        [
            "topic",
            "produced",
            "checked",
            "lost",
            "not yet copied",
            "duplicates",
            "re-sent ranges",
            "out of order",
            "interleaved",
        ],
        rows,
    )


def _missing(d: Mapping[str, Any]) -> list[str]:
    lines = []
    for p in d["partitions"]:
        for run in p.get("missing_runs", []):
            near = "; ".join(run.get("faults_near", [])) or "none"
            lines.append(
                f"- `{p['topic']}` partition {p['partition']}: sequence numbers {run['seq'][0]:,} to {run['seq'][1]:,} "
                f"({run['records']:,} records, **{run['verdict']}**), source offsets {run['source_offsets']}, "
                f"checkpoint {p['checkpoint']}, sent at {run.get('sent_at_s', '?')} s; faults around then: {near}"
            )
    return ["Missing records:", "", *lines, ""] if lines else []


def _resends(d: Mapping[str, Any]) -> list[str]:
    lines = []
    for p in d["partitions"]:
        if not p.get("largest_resends") and not p.get("problems"):
            continue
        largest = ", ".join(
            f"{r['records']:,} from sequence number {r['seq']:,} (first sent at {r['sent_at_s']} s)"
            for r in p.get("largest_resends", [])
        )
        lines.append(
            f"- `{p['topic']}` partition {p['partition']}: {p['duplicates']:,} duplicates in "
            f"{p['resent_ranges']} re-sent ranges"
            + (f"; largest: {largest}" if largest else "")
            + "".join(f"; {problem}" for problem in p.get("problems", []))
        )
    title = "Where the duplicates are (an owner going back to an older checkpoint), and any records out of order:"
    return [title, "", *lines, ""] if lines else []


def _resends_by_fault(d: Mapping[str, Any]) -> list[str]:
    rows = d.get("resends_by_fault")
    if not rows:
        return []
    lines = [
        "Re-sent ranges by the fault nearest to them (seconds: the range's span of the partition's traffic):",
        "",
        "| fault | re-sent ranges | records re-sent | largest range (records) | largest range (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, row in rows.items():
        lines.append(
            f"| {kind} | {_n(row['ranges'])} | {_n(row['records'])} | {_n(row['largest_records'])} "
            f"| {row['largest_s']:.2f} |"
        )
    return [*lines, ""]


def copy_mode(d: Mapping[str, Any]) -> str | None:
    """The route's copy mode: the one the run chose, else the default it resolved to (runs
    recorded without it: None)."""
    return (d.get("params") or {}).get("copy") or (d.get("shape") or {}).get("copy_mode")


def _copy(d: Mapping[str, Any]) -> str:
    copy = copy_mode(d)
    return f" (copy: {copy})" if copy else ""


def _run(d: Mapping[str, Any]) -> list[str]:
    shape, catch_up, load = d["shape"], d["catch_up"], d["load"]
    avg = d.get("load_average", {})
    lines = [
        f"## {d['delivery']}{_copy(d)} on {store(d)}, {_minutes(d['duration_s'])}, seed {d['seed']}: {_verdict(d)}",
        "",
        f"Command: `{shown_command(str(d.get('command')))}` — {provenance(dict(d))}, finished {d.get('finished_at')}.",
        "",
        f"- Shape: clusters of {shape['brokers']} brokers (replication factor {shape['replication_factor']}, "
        f"min.insync.replicas {shape['min_insync_replicas']}), {shape['workers']} workers, "
        f"{shape['controllers']} controllers coordinating on {_STORES[store(d)]}, session timeout "
        f"{shape['session_timeout_s']} s, "
        f"CPU hog of {shape['hog_processes']} busy processes; final partitions "
        + ", ".join(f"{t.rsplit('-', 1)[-1]} {n}" for t, n in sorted(shape["partitions"].items())),
        f"- Load: {_n(load['produced'])} records acknowledged by the source ({_n(load['rate_per_partition'])}/s "
        f"per partition plus bursts, {load['record_size']} B), {_n(load['failed'])} produce failures; load average "
        f"min {_n(avg.get('min'), 1)}, mean {_n(avg.get('mean'), 1)}, max {_n(avg.get('max'), 1)} on "
        f"{avg.get('cores', '?')} cores.",
        f"- Catch-up after the load stopped: {'reached the end' if catch_up['caught_up'] else 'did NOT finish'} "
        f"in {catch_up['waited_s']} s; copy read with {d['read']['isolation']} in {d['read']['seconds']} s.",
    ]
    if d.get("unexpected_exits"):
        codes = ", ".join(f"{name} (exit code {e['code']})" for name, e in sorted(d["unexpected_exits"].items()))
        lines.append(f"- Processes that exited by themselves: {codes}; the end of their logs is in the JSON file.")
    if d.get("restarted_after_exit"):
        restarted = ", ".join(
            f"{r['process']} (exit code {r['code']}, at {r['exit_seen_at_s']:.0f} s)" for r in d["restarted_after_exit"]
        )
        lines.append(
            f"- Exited during the run and started again 5 s later, as the systemd units' `Restart=on-failure` "
            f"does: {restarted}; the end of their logs is in the JSON file."
        )
    if d.get("restored_at_end"):
        lines.append(f"- Undone at the end (their planned end was missed): {len(d['restored_at_end'])} faults.")
    lines += [
        "",
        *_faults(d),
        "",
        *_topics(d),
        "",
        *_missing(d),
        *_resends_by_fault(d),
        *_resends(d),
        "The schedule as executed, fault by fault, is in the run's result file.",
        "",
    ]
    return lines


def render(docs: Sequence[Mapping[str, Any]]) -> str:
    """`RELIABILITY.md` from the result documents."""
    lines = [
        "# Reliability: Strait under chaos",
        "",
        "Generated by `strait bench chaos-report` (and after each `strait bench chaos`) from "
        "`bench/results/chaos-*.json`; every run can be replayed fault for fault from its command and seed.",
        "",
        "Each run starts two Kafka clusters (`src`, `dst`) on this machine (and ZooKeeper when the fleet "
        "coordinates on it; otherwise it coordinates on `dst`), a fleet of controllers "
        "and workers as real processes, and a producer writing sequence-numbered records to several topics. A "
        "seeded schedule then kills (`kill -9`) and restarts workers, the leading controller, one source broker "
        "and one destination broker at a time (never the KRaft controller, never two of a cluster: "
        "min.insync.replicas 2 holds) and the coordination store: ZooKeeper, or on the Kafka store the "
        "destination broker leading a coordination topic, killed or frozen (SIGSTOP); freezes workers (SIGSTOP) "
        "below and beyond the session timeout; expands source topics; removes topics and adds them again "
        "through the REST API; adds "
        "a topic that already holds records; and sends bursts of records beyond the catch-up threshold "
        "(10,000 records of lag), while busy-loop processes starve every core. A controller or worker that "
        "exits by itself (a non-zero code) is started again 5 s later, as the systemd units in `deploy/systemd` "
        "do, and the run lists it (runs whose result has no `restarted_after_exit` list left it stopped). "
        "The faults stop before a quiet "
        "tail; then the load stops, the copy gets time to reach the source's end, the fleet stops, and every "
        "record the source acknowledged is looked up in the copy, per partition.",
        "",
        "- **lost**: missing from the copy although the route's checkpoint (its source consumer group) is past "
        "it, or the source no longer holds it: no owner will ever copy it again.",
        "- **not yet copied**: missing, and the checkpoint is not past it: the copy had not caught up when the "
        "wait ran out. Also a failure.",
        "- **duplicates**: repeated arrivals (at-least-once allows them after a failure; exactly-once, read "
        "with `read_committed`, does not). **Re-sent ranges** are the runs they come in; **interleaved** "
        "counts repeats that look like two writers at once.",
        "- **out of order**: a record first arriving after a later one of its partition.",
        "",
    ]
    if not docs:
        return "\n".join([*lines, "No chaos result yet: run `strait bench chaos --duration 30m --seed 1`.", ""])
    lines += [
        "## Runs",
        "",
        "Every run, newest first; the sections after the machine give the latest run of each configuration.",
        "",
        *_summary(docs),
        "",
    ]
    machine = next((d.get("machine") for d in docs if d.get("machine")), None)
    if machine:
        lines += [
            "## Machine",
            "",
            f"- CPU: {machine.get('cpu')}, {machine.get('cores')} cores; memory {machine.get('memory_gb')} GB; "
            f"Linux {machine.get('kernel')}",
            f"- Python {machine.get('python')}; {machine.get('java')}; {machine.get('kafka_broker')}",
            "",
        ]
    for doc in latest(docs):
        lines += _run(doc)
    return "\n".join(lines).rstrip("\n") + "\n"
