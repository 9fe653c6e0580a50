"""The operations a user asks for, each a pure function from a cluster model to a plan.

Those that balance by usage ratio (rebalance, drain, fill) first refuse a model whose brokers
cannot size their disks (dirs sharing one filesystem without configured capacities);
fix-racks and leaders do not need sizes and always plan.
"""

from __future__ import annotations

from collections.abc import Collection

from strait.balancer import planner
from strait.balancer.capacity import require_capacities
from strait.balancer.goals import Goals, eligible_dirs, min_bytes_to_move, spread
from strait.balancer.model import ClusterModel
from strait.balancer.plan import Plan, apply, diff, disk_key


def rebalance(model: ClusterModel, goals: Goals | None = None) -> Plan:
    """Fix rack violations, then spread usage over all disks, then even out leaders."""
    goals = goals or Goals()
    require_capacities(model)
    ws = planner.Workspace(model, goals)
    warnings: list[str] = []
    planner.fix_racks(ws, warnings)
    planner.spread_disks(ws, warnings)
    if goals.leaders:
        planner.balance_leaders(ws)
    return _finish("rebalance", model, goals, ws, warnings)


def drain(model: ClusterModel, brokers: Collection[int], goals: Goals | None = None) -> Plan:
    """Move every replica off `brokers` (e.g. before decommissioning), keeping the rest balanced."""
    goals = goals or Goals()
    unknown = sorted(set(brokers) - set(model.brokers))
    if unknown:
        raise ValueError(f"cannot drain unknown broker(s) {unknown}")
    require_capacities(model, excluded=brokers)
    ws = planner.Workspace(model, goals, excluded=brokers)
    warnings: list[str] = []
    planner.drain(ws, warnings)
    planner.fix_racks(ws, warnings)
    planner.spread_disks(ws, warnings)
    if goals.leaders:
        planner.balance_leaders(ws)
    return _finish("drain", model, goals, ws, warnings)


def fill(model: ClusterModel, brokers: Collection[int], goals: Goals | None = None) -> Plan:
    """Move data onto new (or emptier) `brokers` only, until they hold a fair share."""
    goals = goals or Goals()
    unknown = sorted(set(brokers) - set(model.brokers))
    if unknown:
        raise ValueError(f"cannot fill unknown broker(s) {unknown}")
    require_capacities(model)
    ws = planner.Workspace(model, goals)
    warnings: list[str] = []
    planner.spread_disks(ws, warnings, destinations=brokers)
    return _finish("fill", model, goals, ws, warnings)


def fix_racks(model: ClusterModel, goals: Goals | None = None) -> Plan:
    """Only repair partitions whose replicas share a rack."""
    goals = goals or Goals()
    ws = planner.Workspace(model, goals)
    warnings: list[str] = []
    planner.fix_racks(ws, warnings)
    return _finish("fix-racks", model, goals, ws, warnings)


def leaders(model: ClusterModel, goals: Goals | None = None) -> Plan:
    """Even out preferred leaders by reordering replica lists; the executor then elects them."""
    goals = goals or Goals()
    ws = planner.Workspace(model, goals)
    planner.balance_leaders(ws)
    return _finish("leaders", model, goals, ws, [])


def _finish(operation: str, model: ClusterModel, goals: Goals, ws: planner.Workspace, warnings: list[str]) -> Plan:
    outcome = ws.outcome(warnings)
    moves = diff(model, outcome.partitions)
    after = apply(model, moves)
    excluded = ws.excluded
    stats = {
        "moves": len(moves),
        "inter_broker_moves": sum(1 for m in moves if m.kind == "inter"),
        "intra_broker_moves": sum(1 for m in moves if m.kind == "intra"),
        "bytes": sum(m.bytes for m in moves),
        "min_bytes": min_bytes_to_move(model, goals, excluded) if operation in ("rebalance", "drain") else 0,
        "spread_before": round(spread(eligible_dirs(model, excluded)), 6),
        "spread_after": round(spread(eligible_dirs(after, excluded)), 6),
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
