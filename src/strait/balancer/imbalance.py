"""Whether a cluster is out of balance, why, and the plan that would fix it. Pure: no I/O.

The watch mode (`strait.balancer.watch`) samples a cluster model every so often and asks
`assess` what is wrong with it. Five reasons, each a rule the planner already keeps:

- `disk_spread`: the usage ratios of the disks (of one storage tier, when dirs are classed)
  differ by more than the goals' threshold;
- `disk_full`: a disk holds more than the capacity limit allows;
- `rack`: a partition has more replicas under one rack switch than the rack rule allows;
- `broker_gone`: replicas sit on a broker the cluster no longer lists (under-replicated);
- `traffic_spread`: with traffic measured (`balance.traffic`), the brokers' network in (bytes/s
  every replica takes in, `strait.balancer.traffic`) differs by more than `traffic_spread` of
  its mean, and by more than `traffic_floor` bytes/s (a nearly idle cluster's skew is noise).

Disk reasons need disk sizes: where dirs of one broker report one filesystem and no capacity is
configured (`strait.balancer.capacity.shared_filesystems`), usage ratios say nothing, so the disk
reasons are not judged and `sizes_unknown` says so.

The `signature` names the imbalance coarsely (which reasons, which disks are too full, which
brokers are gone, which partitions break the rack rule), so that it changes when the imbalance
does but not every time a few bytes are written. The watch holds a cancelled proposal back until
the signature changes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from strait.balancer import operations, watch
from strait.balancer.capacity import shared_filesystems
from strait.balancer.goals import Goals, eligible_dirs, spread
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition, max_per_rack
from strait.balancer.plan import InterBrokerMove, Plan
from strait.balancer.tiers import DiskClasses
from strait.balancer.traffic import Traffic, net_in_skew

REASONS = ("disk_spread", "disk_full", "rack", "broker_gone", "traffic_spread")


@dataclass(frozen=True)
class Assessment:
    """What `assess` found: the reasons the cluster is out of balance (none: in balance)."""

    reasons: frozenset[str]
    signature: tuple[str, ...]
    spread: float | None
    full_dirs: tuple[str, ...] = ()
    gone_brokers: tuple[int, ...] = ()
    rack_partitions: tuple[str, ...] = ()
    under_replicated: int = 0
    sizes_unknown: tuple[int, ...] = ()
    threshold: float = 0.0
    traffic_spread: float | None = None  # network-in max - min over its mean; None: not measured
    net_in_spread: float | None = None  # the same max - min, bytes/s
    traffic_threshold: float | None = None

    @property
    def balanced(self) -> bool:
        return not self.reasons

    def measures(self) -> dict[str, float]:
        """The measured reasons' values (`watch.MEASURED`) as the watch judges plans by them."""
        out = {}
        if self.spread is not None:
            out["disk_spread"] = self.spread
        if self.traffic_spread is not None:
            out["traffic_spread"] = self.traffic_spread
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "reasons": sorted(self.reasons),
            "spread": None if self.spread is None else round(self.spread, 6),
            "threshold": self.threshold,
            "full_dirs": list(self.full_dirs),
            "gone_brokers": list(self.gone_brokers),
            "rack_partitions": len(self.rack_partitions),
            "under_replicated_replicas": self.under_replicated,
            "sizes_unknown_brokers": list(self.sizes_unknown),
            "traffic_spread": None if self.traffic_spread is None else round(self.traffic_spread, 6),
            "net_in_spread": None if self.net_in_spread is None else round(self.net_in_spread, 3),
            "traffic_threshold": self.traffic_threshold,
        }


def gone_brokers(model: ClusterModel) -> tuple[int, ...]:
    """Brokers that partitions still list as replicas but the cluster no longer has."""
    listed = {b for p in model.partitions.values() for b in p.replicas}
    return tuple(sorted(listed - set(model.brokers)))


