"""The operations a user asks for, each a pure function from a cluster model to a plan.

Those that balance by usage ratio (rebalance, drain, fill) first refuse a model whose brokers
cannot size their disks (dirs sharing one filesystem without configured capacities);
fix-racks and leaders do not need sizes and always plan.

With `traffic` (rates measured by `strait.balancer.sampler`) and disk `classes`, the phases run in
this order of priority, each keeping what the ones before it achieved:

1. drain: replicas leave the brokers being emptied;
2. racks: no two replicas of a partition under one rack switch;
3. capacity: no disk past the capacity limit (held by every phase, for every step);
4. disks: the usage spread within `threshold` (moves that would push a broker's traffic out of
   its band are not taken);
5. network in: replicas move from the broker taking in most bytes/s to those taking in least,
   within the disk spread;
6. leaders: preferred-leader counts, then leader bytes in (net out follows), by reordering
   replica lists;
7. tiers: each broker's hottest replicas on its SSD dirs, cold ones on HDD (intra-broker moves).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from strait.balancer import leaders as leader_phases
from strait.balancer import planner
from strait.balancer.capacity import require_capacities
from strait.balancer.goals import Goals, by_class, eligible_dirs, min_bytes_to_move, spread
from strait.balancer.loads import attach, balance_net_in
from strait.balancer.model import ClusterModel
from strait.balancer.plan import Plan, diff_ordered, disk_key
from strait.balancer.tiers import DiskClasses, place_tiers
from strait.balancer.traffic import RESOURCES, Traffic, broker_loads, load_spread, loads_of

_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Planning allocates millions of small lists and tuples and frees none in cycles, yet each
    allocation burst makes Python's cyclic collector walk the whole model again: a fifth of a
    1,000-broker plan's CPU. Paused while planning, and only if it was on (another thread may
    have paused it; the last to finish turns it back on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _planning(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _no_cyclic_gc():
            return fn(*args, **kwargs)

    return run


@_planning
def rebalance(
    model: ClusterModel,
    goals: Goals | None = None,
    traffic: Traffic | None = None,
    classes: DiskClasses | None = None,
) -> Plan:
    """Fix rack violations, spread usage over all disks, then traffic, leaders and tiers."""
    goals = goals or Goals()
    require_capacities(model)
    ws = planner.Workspace(model, goals)
    attach(ws, traffic)
    warnings: list[str] = []
    planner.fix_racks(ws, warnings)
    if classes:
        place_tiers(ws, traffic, classes, warnings)
    _spread_disks(ws, warnings, classes)
    return _traffic_and_tiers("rebalance", model, goals, ws, warnings, traffic, classes)


def _spread_disks(ws: planner.Workspace, warnings: list[str], classes: DiskClasses | None) -> None:
    """Even out disk usage: over every disk, or within each storage tier when dirs are classed
    (data then moves only between dirs of one class, so the tier placement stays)."""
    if not classes:
        planner.spread_disks(ws, warnings)
        return
    for group in _tier_groups(ws, classes).values():
        planner.spread_disks(ws, warnings, within=group)


def _tier_groups(ws: planner.Workspace, classes: DiskClasses) -> dict[str | None, list[int]]:
    groups: dict[str | None, list[int]] = {}
    for d, (broker, path) in enumerate(zip(ws.disk_broker, ws.disk_path, strict=True)):
        groups.setdefault(classes.class_of(broker, path), []).append(d)
    return groups


def _traffic_and_tiers(
    operation: str,
    model: ClusterModel,
    goals: Goals,
    ws: planner.Workspace,
    warnings: list[str],
    traffic: Traffic | None,
    classes: DiskClasses | None,
) -> Plan:
    balance_net_in(ws, warnings)
    if goals.leaders:
        leader_phases.balance_leaders(ws)
        leader_phases.balance_leader_traffic(ws)
    if classes:
        # Traffic moves may have landed hot replicas on HDD (or cold on SSD): place them again,
        # then even out each tier, which moves data only within a class.
        place_tiers(ws, traffic, classes, warnings)
        _spread_disks(ws, warnings, classes)
    return _finish(operation, model, goals, ws, warnings, traffic, classes)


@_planning
def drain(
    model: ClusterModel,
    brokers: Collection[int],
    goals: Goals | None = None,
    traffic: Traffic | None = None,
    classes: DiskClasses | None = None,
) -> Plan:
    """Move every replica off `brokers` (e.g. before decommissioning), keeping the rest balanced."""
    goals = goals or Goals()
    unknown = sorted(set(brokers) - set(model.brokers))
    if unknown:
        raise ValueError(f"cannot drain unknown broker(s) {unknown}")
    require_capacities(model, excluded=brokers)
    ws = planner.Workspace(model, goals, excluded=brokers)
    attach(ws, traffic)
    warnings: list[str] = []
    planner.drain(ws, warnings)
    planner.fix_racks(ws, warnings)
    if classes:
        place_tiers(ws, traffic, classes, warnings)
    _spread_disks(ws, warnings, classes)
    return _traffic_and_tiers("drain", model, goals, ws, warnings, traffic, classes)


@_planning
def fill(
    model: ClusterModel, brokers: Collection[int], goals: Goals | None = None, traffic: Traffic | None = None
) -> Plan:
    """Move data onto new (or emptier) `brokers` only, until they hold a fair share."""
    goals = goals or Goals()
    unknown = sorted(set(brokers) - set(model.brokers))
    if unknown:
        raise ValueError(f"cannot fill unknown broker(s) {unknown}")
    require_capacities(model)
    ws = planner.Workspace(model, goals)
    attach(ws, traffic)
    warnings: list[str] = []
    planner.spread_disks(ws, warnings, destinations=brokers)
    return _finish("fill", model, goals, ws, warnings, traffic)


@_planning
def fix_racks(model: ClusterModel, goals: Goals | None = None) -> Plan:
    """Only repair partitions whose replicas share a rack."""
    goals = goals or Goals()
    ws = planner.Workspace(model, goals)
    warnings: list[str] = []
    planner.fix_racks(ws, warnings)
    return _finish("fix-racks", model, goals, ws, warnings)


@_planning
def leaders(model: ClusterModel, goals: Goals | None = None, traffic: Traffic | None = None) -> Plan:
    """Even out preferred leaders (counts, then leader bytes in) by reordering replica lists;
    the executor then elects them."""
    goals = goals or Goals()
    ws = planner.Workspace(model, goals)
    attach(ws, traffic)
    leader_phases.balance_leaders(ws)
    leader_phases.balance_leader_traffic(ws)
    return _finish("leaders", model, goals, ws, [], traffic)


@_planning
def tiers(model: ClusterModel, traffic: Traffic | None, classes: DiskClasses, goals: Goals | None = None) -> Plan:
    """Only place replicas by tier: hot ones on SSD dirs, cold ones on HDD (intra-broker moves)."""
    goals = goals or Goals()
    ws = planner.Workspace(model, goals)
    warnings: list[str] = []
    place_tiers(ws, traffic, classes, warnings)
    return _finish("tiers", model, goals, ws, warnings, traffic, classes)


def _finish(
    operation: str,
    model: ClusterModel,
    goals: Goals,
    ws: planner.Workspace,
    warnings: list[str],
    traffic: Traffic | None = None,
    classes: DiskClasses | None = None,
) -> Plan:
    # Both tier passes may warn about the same replica: each warning once.
    outcome = ws.outcome(list(dict.fromkeys(warnings)))
    moves = diff_ordered(model, outcome.partitions.items())
    excluded = ws.excluded
    # The disks after the plan, from the workspace (what `apply` would say, without building it),
    # grouped by tier when dirs are classed: the spread is then measured within each tier.
    class_of = classes.class_of if classes else None
    after: dict[str | None, list[float]] = {}
    for d, cap in enumerate(ws.disk_cap):
        if cap > 0 and ws.disk_broker[d] not in excluded:
            tier = class_of(ws.disk_broker[d], ws.disk_path[d]) if class_of else None
            after.setdefault(tier, []).append(ws.disk_used[d] / cap)
    stats: dict[str, object] = {
        "moves": len(moves),
        "inter_broker_moves": sum(1 for m in moves if m.kind == "inter"),
        "intra_broker_moves": sum(1 for m in moves if m.kind == "intra"),
        "bytes": sum(m.bytes for m in moves),
        "min_bytes": min_bytes_to_move(model, goals, excluded) if operation in ("rebalance", "drain") else 0,
        "spread_before": round(spread(eligible_dirs(model, excluded), class_of), 6),
        "spread_after": round(max((max(r) - min(r) for r in after.values()), default=0.0), 6),
    }
    if class_of:
        before = by_class(eligible_dirs(model, excluded), class_of)
        stats["spread_by_class"] = {
            str(tier): [round(spread(before.get(tier, ())), 6), round(max(r) - min(r), 6)] for tier, r in after.items()
        }
    if traffic is not None:
        stats["traffic_window_s"] = round(traffic.window_s, 3)
        placed = {**model.partitions, **outcome.partitions}
        old, new = broker_loads(model, traffic), loads_of(model.brokers, placed, traffic)
        kept = [b for b in model.brokers if b not in excluded]
        stats["traffic_spread_before"] = {res: round(load_spread(old[res], kept), 3) for res in RESOURCES}
        stats["traffic_spread_after"] = {res: round(load_spread(new[res], kept), 3) for res in RESOURCES}
        stats["traffic_brokers"] = {
            res: {str(b): [round(old[res][b], 3), round(new[res][b], 3)] for b in model.brokers} for res in RESOURCES
        }
    return Plan(
        operation=operation,
        moves=tuple(moves),
        cluster_id=model.cluster_id,
        goals=goals.to_dict() | {"excluded_brokers": sorted(excluded)},
        warnings=tuple(outcome.warnings),
        stats=stats,
        capacities={disk_key(d.broker, d.path): d.capacity for d in model.all_dirs()},
    )
