"""The BENCHMARKS.md section of `strait bench failover`: records re-read and skipped after a
consumer group moves to the destination, Strait's exact translation against MirrorMaker 2's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strait.bench.markdown import _n, _table

_METHOD = (
    "Per system, on its own fresh topic: the topic is pre-filled and copied in full (one Strait worker; MM2 one "
    "dedicated-mode node, tasks.max=1, with `emit.offset-syncs.enabled`, `offset.lag.max=100` (its default), "
    "`emit.checkpoints.enabled` and `sync.group.offsets.enabled` every 1 s, `refresh.groups.interval.seconds=2`). "
    "A consumer group then reads each partition on the source to a different depth (1.3 % to 99.5 % of it), "
    "committing every 500 records and at its last one, and stops. Each system's continuous group sync then writes "
    "the group's translated offsets to the same group on the destination (the group is inactive there), waited for "
    "until every partition has one (the time reported, from the group's last commit on the source) and none "
    "changed for 5 s: Strait's route `groups` (the leader controller, every "
    "1 s), MM2's checkpoint connector. For Strait, `strait failover` (plan, then commit) runs after it and must find "
    "the same offsets. The replicator stops, and a consumer of the group on the destination resumes from the "
    "group's committed offsets (earliest where there is none) and reads to the end. Re-read = records it had "
    "already consumed on the source; skipped = records after its source position it never reads (each record "
    "carries its source partition and sequence number)."
)


_READING = (
    "How to read it: Strait translates each committed offset through its map of every copied run, so the group "
    "resumes at the copy of the very record it would have read next. MirrorMaker translates through offset syncs "
    "(one at least every `offset.lag.max` records while it copies) and resumes one record past the nearest sync "
    "at or below the committed offset; its checkpoint task keeps a bounded set of syncs, denser near the newest, "
    "so a group far behind the copy's head gets a coarse, older offset (KAFKA-14666, KIP-1292). MirrorMaker rounds "
    "down, never up, so it re-reads rather than skips."
)


def _failover_check(doc: dict[str, Any]) -> str:
    for run in doc.get("runs", []):
        if run.get("system") == "strait" and "failover_equals_sync" in run:
            same = "the same offsets" if run["failover_equals_sync"] else "different offsets (see the result file)"
            return f" Strait's one-shot `strait failover` after its group sync found {same}."
    return ""


def _from_start(doc: dict[str, Any]) -> str:
    """How many of MirrorMaker's partitions resumed at the start of the copy (its first sync)."""
    for run in doc.get("runs", []):
        rows = list((run.get("per_partition") or {}).values())
        if run.get("system") == "mm2" and rows:
            back = [r for r in rows if (r.get("destination_committed") or 0) <= 1 and r.get("source_committed", 0) > 1]
            return (
                f" In this run {len(back)} of MirrorMaker's {len(rows)} partitions resumed at destination offset 1 "
                "or less (its first sync): everything the group had consumed there was read again."
            )
    return ""


def _map_cost(doc: dict[str, Any]) -> list[str]:
    """The offset map's cost in Strait's run (runs without the figure say nothing)."""
    for run in doc.get("runs", []):
        cost = run.get("offset_map")
        if run.get("system") == "strait" and cost:
            return [
                "",
                f"Strait's offset map for this copy: {_n(cost.get('map_records'))} map records "
                f"({_n(cost.get('runs'))} runs over {_n(cost.get('partitions'))} partitions), "
                f"{_n(cost.get('bytes'))} bytes of keys and values: {_n(cost.get('bytes_per_gb_copied'), 1)} bytes "
                f"per GB copied ({_n(cost.get('copied_bytes'))} bytes copied; "
                f"{_n(cost.get('json_bytes'))} in the JSON encoding used before); written at "
                f"{_n(cost.get('map_records_per_s'), 2)} map records/s over the copy.",
            ]
    return []


def render(doc: dict[str, Any]) -> list[str]:
    rows = []
    for run in doc.get("runs", []):
        name = "Strait" if run["system"] == "strait" else "MM2"
        if run.get("error"):
            rows.append([name, f"failed: {run['error'][:120]}", "", "", "", ""])
            continue
        rows.append(
            [
                name,
                _n(run.get("consumed_on_source")),
                _n(run.get("re_read")),
                _n(run.get("skipped")),
                _n(run.get("untranslated_partitions")),
                _n((run.get("translation") or {}).get("complete_after_s"), 1),
            ]
        )
    lines = _table(
        [
            "system",
            "records consumed on the source",
            "re-read after failover",
            "skipped after failover",
            "partitions without a translated offset",
            "every partition's offset on the destination after (s)",
        ],
        rows,
    )
    detail = []
    for run in doc.get("runs", []):
        for p, row in sorted((run.get("per_partition") or {}).items(), key=lambda kv: int(kv[0])):
            detail.append(
                [
                    "Strait" if run["system"] == "strait" else "MM2",
                    str(p),
                    _n(row.get("source_committed")),
                    _n(row.get("destination_committed")),
                    _n(row.get("first_seq")),
                    _n(row.get("re_read")),
                    _n(row.get("skipped")),
                ]
            )
    ratios = doc.get("ratios", {})
    lines += [
        "",
        f"Ratio Strait / MM2 of records re-read: {_n(ratios.get('re_read'), 3)}; skipped: "
        f"{_n(ratios.get('skipped'), 3)} (— when MM2's figure is 0).",
        "",
        _READING + _from_start(doc) + _failover_check(doc),
        *_map_cost(doc),
    ]
    if detail:
        lines += [
            "",
            *_table(
                [
                    "system",
                    "partition",
                    "source committed (next record)",
                    "destination committed",
                    "first record read (source seq)",
                    "re-read",
                    "skipped",
                ],
                detail,
            ),
        ]
    return lines


def failover_summary(doc: dict[str, Any] | None) -> list[str]:
    """The summary line of the failover scenario, or nothing when it has not run."""
    if doc is None:
        return []
    by = {r["system"]: r for r in doc.get("runs", [])}
    parts = [
        f"{'Strait' if system == 'strait' else 'MM2'} re-read {_n(run.get('re_read'))}, "
        f"skipped {_n(run.get('skipped'))}"
        for system, run in by.items()
        if not run.get("error")
    ]
    return [f"- **Consumer failover** (records a group re-reads / skips on the destination): {'; '.join(parts)}."]


FAILOVER_SECTION: tuple[str, str, Callable[[dict[str, Any]], list[str]]] = (
    "Consumer failover: records re-read and skipped",
    _METHOD,
    render,
)
