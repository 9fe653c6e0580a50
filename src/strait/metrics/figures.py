"""The fleet's figures from one coordination-store snapshot, as the dashboard shows them. Pure.

Workers publish their stats (per partition, plus windowed latency percentiles) to the store;
these functions merge them across workers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from strait.coordination.model import ClusterSnapshot, WorkerState


def workers(snapshot: ClusterSnapshot, hung: frozenset[str]) -> list[dict[str, Any]]:
    """One row per known worker; a registration without a live session shows as dead."""
    rows = []
    for worker in sorted(snapshot.workers.values(), key=lambda w: w.id):
        state = worker.state
        if not worker.live and state is not WorkerState.LEFT:
            state = WorkerState.DEAD
        elif worker.live and worker.drain_requested and state is not WorkerState.LEFT:
            state = WorkerState.DRAINING
        report = snapshot.stats.get(worker.id, {})
        rows.append(
            {
                "id": worker.id,
                "state": state.value,
                "live": worker.live,
                "hung": worker.id in hung,
                "pool": worker.pool,
                "partitions": sorted(str(k) for k in snapshot.assignment.of_worker(worker.id)),
                "metrics_url": report.get("metrics_url"),
                # "cause/action" -> count: what the worker's own watchdog did (strait.worker.watchdog).
                "watchdog": dict(report.get("watchdog") or {}),
            }
        )
    return rows


def routes(
    snapshot: ClusterSnapshot,
    bytes_per_s: Mapping[str, float],
    route_pools: Mapping[str, Collection[str] | None] | None = None,
) -> list[dict[str, Any]]:
    """Topics and bytes/s per route, and the worker pools it may use (`pools` null: any) with
    how many live workers they have; `no_live_worker` marks a route that waits for one."""
    topics: dict[str, int] = {}
    for route, _topic in snapshot.topics:
        topics[route] = topics.get(route, 0) + 1
    live = pools(snapshot)
    configured = route_pools or {}
    rows = []
    for name in sorted(set(topics) | set(bytes_per_s) | set(configured)):
        allowed = configured.get(name)
        workers = sum(n for pool, n in live.items() if allowed is None or pool in allowed)
        rows.append(
            {
                "name": name,
                "topics": topics.get(name, 0),
                "bytes_per_s": round(bytes_per_s.get(name, 0.0), 1),
                "pools": sorted(allowed) if allowed is not None else None,
                "live_workers": workers,
                "no_live_worker": workers == 0,
            }
        )
    return rows


def pools(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Workers that may be given partitions, per pool."""
    counts: dict[str, int] = {}
    for worker in snapshot.workers.values():
        if worker.assignable:
            counts[worker.pool] = counts.get(worker.pool, 0) + 1
    return dict(sorted(counts.items()))


def merged_partition_figure(snapshot: ClusterSnapshot, field_name: str) -> dict[str, Any]:
    """A per-partition figure from every worker's report, preferring the assigned owner's."""
    out: dict[str, Any] = {}
    owners = {str(k): w for k, w in snapshot.assignment.owners.items()}
    for worker_id, report in snapshot.stats.items():
        for name, value in dict(report.get(field_name) or {}).items():
            if owners.get(name) == worker_id or name not in out:
                out[name] = value
    return out


def copy_modes(snapshot: ClusterSnapshot) -> dict[str, dict[str, str]]:
    """Per partition: how it is copied (``mode``: batch or record) and why record by record
    (``mode_reason``), from its owner's report (another worker's while the owner has not said)."""
    out: dict[str, dict[str, str]] = {}
    owners = {str(k): w for k, w in snapshot.assignment.owners.items()}
    for worker_id, report in snapshot.stats.items():
        for name, entry in dict(report.get("partitions") or {}).items():
            mode = entry.get("mode") if isinstance(entry, dict) else None
            if mode is not None and (owners.get(name) == worker_id or name not in out):
                out[name] = {"mode": str(mode), "mode_reason": str(entry.get("mode_reason") or "")}
    return out


def count_copy_modes(modes: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Partitions per route, copy mode and reason (``strait status``'s copy mode table)."""
    counts: dict[tuple[str, str, str], int] = {}
    for name, entry in modes.items():
        key = (name.split("/", 1)[0], entry["mode"], entry["mode_reason"])
        counts[key] = counts.get(key, 0) + 1
    return [
        {"route": route, "mode": mode, "reason": reason, "partitions": n}
        for (route, mode, reason), n in sorted(counts.items())
    ]


def latency(snapshot: ClusterSnapshot) -> dict[str, dict[str, Any]]:
    """Per route over every worker's last window: p50 weighted by count, p99 the worst."""
    merged: dict[str, dict[str, Any]] = {}
    for report in snapshot.stats.values():
        for route, window in dict(report.get("latency") or {}).items():
            if not window.get("count") or window.get("p50_s") is None:
                continue
            entry = merged.setdefault(route, {"count": 0, "weighted": 0.0, "p99_s": 0.0})
            entry["count"] += window["count"]
            entry["weighted"] += window["p50_s"] * window["count"]
            entry["p99_s"] = max(entry["p99_s"], window.get("p99_s") or 0.0)
    return {
        route: {"count": e["count"], "p50_s": round(e["weighted"] / e["count"], 4), "p99_s": e["p99_s"]}
        for route, e in merged.items()
    }


def stages(snapshot: ClusterSnapshot) -> dict[str, dict[str, Any]]:
    """Per stage, the worst p99 of any worker, and which worker it was (the slow node)."""
    out: dict[str, dict[str, Any]] = {}
    for worker_id, report in snapshot.stats.items():
        for route, stages in dict(report.get("stages") or {}).items():
            for stage, window in dict(stages).items():
                p99 = window.get("p99_s")
                key = f"{route}/{stage}"
                if p99 is not None and p99 >= out.get(key, {}).get("p99_s", -1.0):
                    out[key] = {"p99_s": p99, "p50_s": window.get("p50_s"), "worker": worker_id}
    return dict(sorted(out.items()))


def count(values: Iterable[str]) -> dict[str, int]:
    """How many times each value occurs."""
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
