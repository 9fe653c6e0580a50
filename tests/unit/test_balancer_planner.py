"""Planner invariants over many generated clusters, plus the operations' specific promises."""

from __future__ import annotations

import random

import pytest

from strait.balancer import operations
from strait.balancer.goals import Goals, eligible_dirs, leader_counts, spread
from strait.balancer.invariants import violations
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition, rack_violations
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, apply
from strait.balancer.synthetic import Shape, generate

SHAPES = {
    "uniform-norack": Shape(brokers=6, dirs_per_broker=2, partitions=300, racks=0),
    "skewed-norack": Shape(brokers=8, dirs_per_broker=3, partitions=600, racks=0, skew=0.4, fill=0.3),
    "skewed-racks": Shape(brokers=9, dirs_per_broker=2, partitions=500, racks=3, skew=0.4, fill=0.3),
    "more-racks-than-rf": Shape(brokers=10, dirs_per_broker=2, partitions=400, racks=5, skew=0.3, fill=0.3),
    "rf2-two-racks": Shape(brokers=4, dirs_per_broker=2, partitions=120, replication=2, racks=2, skew=0.5, fill=0.3),
    "new-brokers": Shape(brokers=12, dirs_per_broker=4, partitions=800, racks=3, empty_brokers=3),
    "rack-violations": Shape(brokers=9, dirs_per_broker=2, partitions=300, racks=3, rack_violations=0.2, fill=0.3),
    "few-big-partitions": Shape(brokers=5, dirs_per_broker=2, partitions=12, racks=0, skew=0.5, fill=0.3),
}
SEEDS = range(6)
GOALS = Goals(threshold=0.10, capacity_limit=0.90)


def _after(model: ClusterModel, moves: object) -> ClusterModel:
    assert isinstance(moves, tuple)
    return apply(model, moves)


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
@pytest.mark.parametrize("seed", SEEDS)
def test_rebalance_keeps_every_rule(shape_name: str, seed: int) -> None:
    model = generate(SHAPES[shape_name], seed)
    plan = operations.rebalance(model, GOALS)
    assert violations(model, plan, GOALS) == []
    after = _after(model, plan.moves)
    # Fixing racks comes first: every partition that can be fixed is fixed.
    unfixable = sum(1 for w in plan.warnings if w.startswith("rack rule broken"))
    broken = sum(1 for p in after.partitions.values() if rack_violations(after, p))
    assert broken == unfixable
    assert spread(eligible_dirs(after)) <= spread(eligible_dirs(model)) + 1e-9


@pytest.mark.parametrize("shape_name", ["uniform-norack", "skewed-norack", "more-racks-than-rf", "new-brokers"])
@pytest.mark.parametrize("seed", SEEDS)
def test_rebalance_meets_threshold_where_reachable(shape_name: str, seed: int) -> None:
    # In these shapes partitions are small next to a disk and the racks do not pin data,
    # so a spread within threshold exists; the planner must find it without warnings.
    model = generate(SHAPES[shape_name], seed)
    plan = operations.rebalance(model, GOALS)
    after = _after(model, plan.moves)
    assert spread(eligible_dirs(after)) <= GOALS.threshold + 1e-9, plan.warnings
    assert not [w for w in plan.warnings if "spread" in w]


@pytest.mark.parametrize("seed", SEEDS)
def test_bytes_moved_stay_close_to_the_lower_bound(seed: int) -> None:
    model = generate(SHAPES["skewed-norack"], seed)
    plan = operations.rebalance(model, GOALS)
    assert plan.stats["min_bytes"] > 0
    assert plan.bytes <= 1.5 * plan.stats["min_bytes"]


@pytest.mark.parametrize("seed", SEEDS)
def test_plans_are_deterministic(seed: int) -> None:
    model = generate(SHAPES["skewed-racks"], seed)
    shuffled_parts = list(model.partitions.values())
    random.Random(seed).shuffle(shuffled_parts)
    rebuilt = ClusterModel.build(
        reversed(list(model.brokers.values())), reversed(list(model.all_dirs())), shuffled_parts, model.cluster_id
    )
    assert operations.rebalance(model, GOALS).to_json() == operations.rebalance(rebuilt, GOALS).to_json()


@pytest.mark.parametrize("seed", SEEDS)
def test_drain_empties_the_broker(seed: int) -> None:
    model = generate(SHAPES["more-racks-than-rf"], seed)
    plan = operations.drain(model, [3], GOALS)
    assert violations(model, plan, GOALS, excluded=[3]) == []
    after = _after(model, plan.moves)
    assert all(3 not in p.replicas for p in after.partitions.values())
    assert all(d.used == 0 for d in after.log_dirs[3])
    assert plan.stats["bytes"] >= sum(d.used for d in model.log_dirs[3])


@pytest.mark.parametrize("seed", SEEDS)
def test_fill_moves_data_only_onto_the_new_brokers(seed: int) -> None:
    shape = SHAPES["new-brokers"]
    model = generate(shape, seed)
    new = list(range(shape.brokers - shape.empty_brokers + 1, shape.brokers + 1))
    plan = operations.fill(model, new, GOALS)
    assert violations(model, plan, GOALS) == []
    for m in plan.moves:
        assert isinstance(m, InterBrokerMove)
        assert set(m.adding) <= set(new)
    after = _after(model, plan.moves)
    mean = sum(d.used for d in model.all_dirs()) / sum(d.capacity for d in model.all_dirs())
    for b in new:
        for d in after.log_dirs[b]:
            assert d.ratio >= mean - GOALS.threshold / 2 - 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_fix_racks_moves_only_violating_partitions(seed: int) -> None:
    model = generate(SHAPES["rack-violations"], seed)
    bad = {p.key for p in model.partitions.values() if rack_violations(model, p)}
    assert bad
    plan = operations.fix_racks(model, GOALS)
    assert {m.key for m in plan.moves} <= bad
    after = _after(model, plan.moves)
    assert not [p for p in after.partitions.values() if rack_violations(after, p)]
    assert violations(model, plan, GOALS) == []


