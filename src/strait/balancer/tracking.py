"""Following the moves in flight: what Kafka says about each, and when it is done or failed.

The executor (`strait.balancer.executor`) decides what to start; this module reads back where the
moves it started stand and settles them. An inter-broker move is done when the partition's
replicas are its target and, where the plan names dirs, each new replica sits on its dir (a
replica that landed elsewhere gets an intra-broker move, state `placing`, before it counts as
done). An intra-broker move is done when the replica's current dir is the target and no copy is
left in flight. Metadata may lag the controller, so a move that looks dropped is judged only
after a grace.

`settle(move, state, **extra)` is the executor's own state change (it frees the window slot and
marks progress for saving); `states` is the executor's per-move record, read and written here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from strait.balancer.gateway import Gateway, ReplicaKey
from strait.balancer.kafka_moves import UNKNOWN
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, Move
from strait.balancer.progress import DONE, FAILED, PLACING, RUNNING

# How long metadata may disagree with the controller about a finished reassignment.
METADATA_GRACE = 10.0


class Settle(Protocol):
    def __call__(self, move: Move, state: str, **extra: Any) -> None: ...


def check_inter(
    gateway: Gateway, running: list[InterBrokerMove], states: dict[str, dict[str, Any]], settle: Settle
) -> None:
    """Settle the `running` inter-broker moves whose reassignment the controller no longer lists."""
    if not running:
        return
    current = gateway.replicas({m.topic for m in running})
    misplaced: dict[ReplicaKey, str] = {}
    for m in running:
        now = current.get(m.key)
        if now == m.target:
            if m.target_dirs:
                misplaced.update({(m.topic, m.partition, b): d for b, d in m.target_dirs.items()})
            else:
                settle(m, DONE)
            continue
        # The controller has finished (or dropped) the reassignment, but the broker that
        # answered the metadata request may not have caught up yet: judge only after a grace.
        entry = states[m.id]
        first = entry.setdefault("unlisted_at", time.time())
        if time.time() - first < METADATA_GRACE:
            continue
        if now is None:
            settle(m, FAILED, error="partition disappeared (topic deleted?)")
        elif set(now) == set(m.source):
            settle(
                m,
                FAILED,
                error=f"reassignment ended with the original replicas {list(now)} (cancelled by another tool?)",
            )
        else:
            settle(m, FAILED, error=f"replicas are {list(now)}, expected {list(m.target)}")
    if misplaced:
        _place_new_replicas(gateway, running, states, settle, misplaced)


def _place_new_replicas(
    gateway: Gateway,
    running: list[InterBrokerMove],
    states: dict[str, dict[str, Any]],
    settle: Settle,
    wanted: Mapping[ReplicaKey, str],
) -> None:
    """Moves whose replicas are right: done if each new replica is on its dir, else `placing`."""
    dirs = gateway.replica_dirs({b for _, _, b in wanted}, {t for t, _, _ in wanted})
    fix: dict[ReplicaKey, str] = {}
    for m in running:
        if states[m.id]["state"] != RUNNING or not m.target_dirs:
            continue
        wrong = {
            (m.topic, m.partition, b): d
            for b, d in m.target_dirs.items()
            if dirs.get((m.topic, m.partition, b), UNKNOWN).current != d
        }
        if wrong:
            fix.update(wrong)
            settle(m, PLACING, placing={f"{b}": d for (_, _, b), d in wrong.items()})
        else:
            settle(m, DONE)
    if not fix:
        return
    errors = gateway.move_dirs(fix)
    for m in running:
        bad = [f"{rk[2]}: {e}" for rk, e in errors.items() if e and rk[:2] == m.key]
        if bad and states[m.id]["state"] == PLACING:
            # The data is on the right broker; only the disk is off. Report, do not fail.
            settle(m, DONE, warning=f"new replica left on its default dir ({'; '.join(bad)})")


def check_dirs(gateway: Gateway, watched: list[Move], states: dict[str, dict[str, Any]], settle: Settle) -> None:
    """Settle intra-broker moves and the `placing` follow-ups of inter-broker ones (`watched`)."""
    if not watched:
        return
    brokers: set[int] = set()
    topics: set[str] = set()
    for m in watched:
        topics.add(m.topic)
        if isinstance(m, IntraBrokerMove):
            brokers.add(m.broker)
        else:
            brokers.update(int(b) for b in states[m.id].get("placing", {}))
    dirs = gateway.replica_dirs(brokers, topics)
    for m in watched:
        if isinstance(m, IntraBrokerMove):
            targets = {m.broker: m.target_dir}
        else:
            targets = {int(b): d for b, d in states[m.id].get("placing", {}).items()}
        done = True
        for b, d in targets.items():
            where = dirs.get((m.topic, m.partition, b), UNKNOWN)
            if where.current == d and where.future is None:
                continue
            done = False
            if where.future is None and where.current is not None and where.current != d:
                first = states[m.id].setdefault("idle_at", time.time())
                if time.time() - first >= METADATA_GRACE:
                    settle(
                        m,
                        FAILED,
                        error=f"broker {b} dropped the copy to {d} (another tool changed the replica's dir?)",
                    )
                    break
            if where.future is not None:
                states[m.id]["copied"] = where.future_size
        if done:
            settle(m, DONE)
