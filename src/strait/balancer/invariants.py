"""The rules every plan must keep, checked on the model the plan produces.

Used by the unit tests over many generated clusters and by `execute` before it touches a
cluster, so a planner bug cannot reach Kafka.
"""

from __future__ import annotations

from collections.abc import Collection

from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel, rack_violations
from strait.balancer.plan import Plan, apply


def violations(before: ClusterModel, plan: Plan, goals: Goals, excluded: Collection[int] = ()) -> list[str]:
    """Every broken rule, as sentences naming the partition, broker or disk; empty when all hold."""
    problems: list[str] = []
    after = apply(before, plan.moves)
    for key, old in before.partitions.items():
        new = after.partitions[key]
        if len(new.replicas) != len(old.replicas):
            problems.append(f"{new.name}: replication factor changed {len(old.replicas)} -> {len(new.replicas)}")
        if len(set(new.replicas)) != len(new.replicas):
            problems.append(f"{new.name}: a broker holds two replicas {list(new.replicas)}")
        for b in new.replicas:
            if b not in before.brokers and b not in old.replicas:
                problems.append(f"{new.name}: replica on unknown broker {b}")
            if b in excluded:
                problems.append(f"{new.name}: replica left on drained broker {b}")
        bad_after = rack_violations(after, new)
        if bad_after and not set(bad_after) <= set(rack_violations(before, old)):
            problems.append(f"{new.name}: plan puts too many replicas in rack(s) {bad_after}")
        was_placed = set(zip(old.replicas, old.dirs, strict=True))
        for b, d in zip(new.replicas, new.dirs, strict=True):
            if b in before.brokers and before.log_dir(b, d) is None and (b, d) not in was_placed:
                problems.append(f"{new.name}: broker {b} has no log dir {d}")
    old_dirs = {(d.broker, d.path): d for d in before.all_dirs()}
    for disk in after.all_dirs():
        limit = int(disk.capacity * goals.capacity_limit)
        was = old_dirs[(disk.broker, disk.path)]
        # A disk already past the limit may stay there, but the plan must not add to it.
        if disk.used > limit and disk.used > was.used:
            problems.append(
                f"broker {disk.broker} dir {disk.path}: {disk.used} bytes after the plan, over the limit {limit}"
            )
    return problems
