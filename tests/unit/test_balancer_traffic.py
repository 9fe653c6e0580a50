"""Traffic without JMX: rates from two samples, broker loads, and traffic-aware plans over many
generated clusters (the hard rules hold, every load spread narrows or stays in its band)."""

from __future__ import annotations

import random

import pytest

from strait.balancer import operations
from strait.balancer.goals import Goals, eligible_dirs, leader_counts, spread
from strait.balancer.invariants import traffic_violations, violations
from strait.balancer.loads import _RackRoom, attach
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition
from strait.balancer.plan import apply
from strait.balancer.planner import Workspace
from strait.balancer.synthetic import Shape, generate
from strait.balancer.synthetic import traffic as synthetic_traffic
from strait.balancer.traffic import (
    RESOURCES,
    PartitionSample,
    Rate,
    Sample,
    Traffic,
    broker_loads,
    rates,
    spreads,
)

GOALS = Goals(threshold=0.10, capacity_limit=0.90, traffic_threshold=0.10)
SHAPES = {
    "uniform-norack": Shape(brokers=6, dirs_per_broker=2, partitions=300, racks=0),
    "skewed-racks": Shape(brokers=9, dirs_per_broker=2, partitions=500, racks=3, skew=0.4, fill=0.3),
    "more-racks-than-rf": Shape(brokers=10, dirs_per_broker=2, partitions=400, racks=5, skew=0.3, fill=0.3),
    "rf2-two-racks": Shape(brokers=4, dirs_per_broker=2, partitions=120, replication=2, racks=2, skew=0.5, fill=0.3),
    "new-brokers": Shape(brokers=12, dirs_per_broker=4, partitions=800, racks=3, empty_brokers=3),
    "few-big-partitions": Shape(brokers=5, dirs_per_broker=2, partitions=12, racks=0, skew=0.5, fill=0.3),
    "full-disks": Shape(brokers=6, dirs_per_broker=2, partitions=200, racks=3, skew=0.3, fill=0.8),
}
SEEDS = range(8)


# ---- rates from samples ----------------------------------------------------------------------------


def _sample(at: float, **parts: tuple[int, int, int]) -> Sample:
    return Sample(at, {(k, 0): PartitionSample(*v) for k, v in parts.items()})


def test_rate_is_size_growth_over_the_window() -> None:
    before = _sample(10.0, a=(0, 100, 10_000), idle=(0, 50, 5_000))
    after = _sample(20.0, a=(0, 300, 30_000), idle=(0, 50, 5_000))
    got = rates(before, after)
    assert got.window_s == 10.0
    assert got.rate(("a", 0)) == Rate(2_000.0, 20.0, 0.0)
    assert ("idle", 0) not in got.rates and got.rate(("idle", 0)) == Rate()


def test_retention_deleting_a_segment_prices_records_at_bytes_per_record() -> None:
    # The log start moved and the size shrank: growth says nothing, records written still do.
    before = _sample(0.0, a=(0, 1000, 100_000))
    after = _sample(5.0, a=(600, 1500, 90_000))  # 900 records on disk, 100 bytes each
    got = rates(before, after).rate(("a", 0))
    assert got.records_in == pytest.approx(100.0)
    assert got.bytes_in == pytest.approx(500 * 100 / 5.0)


def test_recreated_topic_and_new_partition_count_as_no_traffic() -> None:
    before = _sample(0.0, a=(0, 1000, 100_000))
    after = Sample(1.0, {("a", 0): PartitionSample(0, 10, 1_000), ("b", 0): PartitionSample(0, 10, 1_000)})
    assert rates(before, after).rates == {}


def test_consumed_bytes_from_committed_offsets_over_every_group() -> None:
    parts0 = {("a", 0): PartitionSample(0, 1000, 100_000)}
    parts1 = {("a", 0): PartitionSample(0, 1000, 100_000)}
    before = Sample(0.0, parts0, {("g1", "a", 0): 100, ("g2", "a", 0): 500, ("gone", "a", 0): 1})
    after = Sample(2.0, parts1, {("g1", "a", 0): 300, ("g2", "a", 0): 700, ("new", "a", 0): 900})
    got = rates(before, after).rate(("a", 0))
    assert got.bytes_in == 0.0
    assert got.bytes_read == pytest.approx((200 + 200) * 100 / 2.0)


def test_samples_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="in order"):
        rates(_sample(5.0), _sample(5.0))


def test_traffic_round_trips_through_json_form() -> None:
    t = Traffic({("a", 0): Rate(1.5, 2.0, 3.0), ("b", 1): Rate(0.5, 1.0, 0.0)}, 12.0)
    assert Traffic.from_dict(t.to_dict()) == t


# ---- broker loads ------------------------------------------------------------------------------------


def _model(parts: list[tuple[str, tuple[int, ...]]], brokers: int = 4, racks: bool = False) -> ClusterModel:
    bs = [Broker(b, f"r{b % 2}" if racks else None) for b in range(1, brokers + 1)]
    dirs = [LogDir(b, f"/d{i}", 10_000, 0) for b in range(1, brokers + 1) for i in range(2)]
    partitions = [Partition(t, 0, reps, tuple("/d0" for _ in reps), 10, reps[0]) for t, reps in parts]
    model = ClusterModel.build(bs, dirs, partitions)
    # Usage from the partitions themselves.
    used: dict[tuple[int, str], int] = {}
    for p in model.partitions.values():
        for b, d in zip(p.replicas, p.dirs, strict=True):
            used[(b, d)] = used.get((b, d), 0) + p.size
    fixed = [LogDir(d.broker, d.path, d.capacity, used.get((d.broker, d.path), 0)) for d in model.all_dirs()]
    return ClusterModel.build(bs, fixed, partitions)


