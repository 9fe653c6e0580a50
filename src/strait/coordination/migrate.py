"""Moving a fleet's coordination state from one store to another (ZooKeeper to Kafka).

What moves is what the configuration file does not hold: the replicated topics with the
settings they were added with, and the marks of topics removed (so patterns do not add them
again). The assignment, worker registrations and stats are not moved: a fleet started on the
new store registers again and its leader assigns afresh. Copy positions are not in the store at
all (they are the routes' checkpoint groups on the clusters), so workers on the new store
resume from the same checkpoints: nothing is copied twice beyond what any restart re-sends.

The fleet must be stopped first: a live worker or a leader in the old store is refused, since
it could change the topics while they move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strait.coordination.model import ClusterSnapshot, TopicSpec
from strait.coordination.store import CoordinationStore


class MigrationRefused(Exception):
    """The move cannot be made as things are; the message says why."""


@dataclass(frozen=True)
class MigrationPlan:
    """What a move writes to the target store, and what it leaves as it is."""

    create: tuple[TopicSpec, ...] = ()
    remove: tuple[tuple[str, str], ...] = ()
    unchanged: tuple[tuple[str, str], ...] = ()
    # Topics the target holds already with other settings: the target's are kept.
    conflicts: tuple[tuple[TopicSpec, TopicSpec], ...] = field(default=())


def plan(source: ClusterSnapshot, target: ClusterSnapshot) -> MigrationPlan:
    """The writes that bring `target` the topics and removal marks of `source` (pure)."""
    live = sorted(w.id for w in source.workers.values() if w.live)
    if live or source.leader is not None:
        leader = f"controller {source.leader.id} leads" if source.leader else ""
        workers = f"workers {', '.join(live)} are live" if live else ""
        raise MigrationRefused(f"stop the fleet first: {'; '.join(p for p in (leader, workers) if p)}")
    create: list[TopicSpec] = []
    unchanged: list[tuple[str, str]] = []
    conflicts: list[tuple[TopicSpec, TopicSpec]] = []
    for name, spec in sorted(source.topics.items()):
        there = target.topics.get(name)
        if there is None:
            create.append(spec)
        elif there.settings() == spec.settings():
            unchanged.append(name)
        else:
            conflicts.append((spec, there))
    remove = sorted(name for name in source.removed if name not in target.removed and name not in target.topics)
    return MigrationPlan(tuple(create), tuple(remove), tuple(unchanged), tuple(conflicts))


def apply(plan: MigrationPlan, target: CoordinationStore) -> None:
    """Write `plan` to `target` (idempotent: a second run finds everything unchanged)."""
    for spec in plan.create:
        target.create_topic(spec)
    for route, topic in plan.remove:
        target.delete_topic(route, topic)