def assess(
    model: ClusterModel,
    goals: Goals,
    classes: DiskClasses | None = None,
    *,
    traffic: Traffic | None = None,
    traffic_spread: float = 0.25,
    traffic_floor: float = 1_000_000.0,
) -> Assessment:
    """Why `model` is out of balance under `goals`; an empty `reasons` means it is not.

    With disk `classes` (the plan will place tiers), the disk spread is measured within each
    tier, as the planner balances it: SSDs kept for hot replicas are not a skew. Traffic is
    judged only when `traffic` was measured (see `traffic_spread` in the module docstring).
    """
    reasons: set[str] = set()
    tokens: list[str] = []
    unknown = tuple(sorted(shared_filesystems(model)))
    dirs = [d for d in eligible_dirs(model) if d.broker not in unknown]
    measured: float | None = None
    full: tuple[str, ...] = ()
    if dirs:
        measured = spread(dirs, classes.class_of if classes else None)
        if measured > goals.threshold:
            reasons.add("disk_spread")
            tokens.append("disk_spread")
        full = tuple(f"{d.broker}:{d.path}" for d in dirs if d.used > d.capacity * goals.capacity_limit)
        if full:
            reasons.add("disk_full")
            tokens.extend(f"disk_full:{name}" for name in full)
    gone = gone_brokers(model)
    under = sum(1 for p in model.partitions.values() for b in p.replicas if b in gone)
    if gone:
        reasons.add("broker_gone")
        tokens.extend(f"broker_gone:{b}" for b in gone)
    broken = tuple(p.name for p in model.partitions.values() if _breaks_racks(model, p))
    if broken:
        reasons.add("rack")
        digest = hashlib.sha256("\n".join(broken).encode()).hexdigest()[:12]
        tokens.append(f"rack:{len(broken)}:{digest}")
    skew: float | None = None
    net_in_spread: float | None = None
    if traffic is not None:
        net_in_spread, mean = net_in_skew(model, traffic)
        skew = net_in_spread / mean if mean > 0 else 0.0
        if skew > traffic_spread and net_in_spread > traffic_floor:
            # Which brokers are hot changes with every sample: the token names only the reason.
            reasons.add("traffic_spread")
            tokens.append("traffic_spread")
    return Assessment(
        reasons=frozenset(reasons),
        signature=tuple(sorted(tokens)),
        spread=measured,
        full_dirs=full,
        gone_brokers=gone,
        rack_partitions=broken,
        under_replicated=under,
        sizes_unknown=unknown,
        threshold=goals.threshold,
        traffic_spread=skew,
        net_in_spread=net_in_spread,
        traffic_threshold=traffic_spread if traffic is not None else None,
    )


def propose(
    model: ClusterModel,
    goals: Goals,
    assessment: Assessment,
    traffic: Traffic | None = None,
    classes: DiskClasses | None = None,
) -> Plan:
    """The plan the existing planner makes for what `assessment` found.

    A gone broker is drained: it is put back into the model as a placeholder and
    `operations.drain` moves every replica off it, which also fixes racks and spreads the disks.
    Otherwise, with disk sizes known, `operations.rebalance`; without them, only the rack rule is
    repaired (`operations.fix_racks`). With `traffic` measured, the plan balances broker loads
    too and, with disk `classes`, places hot replicas on SSD (tiers are left alone without
    traffic: every replica would look cold). Raises `CapacityError` like the operations do.
    """
    gone = assessment.gone_brokers
    tiers = classes if traffic is not None else None
    if gone:
        plan = operations.drain(_with_placeholders(model, gone), gone, goals, traffic, tiers)
    elif assessment.sizes_unknown and "rack" in assessment.reasons:
        plan = operations.fix_racks(model, goals)
    else:
        plan = operations.rebalance(model, goals, traffic, tiers)
    # The executor refuses a target broker the cluster does not list: a replica that could not be
    # moved off a gone broker keeps its partition out of the plan (the planner warned why). A
    # partition with no replica left on a live broker is offline: there is nothing to copy from.
    kept = [m for m in plan.moves if isinstance(m, InterBrokerMove) and set(m.target) & set(gone)]
    offline = [m for m in plan.moves if isinstance(m, InterBrokerMove) and set(m.source) <= set(gone)]
    moves = tuple(m for m in plan.moves if m not in kept and m not in offline)
    warnings = plan.warnings
    if kept:
        warnings += (f"{len(kept)} partition(s) left as they are: they keep a replica on gone broker(s) {list(gone)}",)
    if offline:
        names = ", ".join(f"{m.topic}-{m.partition}" for m in offline[:10])
        warnings += (f"{len(offline)} partition(s) offline, every replica on a gone broker, not moved: {names}",)
    capacities = {k: v for k, v in plan.capacities.items() if int(k.split(":", 1)[0]) not in gone}
    stats = {
        **plan.stats,
        "moves": len(moves),
        "proposed_by": "watch",
        "reasons": sorted(assessment.reasons),
        "signature": list(assessment.signature),
    }
    return replace(plan, moves=moves, warnings=warnings, stats=stats, capacities=capacities)


