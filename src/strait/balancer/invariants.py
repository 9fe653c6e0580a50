"""The rules every plan must keep, checked on the model the plan produces.

Used by the unit tests over many generated clusters and by `execute` before it touches a
cluster, so a planner bug cannot reach Kafka.
"""

from __future__ import annotations

from collections.abc import Collection

from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel, PartitionKey, rack_violations
from strait.balancer.plan import Plan, apply
from strait.balancer.tiers import DiskClasses
from strait.balancer.traffic import RESOURCES, Traffic, broker_loads, load_spread


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


def traffic_violations(
    before: ClusterModel, plan: Plan, goals: Goals, traffic: Traffic, excluded: Collection[int] = ()
) -> list[str]:
    """Broker loads a plan made worse: each resource's max-min spread must end no wider than it
    was, or than twice `traffic_threshold` times its mean (the band of `strait.balancer.loads`).

    Holds for plans with no rack rule to repair and no broker to drain: those come first and may
    move traffic anywhere.
    """
    after = apply(before, plan.moves)
    kept = [b for b in before.brokers if b not in excluded]
    old, new = broker_loads(before, traffic), broker_loads(after, traffic)
    problems = []
    for res in RESOURCES:
        was, now = load_spread(old[res], kept), load_spread(new[res], kept)
        mean = sum(new[res][b] for b in kept) / len(kept) if kept else 0.0
        allowed = max(was, 2 * goals.traffic_threshold * mean)
        if now > allowed * (1 + 1e-9) + 1e-6:
            problems.append(f"{res} spread {now:.0f} B/s after the plan, above {allowed:.0f} (was {was:.0f})")
    return problems


def tier_violations(
    before: ClusterModel, plan: Plan, goals: Goals, traffic: Traffic, classes: DiskClasses
) -> list[str]:
    """Replicas on the wrong tier after a plan: on every broker with SSD and HDD dirs, the SSD dirs
    must hold exactly the hottest replicas that fit the SSD budget (taken hottest first, as
    `strait.balancer.tiers` defines it), unless the plan warned that a replica could not move."""
    if any(w.startswith("tiers:") for w in plan.warnings):
        return []
    after = apply(before, plan.moves)
    problems = []
    for broker, dirs in after.log_dirs.items():
        kinds = {d.path: classes.class_of(broker, d.path) for d in dirs if d.capacity > 0}
        if "ssd" not in kinds.values() or "hdd" not in kinds.values():
            continue
        budget = sum(int(d.capacity * goals.capacity_limit) for d in dirs if kinds.get(d.path) == "ssd")
        here = [p for p in after.partitions.values() if broker in p.replicas and kinds.get(p.dir_of(broker))]

        def heat(key: PartitionKey) -> float:
            r = traffic.rate(key)
            return r.bytes_in + r.bytes_read

        here.sort(key=lambda p: (-heat(p.key), p.size, p.key))
        for p in here:
            fits = heat(p.key) > 0 and p.size <= budget
            if fits:
                budget -= p.size
            on_ssd = kinds[p.dir_of(broker)] == "ssd"
            if fits != on_ssd:
                state = "hot" if fits else "cold"
                problems.append(f"{p.name}: {state} replica on broker {broker} is in {p.dir_of(broker)}")
    return problems