def test_loads_follow_replicas_and_preferred_leaders() -> None:
    model = _model([("a", (1, 2, 3)), ("b", (2, 3))])
    t = Traffic({("a", 0): Rate(100.0, 1.0, 50.0), ("b", 0): Rate(10.0, 1.0, 0.0)})
    loads = broker_loads(model, t)
    assert loads["net_in"] == {1: 100.0, 2: 110.0, 3: 110.0, 4: 0.0}
    assert loads["leader_in"] == {1: 100.0, 2: 10.0, 3: 0.0, 4: 0.0}
    # Leader sends to each follower and to the consumers.
    assert loads["net_out"] == {1: 100.0 * 2 + 50.0, 2: 10.0, 3: 0.0, 4: 0.0}


def test_hot_broker_sheds_network_in_and_leadership() -> None:
    # Broker 1 leads and holds every hot partition; broker 4 holds nothing.
    parts = [(f"t{i}", (1, 2 + i % 2)) for i in range(6)]
    model = _model(parts)
    t = Traffic({(f"t{i}", 0): Rate(1000.0, 1.0, 0.0) for i in range(6)})
    before = spreads(model, t)
    plan = operations.rebalance(model, GOALS, traffic=t)
    assert violations(model, plan, GOALS) == []
    assert traffic_violations(model, plan, GOALS, t) == []
    stats_after = plan.stats["traffic_spread_after"]
    assert stats_after == spreads(apply(model, plan.moves), t)
    assert plan.stats["traffic_spread_before"] == before
    for res in RESOURCES:
        assert stats_after[res] < before[res], (res, before, stats_after)
    assert stats_after["net_in"] <= 1000.0  # within one partition's rate of even


# ---- invariants over generated clusters -----------------------------------------------------------


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
@pytest.mark.parametrize("seed", SEEDS)
def test_traffic_plans_keep_every_rule_and_narrow_every_load(shape_name: str, seed: int) -> None:
    model = generate(SHAPES[shape_name], seed)
    t = synthetic_traffic(model, seed)
    plan = operations.rebalance(model, GOALS, traffic=t)
    assert violations(model, plan, GOALS) == []
    assert traffic_violations(model, plan, GOALS, t) == []
    after = apply(model, plan.moves)
    # Disks first: traffic never costs disk balance.
    assert spread(eligible_dirs(after)) <= max(spread(eligible_dirs(model)), GOALS.threshold) + 1e-9
    # Leader counts stay close to even (the leader traffic phase moves them by at most one more).
    counts = leader_counts(after)
    assert max(counts.values()) - min(counts.values()) <= max(
        3, max(leader_counts(model).values()) - min(leader_counts(model).values())
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_traffic_makes_the_skewed_load_narrower(seed: int) -> None:
    model = generate(SHAPES["uniform-norack"], seed)
    t = synthetic_traffic(model, seed, skew=1.0)
    plan = operations.rebalance(model, GOALS, traffic=t)
    before, after = plan.stats["traffic_spread_before"], plan.stats["traffic_spread_after"]
    for res in ("net_in", "leader_in"):
        assert after[res] < before[res] * 0.5, (res, before, after)


@pytest.mark.parametrize("seed", SEEDS)
def test_drain_with_traffic_still_empties_the_broker(seed: int) -> None:
    model = generate(SHAPES["skewed-racks"], seed)
    t = synthetic_traffic(model, seed)
    plan = operations.drain(model, [1], GOALS, traffic=t)
    assert violations(model, plan, GOALS, excluded=[1]) == []
    after = apply(model, plan.moves)
    assert not any(1 in p.replicas for p in after.partitions.values())


def test_without_traffic_plans_are_unchanged() -> None:
    model = generate(SHAPES["skewed-racks"], 3)
    assert operations.rebalance(model, GOALS).moves == operations.rebalance(model, GOALS, traffic=Traffic({})).moves


@pytest.mark.parametrize("seed", range(4))
def test_the_network_in_phase_rack_counts_stay_exact_through_moves(seed: int) -> None:
    """The counts that let the network-in phase skip a rack (`loads._RackRoom`), kept up to date
    move by move, equal counts made afresh; and a rack they say is closed refuses every replica."""
    model = generate(Shape(brokers=9, dirs_per_broker=2, partitions=400, racks=3, rack_violations=0.3), seed)
    ws = Workspace(model, GOALS)
    loads = attach(ws, synthetic_traffic(model, seed, active=0.6))
    assert loads is not None
    room = _RackRoom(ws, loads)
    brokers = sorted(model.brokers)
    for b in brokers:
        room.any_to(b, 0)  # every row made now, so every move updates them
    rng = random.Random(seed)
    moved = 0
    for _ in range(3000):
        pidx = rng.randrange(len(ws.replicas))
        hot, cold = rng.choice(ws.replicas[pidx]), rng.choice(brokers)
        target = next((d for d in ws.broker_disks[cold] if ws.fits(pidx, d)), None)
        if target is None or not ws.may_join(pidx, hot, cold):
            continue
        room.change(pidx, -1)
        ws.move(pidx, hot, target)
        room.change(pidx, 1)
        moved += 1
    fresh = _RackRoom(ws, loads)
    for b in brokers:
        for r in range(ws.rack_count):
            assert room.any_to(b, r) == fresh.any_to(b, r)
        assert room.rows[b] == fresh.rows[b]
        for r in range(ws.rack_count):
            if not room.any_to(b, r):
                others = [c for c in brokers if ws.rack_by_id[c] == r]
                for _w, pidx in loads.on_broker[b]:
                    assert not any(c not in ws.replicas[pidx] and ws.may_join(pidx, b, c) for c in others)
    assert moved > 100