def promises(assessment: Assessment, plan: Plan) -> tuple[watch.Promise, ...]:
    """What `plan` promises for each measured reason `assessment` found: the measure now, less the
    gain the plan's own before/after figures predict (the plan measures over the brokers it may
    use, so its gain, not its end value, is carried over)."""
    stats = plan.stats
    out = []
    if "disk_spread" in assessment.reasons and assessment.spread is not None:
        before, after = stats.get("spread_before"), stats.get("spread_after")
        if isinstance(before, int | float) and isinstance(after, int | float):
            gain = float(before) - float(after)
            out.append(watch.Promise("disk_spread", assessment.spread, assessment.spread - gain, assessment.threshold))
    skew, spread_now = assessment.traffic_spread, assessment.net_in_spread
    if "traffic_spread" in assessment.reasons and skew and spread_now and assessment.traffic_threshold is not None:
        before_in, after_in = stats.get("traffic_spread_before"), stats.get("traffic_spread_after")
        if isinstance(before_in, dict) and isinstance(after_in, dict) and "net_in" in before_in:
            mean = spread_now / skew
            gain = (float(before_in["net_in"]) - float(after_in["net_in"])) / mean
            out.append(watch.Promise("traffic_spread", skew, skew - gain, assessment.traffic_threshold))
    return tuple(out)


def _breaks_racks(model: ClusterModel, partition: Partition) -> bool:
    """The rack rule over the replicas on brokers the cluster lists (a gone broker's rack is unknown)."""
    limit = max_per_rack(len(partition.replicas), len(model.racks()))
    counts: dict[str | None, int] = {}
    for b in partition.replicas:
        if b in model.brokers:
            rack = model.rack_of(b)
            counts[rack] = counts.get(rack, 0) + 1
    return any(n > limit for n in counts.values())


def _with_placeholders(model: ClusterModel, gone: tuple[int, ...]) -> ClusterModel:
    """`model` with each gone broker back, in the first rack (as `planner.Workspace` counts unknown
    brokers), holding its replicas on the dirs the model names for them (the gateway says "");
    drained, so no move targets it."""
    if not gone:
        return model
    racks = sorted(model.racks(), key=lambda r: (r is None, r or ""))
    rack = racks[0] if racks else None
    held: dict[tuple[int, str], int] = {}
    for p in model.partitions.values():
        for b, path in zip(p.replicas, p.dirs, strict=True):
            if b in gone:
                held[(b, path)] = held.get((b, path), 0) + p.size
    brokers = [*model.brokers.values(), *(Broker(b, rack) for b in gone)]
    dirs = [*model.all_dirs(), *(LogDir(b, path, max(used, 1), used) for (b, path), used in held.items())]
    return ClusterModel.build(brokers, dirs, model.partitions.values(), model.cluster_id)
