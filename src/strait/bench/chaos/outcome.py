"""The result document of a chaos run: what was planned, what happened, and the verdict.

A run is `ok` only when records were produced to every topic and the copy holds every
acknowledged record (none lost, none still missing), with nothing out of order or in the
wrong partition; in exactly-once mode also without a duplicate. Missing records are placed
in time (from the send time stamped in each record) next to the faults in effect around
them, which is where a person starts looking.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from strait.bench.chaos.check import PartitionVerdict
from strait.bench.chaos.schedule import Schedule

COUNTS = (
    "produced",
    "checked",
    "lost",
    "not_yet_copied",
    "duplicates",
    "out_of_order",
    "interleaved",
    "resent_ranges",
    "misrouted",
    "unacknowledged_copied",
)
# A missing record is shown with the faults in effect this long before or after it was sent.
NEAR_S = 15.0
# A re-sent range is charged to the fault that struck nearest to when its last record was sent
# (the copy stood about there when the fault sent its owner back to the checkpoint): a fault in
# effect from up to RESEND_BEFORE_S before to RESEND_AFTER_S after it (the copy's lag).
RESEND_BEFORE_S = 5.0
RESEND_AFTER_S = 15.0
NO_FAULT = "no fault near"


def summarize(
    *,
    options: Mapping[str, Any],
    schedule: Schedule,
    executed: Sequence[Mapping[str, Any]],
    topics: Mapping[str, str],
    shape: Mapping[str, Any],
    load: Mapping[str, Any],
    load_average: Mapping[str, Any],
    catch_up: Mapping[str, Any],
    read: Mapping[str, Any],
    verdicts: Sequence[PartitionVerdict],
    restored: Sequence[str],
    exits: Mapping[str, Mapping[str, Any]],
    restarts: Sequence[Mapping[str, Any]] = (),
    started_at: dt.datetime,
    chaos_started_us: int,
    workdir: str,
) -> dict[str, Any]:
    """The JSON document saved under bench/results and rendered into RELIABILITY.md."""
    logical = {real: name for name, real in topics.items()}
    per_topic: dict[str, dict[str, int]] = {}
    for verdict in verdicts:
        row = per_topic.setdefault(logical.get(verdict.topic, verdict.topic), dict.fromkeys(COUNTS, 0))
        for key in COUNTS:
            row[key] += getattr(verdict, key)
    totals = {key: sum(row[key] for row in per_topic.values()) for key in COUNTS}
    steps = sorted(executed, key=lambda e: (e["at_s"], e["fault"]))
    partitions = []
    for verdict in verdicts:
        entry = verdict.to_json()
        entry["topic"] = logical.get(verdict.topic, verdict.topic)
        for run in entry.get("missing_runs", []):
            sent = run["sent_us"][0]
            if sent is not None:
                run["sent_at_s"] = round((sent - chaos_started_us) / 1e6, 1)
                run["faults_near"] = _faults_near(steps, run["sent_at_s"])
        for resend in entry.get("largest_resends", []):
            resend["sent_at_s"] = round((resend.pop("sent_us") - chaos_started_us) / 1e6, 1)
        partitions.append(entry)
    resends = resends_by_fault(verdicts, steps, chaos_started_us)
    reasons = _reasons(totals, per_topic, options["delivery"])
    if load.get("crash"):
        reasons.append(f"the load stopped early: {load['crash']}")
    return {
        "scenario": "chaos",
        "seed": options["seed"],
        "duration_s": options["duration_s"],
        "delivery": options["delivery"],
        "ok": not reasons,
        "failures": reasons,
        "params": {k: (sorted(v) if isinstance(v, frozenset | set) else v) for k, v in options.items()},
        "started_at": started_at.strftime("%Y-%m-%d %H:%M UTC"),
        # Every `at_s` below counts from here: the moment to look for in the process logs.
        "chaos_started_at": dt.datetime.fromtimestamp(chaos_started_us / 1e6, dt.UTC).isoformat(
            timespec="milliseconds"
        ),
        "shape": dict(shape),
        "topics": dict(topics),
        "schedule": {
            "warmup_s": schedule.params.warmup_s,
            "quiet_tail_s": schedule.params.quiet_tail_s,
            "planned": schedule.counts(),
            "faults": [f.to_json() for f in schedule.faults],
        },
        "executed": steps,
        "faults_injected": _injected(steps),
        "faults_skipped": _tally(steps, "skipped"),
        "fault_errors": _tally(steps, "error"),
        "restored_at_end": list(restored),
        "unexpected_exits": dict(exits),
        # Failed exits during the run, started again as systemd's Restart=on-failure would.
        "restarted_after_exit": [dict(r) for r in restarts],
        "load": dict(load),
        "load_average": dict(load_average),
        "catch_up": dict(catch_up),
        "read": dict(read),
        "totals": totals,
        "per_topic": per_topic,
        "resends_by_fault": resends,
        "partitions": partitions,
        "workdir": workdir,
    }


def _reasons(totals: Mapping[str, int], per_topic: Mapping[str, Mapping[str, int]], delivery: str) -> list[str]:
    reasons = []
    idle = sorted(topic for topic, row in per_topic.items() if row["produced"] == 0)
    if not per_topic or totals["produced"] == 0:
        reasons.append("no record was produced: nothing was proven")
    elif idle:
        reasons.append(f"no record was produced to {', '.join(idle)}")
    for key, what in (
        ("lost", "records lost (the checkpoint moved past them, or the source no longer has them)"),
        ("not_yet_copied", "records not copied when the wait ran out"),
        ("out_of_order", "records out of order"),
        ("misrouted", "records in the wrong destination partition"),
    ):
        if totals[key]:
            reasons.append(f"{totals[key]:,} {what}")
    if delivery == "exactly-once" and totals["duplicates"]:
        reasons.append(f"{totals['duplicates']:,} duplicates in exactly-once mode")
    return reasons


def _injected(steps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Faults that took effect, by kind."""
    return _tally(steps, "ok")