def _model(
    disks: dict[tuple[int, str], int],
    parts: list[tuple[int, tuple[int, ...], tuple[str, ...]]],
    racks: dict[int, str | None] | None = None,
    capacity: int = 100,
) -> ClusterModel:
    brokers = sorted({b for b, _ in disks})
    usage: dict[tuple[int, str], int] = dict.fromkeys(disks, 0)
    partitions = []
    for i, (size, reps, dirs) in enumerate(parts):
        for b, d in zip(reps, dirs, strict=True):
            usage[(b, d)] += size
        partitions.append(Partition("t", i, reps, dirs, size, reps[0]))
    return ClusterModel.build(
        [Broker(b, (racks or {}).get(b)) for b in brokers],
        [LogDir(b, d, capacity, usage[(b, d)]) for (b, d) in disks],
        partitions,
    )


def test_meituan_picture_four_and_two_become_three_and_three() -> None:
    # One broker, two disks: 4 equal partitions on one, 2 on the other. One intra-broker move.
    disks = {(1, "/a"): 0, (1, "/b"): 0}
    parts = [(10, (1,), ("/a",))] * 4 + [(10, (1,), ("/b",))] * 2
    model = _model(disks, parts)
    plan = operations.rebalance(model, Goals(threshold=0.0))
    assert len(plan.moves) == 1
    (move,) = plan.moves
    assert isinstance(move, IntraBrokerMove)
    assert (move.source_dir, move.target_dir, move.bytes) == ("/a", "/b", 10)


def test_disk_and_broker_moves_in_one_plan() -> None:
    # Broker 1 has a full and an empty disk; broker 2 is empty. Both kinds of move are needed.
    disks = {(1, "/a"): 0, (1, "/b"): 0, (2, "/a"): 0, (2, "/b"): 0}
    parts = [(10, (1,), ("/a",))] * 8
    model = _model(disks, parts)
    plan = operations.rebalance(model, Goals(threshold=0.0, leaders=False))
    kinds = {m.kind for m in plan.moves}
    assert kinds == {"inter", "intra"}
    after = _after(model, plan.moves)
    assert sorted(d.used for d in after.all_dirs()) == [20, 20, 20, 20]
    assert plan.bytes == 60


def test_capacity_limit_is_never_crossed() -> None:
    # The only emptier disk is near its limit: the planner must leave data where it is.
    disks = {(1, "/a"): 0, (2, "/a"): 0}
    parts = [(30, (1,), ("/a",)), (30, (1,), ("/a",)), (85, (2,), ("/a",))]
    model = _model(disks, parts)
    plan = operations.rebalance(model, Goals(threshold=0.0, capacity_limit=0.9))
    after = _after(model, plan.moves)
    assert all(d.used <= 90 for d in after.all_dirs())
    assert violations(model, plan, Goals(threshold=0.0, capacity_limit=0.9)) == []


def test_rack_rule_blocks_moves_that_would_share_a_rack() -> None:
    # Broker 3 (empty, rack A) may not take a replica of a partition already in rack A.
    disks = {(1, "/a"): 0, (2, "/a"): 0, (3, "/a"): 0}
    parts = [(20, (1, 2), ("/a", "/a"))] * 3
    model = _model(disks, parts, racks={1: "A", 2: "B", 3: "A"})
    plan = operations.rebalance(model, Goals(threshold=0.0))
    for m in plan.moves:
        if isinstance(m, InterBrokerMove):
            assert 2 in m.target or 1 in m.target
            racks = [model.rack_of(b) for b in m.target]
            assert len(set(racks)) == len(racks)
    assert violations(model, plan, Goals(threshold=0.0)) == []


def test_leaders_spread_without_copying_data() -> None:
    disks = {(b, "/a"): 0 for b in (1, 2, 3)}
    parts = [(5, (1, 2, 3), ("/a", "/a", "/a"))] * 9
    model = _model(disks, parts)
    plan = operations.leaders(model)
    assert plan.bytes == 0
    counts = leader_counts(_after(model, plan.moves))
    assert sorted(counts.values()) == [3, 3, 3]
    assert all(isinstance(m, InterBrokerMove) and set(m.target) == set(m.source) for m in plan.moves)


def test_unknown_broker_is_refused_by_name() -> None:
    model = generate(SHAPES["uniform-norack"], 0)
    with pytest.raises(ValueError, match="99"):
        operations.drain(model, [99])
    with pytest.raises(ValueError, match="99"):
        operations.fill(model, [99])


def test_replica_on_an_offline_broker_is_planned_around() -> None:
    # Broker 9 is gone from the cluster metadata but still listed as a replica.
    disks = {(1, "/a"): 0, (2, "/a"): 0, (3, "/a"): 0}
    model = _model(disks, [(10, (1, 2), ("/a", "/a"))] * 4)
    ghost = Partition("g", 0, (1, 9), ("/a", ""), 10, 1)
    model = ClusterModel.build(model.brokers.values(), model.all_dirs(), [*model.partitions.values(), ghost])
    plan = operations.rebalance(model, Goals(threshold=0.0))
    assert violations(model, plan, Goals(threshold=0.0)) == []
    assert plan.moves
    assert 9 in apply(model, plan.moves).partitions[("g", 0)].replicas
