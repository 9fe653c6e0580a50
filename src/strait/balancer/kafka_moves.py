"""What Kafka says about one of our moves, and taking moves back.

Before a move starts: is it already applied (submitted just before a crash) or stale (the
cluster changed since the plan)? To cancel: KIP-455 cancel for reassignments, and sending a
replica back to its current dir for disk moves; `cancel` also takes over from a dead executor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from strait.balancer.errors import BalanceError
from strait.balancer.gateway import Gateway, Reassignment, ReplicaKey
from strait.balancer.model import ClusterModel, Partition
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, Move, Plan
from strait.balancer.progress import ACTIVE, CANCELLED, PENDING, RUNNING
from strait.balancer.state import Execution, StateStore
from strait.balancer.throttle import Ledger, Throttles

log = logging.getLogger(__name__)


class _Unknown:
    current: str | None = None
    future: str | None = None
    future_size = 0


UNKNOWN: Any = _Unknown()


def already_applied(
    move: Move, current: Mapping[tuple[str, int], tuple[int, ...]], dirs: Mapping[ReplicaKey, Any]
) -> bool:
    if isinstance(move, InterBrokerMove):
        return current.get(move.key) == move.target and move.target != move.source
    where = dirs.get((move.topic, move.partition, move.broker), UNKNOWN)
    return bool(where.current == move.target_dir and where.future is None)


def stale(move: Move, current: Mapping[tuple[str, int], tuple[int, ...]], dirs: Mapping[ReplicaKey, Any]) -> str | None:
    """Why `move` cannot start on the cluster as it is now, or None if it can."""
    now = current.get(move.key)
    name = f"{move.topic}-{move.partition}"
    if now is None:
        return f"partition {name} no longer exists"
    if isinstance(move, InterBrokerMove):
        if now != move.source:
            return f"partition {name} has replicas {list(now)}, the plan expected {list(move.source)}"
        return None
    where = dirs.get((move.topic, move.partition, move.broker), UNKNOWN)
    if move.broker not in now or where.current != move.source_dir:
        return f"partition {name} on broker {move.broker} is not in {move.source_dir} any more"
    if where.future is not None:
        return f"partition {name} on broker {move.broker} is already being moved to {where.future} by another tool"
    return None


def cancel_moves(
    gateway: Gateway,
    moves: Iterable[Move],
    states: Mapping[str, Mapping[str, Any]],
    *,
    timeout: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Cancel moves in flight and wait until Kafka has let go of them.

    Inter-broker: KIP-455 cancel (replicas None) restores the original replica set and drops the
    partial copies. Intra-broker: sending the replica back to the dir it is in drops the future
    replica. Either way nothing is left copying when this returns.
    """
    moves = list(moves)
    inter = [m for m in moves if isinstance(m, InterBrokerMove) and states.get(m.id, {}).get("state") == RUNNING]
    if inter:
        for key, err in gateway.reassign({m.key: None for m in inter}).items():
            if err and err != "NoReassignmentInProgressError":
                log.warning("cancelling reassignment of %s-%s: %s", key[0], key[1], err)
    watch: dict[ReplicaKey, None] = {}
    for m in moves:
        if isinstance(m, IntraBrokerMove):
            watch[(m.topic, m.partition, m.broker)] = None
        else:
            for b in states.get(m.id, {}).get("placing", {}):
                watch[(m.topic, m.partition, int(b))] = None
    deadline = time.monotonic() + timeout
    while True:
        pending_inter = set(gateway.reassignments()) & {m.key for m in inter}
        futures: dict[ReplicaKey, str] = {}
        if watch:
            dirs = gateway.replica_dirs({b for _, _, b in watch}, {t for t, _, _ in watch})
            futures = {
                rk: str(dirs[rk].current)
                for rk in watch
                if rk in dirs and dirs[rk].future is not None and dirs[rk].current is not None
            }
            if futures:
                gateway.move_dirs(futures)
        if not pending_inter and not futures:
            return
        if time.monotonic() > deadline:
            raise BalanceError(
                f"cancel did not settle within {timeout:.0f}s: reassignments {sorted(pending_inter)}, "
                f"future replicas {sorted(futures)}"
            )
        sleep(0.5)


def cancel(gateway: Gateway, store: StateStore, *, wait: float = 60.0, by: str = "cli") -> Execution | None:
    """Cancel the current execution, from any process.

    A live executor is asked through the state topic and does the work itself; if none answers
    (its process died), this call cancels the moves in flight, removes the recorded throttles,
    and marks the execution cancelled.
    """
    execution = store.current()
    if execution is None or execution.finished():
        return execution
    store.request_cancel(execution.id, by)
    deadline = time.monotonic() + wait
    while execution is not None and execution.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
        execution = store.load(execution.id)
        if execution is not None and execution.finished():
            return execution
    if execution is None:
        return None
    plan = Plan.from_dict(execution.plan)
    states = {k: dict(v) for k, v in dict(execution.progress.get("moves") or {}).items()}
    active = [m for m in plan.moves if states.get(m.id, {}).get("state") in ACTIVE]
    # A move submitted just before the executor died may still read "pending": claim it when
    # Kafka shows exactly our reassignment on that partition.
    reassigning = gateway.reassignments()
    for m in plan.moves:
        entry = states.get(m.id, {})
        if (
            isinstance(m, InterBrokerMove)
            and entry.get("state", PENDING) == PENDING
            and m.key in reassigning
            and set(reassigning[m.key].adding) == set(m.adding)
        ):
            states[m.id] = {**entry, "state": RUNNING}
            active.append(m)
    cancel_moves(gateway, active, states)
    Throttles(gateway, Ledger.from_dict(execution.progress.get("throttles"))).clear()
    for m in plan.moves:
        entry = states.setdefault(m.id, {"state": PENDING})
        if entry["state"] in ACTIVE or entry["state"] == PENDING:
            entry["state"] = CANCELLED
            entry["finished"] = time.time()
    progress = dict(execution.progress)
    progress.update(
        status="cancelled", moves=states, throttles=Ledger().to_dict(), heartbeat=time.time(), cancelled_by=by
    )
    store.save_progress(execution.id, progress)
    return store.load(execution.id)


def settled(model: ClusterModel, reassigning: Mapping[tuple[str, int], Reassignment]) -> ClusterModel:
    """The model with partitions under someone's reassignment shown at their original replicas.

    Metadata lists adding and removing replicas together while a reassignment runs; a plan made
    before it started must not be called stale for that (the executor leaves such partitions
    alone anyway).
    """
    if not reassigning:
        return model
    parts = []
    for key, p in model.partitions.items():
        r = reassigning.get(key)
        if r is not None and r.adding:
            keep = [i for i, b in enumerate(p.replicas) if b not in r.adding]
            p = Partition(
                p.topic,
                p.partition,
                tuple(p.replicas[i] for i in keep),
                tuple(p.dirs[i] for i in keep),
                p.size,
                p.leader,
            )
        parts.append(p)
    return ClusterModel.build(model.brokers.values(), model.all_dirs(), parts, model.cluster_id)
