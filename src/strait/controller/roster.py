"""Which workers that are gone the listing forgets, and when. Pure.

A worker that left (drained and deregistered) or died stays listed, as left or dead, for
`controller.forget_left_workers_s`; then the leader deletes what the store still keeps of it.
A left worker's record carries the time it left; a dead worker's death is timed from when this
controller first saw it gone (a new leader starts that clock again: later, never sooner).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from strait.coordination.model import WorkerRecord


def gone_workers_to_forget(
    workers: Mapping[str, WorkerRecord],
    first_seen_gone: Mapping[str, float],
    owning: Collection[str],
    now: float,
    after_s: float,
) -> tuple[list[str], dict[str, float]]:
    """(workers to forget now, when each gone worker was first seen gone).

    `owning` are workers the written assignment still names (e.g. a dead exactly-once
    worker's partitions parked until it is fenced): they are not forgotten yet.
    """
    seen: dict[str, float] = {}
    forget: list[str] = []
    for worker in sorted(workers.values(), key=lambda w: w.id):
        if worker.live:
            continue
        seen[worker.id] = first_seen_gone.get(worker.id, now)
        since = worker.gone_since if worker.gone_since is not None else seen[worker.id]
        if now - since >= after_s and worker.id not in owning:
            forget.append(worker.id)
    return forget, seen
