"""The balancer's current execution, summarised for the dashboard and the metrics.

Executions keep their durable state in the balanced cluster (`strait.balancer.state`); the
controller reads it from every configured cluster that has one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

FINISHED_MOVES = ("done", "failed", "cancelled", "skipped")


def summarize(execution_id: str, status: str, moves: Mapping[str, Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """Counts of moves by state, of pending moves waiting for room on a disk, and the fraction
    finished. Pure."""
    by_state: dict[str, int] = {}
    waiting = 0
    for move in moves.values():
        state = str(move.get("state", "pending"))
        by_state[state] = by_state.get(state, 0) + 1
        waiting += 1 if state == "pending" and move.get("waiting") else 0
    total = sum(by_state.values())
    finished = sum(n for s, n in by_state.items() if s in FINISHED_MOVES)
    return {
        "execution": execution_id,
        "status": status,
        "moves": total,
        "by_state": dict(sorted(by_state.items())),
        "progress": finished / total if total else (1.0 if status == "done" else 0.0),
        "waiting_for_room": waiting,
        **extra,
    }


def read_executions(clusters: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """cluster name -> summary of its latest balancer execution, for clusters that had one.

    Only clusters that already hold the state topic are read: an observer must not create
    the balancer's topic on every cluster it looks at.
    """
    from strait import clients
    from strait.balancer.state import TOPIC, StateStore

    out: dict[str, dict[str, Any]] = {}
    for name, props in clusters.items():
        try:
            listing = clients.admin(props).list_topics(TOPIC, timeout=5)
            present = TOPIC in listing.topics and listing.topics[TOPIC].error is None
        except Exception as exc:
            log.debug("cannot list topics of %s: %s", name, exc)
            continue
        if not present:
            continue
        store = StateStore(props)
        try:
            execution = store.current()
        except Exception as exc:  # the balancer's errors vary by cause; report none rather than fail
            log.warning("cannot read balancer state on %s: %s", name, exc)
            continue
        finally:
            store.close()
        if execution is None:
            continue
        moves = dict(execution.progress.get("moves") or {})
        out[name] = summarize(execution.id, execution.status, moves, alive=execution.alive())
    return out