def _tally(steps: Sequence[Mapping[str, Any]], outcome: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for step in steps:
        if step["action"] == "start" and step["outcome"] == outcome:
            out[step["kind"]] = out.get(step["kind"], 0) + 1
    return dict(sorted(out.items()))


def resends_by_fault(
    verdicts: Sequence[PartitionVerdict], steps: Sequence[Mapping[str, Any]], chaos_started_us: int
) -> dict[str, dict[str, float]]:
    """Per fault kind: the re-sent ranges charged to it, their records, and the largest range in
    records and in seconds of the partition's traffic (send time of its last record minus its first)."""
    spans = _spans(steps)
    out: dict[str, dict[str, float]] = {}
    for verdict in verdicts:
        for records, first_us, last_us in verdict.resends:
            at_s = (last_us - chaos_started_us) / 1e6
            kind = _cause(spans, at_s)
            row = out.setdefault(kind, {"ranges": 0, "records": 0, "largest_records": 0, "largest_s": 0.0})
            row["ranges"] += 1
            row["records"] += records
            row["largest_records"] = max(row["largest_records"], records)
            row["largest_s"] = max(row["largest_s"], round((last_us - first_us) / 1e6, 2))
    return dict(sorted(out.items()))


def _cause(spans: Sequence[tuple[str, str, float, float]], at_s: float) -> str:
    near = [
        (abs(start - at_s), kind)
        for kind, _, start, finish in spans
        if start - RESEND_AFTER_S <= at_s <= finish + RESEND_BEFORE_S
    ]
    return min(near)[1] if near else NO_FAULT


def _spans(steps: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, float, float]]:
    """Each fault as (kind, target, when it took effect, when it ended) in seconds from the start."""
    spans: dict[int, list[Any]] = {}
    for step in steps:
        span = spans.setdefault(step["fault"], [step["kind"], step["target"], None, None])
        # When the step took effect: a kill that waited for an earlier fault struck at its end.
        span[2 if step["action"] == "start" else 3] = step.get("done_s", step["at_s"])
    return [
        (kind, target, start, end if end is not None else start)
        for kind, target, start, end in spans.values()
        if start is not None
    ]


def _faults_near(steps: Sequence[Mapping[str, Any]], at_s: float) -> list[str]:
    """Faults in effect within NEAR_S of `at_s`, as 'kind target start-end'."""
    near = []
    for kind, target, start, finish in _spans(steps):
        if start - NEAR_S <= at_s <= finish + NEAR_S:
            near.append(f"{kind} {target} {start:.1f}-{finish:.1f}s")
    return near
