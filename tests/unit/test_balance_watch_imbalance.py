"""What the watch mode finds wrong with a cluster, and the plan it proposes (`strait.balancer.imbalance`)."""

from __future__ import annotations

import dataclasses

import pytest

from strait.balancer import imbalance
from strait.balancer.errors import CapacityError
from strait.balancer.goals import Goals, eligible_dirs, spread
from strait.balancer.invariants import tier_violations, violations
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition
from strait.balancer.plan import IntraBrokerMove, apply, validate
from strait.balancer.synthetic import Shape, generate
from strait.balancer.synthetic import traffic as synthetic_traffic
from strait.balancer.tiers import DiskClasses
from strait.balancer.traffic import net_in_skew

GOALS = Goals(threshold=0.10)


def without_broker(model: ClusterModel, gone: int) -> ClusterModel:
    """`model` as the gateway loads it after broker `gone` died: still in replica lists, dirs unknown."""
    partitions = [
        dataclasses.replace(p, dirs=tuple("" if b == gone else d for b, d in zip(p.replicas, p.dirs, strict=True)))
        for p in model.partitions.values()
    ]
    brokers = [b for b in model.brokers.values() if b.id != gone]
    dirs = [d for d in model.all_dirs() if d.broker != gone]
    return ClusterModel.build(brokers, dirs, partitions, model.cluster_id)


@pytest.mark.parametrize("seed", range(6))
def test_a_balanced_cluster_has_no_reason(seed: int) -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.0), seed)
    found = imbalance.assess(model, Goals(threshold=0.5))
    assert found.balanced and found.signature == () and found.spread is not None


@pytest.mark.parametrize("seed", range(6))
def test_skewed_disks_are_found_and_the_proposal_evens_them(seed: int) -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.8), seed)
    found = imbalance.assess(model, GOALS)
    assert "disk_spread" in found.reasons and found.spread == pytest.approx(spread(eligible_dirs(model)))
    plan = imbalance.propose(model, GOALS, found)
    validate(plan, model)
    after = imbalance.assess(apply(model, plan.moves), GOALS)
    assert after.spread is not None and found.spread is not None and after.spread < found.spread
    assert plan.stats["proposed_by"] == "watch" and plan.moves


@pytest.mark.parametrize("seed", range(6))
def test_rack_violations_are_found_and_fixed(seed: int) -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=200, rack_violations=0.2), seed)
    found = imbalance.assess(model, Goals(threshold=1.0))
    assert "rack" in found.reasons and found.rack_partitions
    plan = imbalance.propose(model, Goals(threshold=1.0), found)
    assert "rack" not in imbalance.assess(apply(model, plan.moves), Goals(threshold=1.0)).reasons


@pytest.mark.parametrize("seed", range(6))
def test_a_gone_broker_is_found_and_drained(seed: int) -> None:
    full = generate(Shape(brokers=9, dirs_per_broker=2, partitions=200), seed)
    model = without_broker(full, 3)
    found = imbalance.assess(model, Goals(threshold=1.0))
    assert "broker_gone" in found.reasons and found.gone_brokers == (3,)
    assert found.under_replicated == sum(1 for p in model.partitions.values() if 3 in p.replicas) > 0
    assert "rack" not in found.reasons  # the gone broker's rack is unknown: it breaks no rack rule
    plan = imbalance.propose(model, Goals(threshold=1.0), found)
    validate(plan, model)  # what the executor checks against the live cluster
    assert all(not k.startswith("3:") for k in plan.capacities)
    after = apply(model, plan.moves)
    assert all(3 not in p.replicas for p in after.partitions.values()), plan.warnings
    assert imbalance.assess(after, Goals(threshold=1.0)).reasons == frozenset()


@pytest.mark.parametrize("seed", range(6))
def test_replicas_that_cannot_leave_a_gone_broker_keep_the_plan_valid(seed: int) -> None:
    # Broker 3's rack keeps one broker: many replicas have nowhere to go without breaking the rack rule.
    model = without_broker(generate(Shape(brokers=7, dirs_per_broker=2, partitions=200), seed), 3)
    found = imbalance.assess(model, Goals(threshold=1.0))
    plan = imbalance.propose(model, Goals(threshold=1.0), found)
    validate(plan, model)
    assert plan.stats["moves"] == len(plan.moves)
    left = [p for p in apply(model, plan.moves).partitions.values() if 3 in p.replicas]
    assert left and any("gone broker" in w or "off broker 3" in w for w in plan.warnings)


def test_an_offline_partition_is_not_moved() -> None:
    brokers = [Broker(1, "a"), Broker(2, "b")]
    dirs = [LogDir(b, "/d0", 1000, 10) for b in (1, 2)]
    # t-0 had its only replica on broker 3, which is gone; t-1 keeps a live replica on broker 1.
    parts = [Partition("t", 0, (3,), ("",), 5), Partition("t", 1, (1, 3), ("/d0", ""), 5)]
    model = ClusterModel.build(brokers, dirs, parts)
    found = imbalance.assess(model, Goals(threshold=1.0))
    plan = imbalance.propose(model, Goals(threshold=1.0), found)
    validate(plan, model)
    assert [m.key for m in plan.moves] == [("t", 1)]
    assert any("offline" in w and "t-0" in w for w in plan.warnings)


def test_a_full_disk_is_named() -> None:
    brokers = [Broker(1, "a"), Broker(2, "b")]
    dirs = [LogDir(1, "/d0", 100, 95), LogDir(1, "/d1", 100, 5), LogDir(2, "/d0", 100, 50)]
    parts = [
        Partition("t", 0, (1,), ("/d0",), 95),
        Partition("t", 1, (1,), ("/d1",), 5),
        Partition("u", 0, (2,), ("/d0",), 50),
    ]
    found = imbalance.assess(ClusterModel.build(brokers, dirs, parts), GOALS)
    assert found.reasons == {"disk_spread", "disk_full"} and found.full_dirs == ("1:/d0",)
    assert "disk_full:1:/d0" in found.signature


def test_the_signature_ignores_small_writes_but_not_a_new_reason() -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.8), 1)
    grown = ClusterModel.build(
        model.brokers.values(),
        [dataclasses.replace(d, used=d.used + 1000) for d in model.all_dirs()],
        model.partitions.values(),
    )
    assert imbalance.assess(model, GOALS).signature == imbalance.assess(grown, GOALS).signature
    assert imbalance.assess(model, GOALS).signature != imbalance.assess(without_broker(model, 2), GOALS).signature


def test_dirs_on_one_filesystem_are_not_judged_by_usage() -> None:
    brokers = [Broker(1, "a")]
    # Two dirs reporting the same filesystem (same total and free), no capacity configured.
    dirs = [LogDir(1, "/d0", 1000, 900, total=1000, free=100), LogDir(1, "/d1", 1000, 0, total=1000, free=100)]
    parts = [Partition("t", 0, (1,), ("/d0",), 900)]
    model = ClusterModel.build(brokers, dirs, parts)
    found = imbalance.assess(model, GOALS)
    assert found.balanced and found.sizes_unknown == (1,) and found.spread is None
    with pytest.raises(CapacityError):
        imbalance.propose(model, GOALS, dataclasses.replace(found, reasons=frozenset({"disk_spread"})))


@pytest.mark.parametrize("seed", range(4))
def test_proposals_with_traffic_balance_loads_and_place_hot_replicas_on_ssd(seed: int) -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=3, partitions=300, skew=0.8), seed)
    rates = synthetic_traffic(model, seed, active=0.2, skew=1.0)
    classes = DiskClasses.of({"/data/d0": "ssd", "*": "hdd"})
    found = imbalance.assess(model, GOALS)
    plan = imbalance.propose(model, GOALS, found, rates, classes)
    validate(plan, model)
    assert violations(model, plan, GOALS) == []
    assert tier_violations(model, plan, GOALS, rates, classes) == []
    before, after = plan.stats["traffic_spread_before"], plan.stats["traffic_spread_after"]
    assert after["net_in"] < before["net_in"] and after["leader_in"] < before["leader_in"], (before, after)
    # Without traffic measured the tiers are left alone: every replica would look cold.
    plain = imbalance.propose(model, GOALS, found, None, classes)
    assert plain.to_json() == imbalance.propose(model, GOALS, found).to_json()


def test_a_gone_broker_is_drained_with_traffic_and_tiers() -> None:
    full = generate(Shape(brokers=9, dirs_per_broker=3, partitions=300), 2)
    rates = synthetic_traffic(full, 2, active=0.3)
    classes = DiskClasses.of({"/data/d0": "ssd", "*": "hdd"})
    model = without_broker(full, 3)
    found = imbalance.assess(model, Goals(threshold=1.0))
    plan = imbalance.propose(model, Goals(threshold=1.0), found, rates, classes)
    validate(plan, model)
    assert all(3 not in p.replicas for p in apply(model, plan.moves).partitions.values()), plan.warnings
    assert "traffic_brokers" in plan.stats and any(isinstance(m, IntraBrokerMove) for m in plan.moves)


@pytest.mark.parametrize("seed", range(4))
def test_a_traffic_skew_alone_is_a_reason_and_the_proposal_narrows_it(seed: int) -> None:
    # Disks within a loose threshold; partitions led by low broker ids written hardest.
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.0), seed)
    rates = synthetic_traffic(model, seed, active=0.5, skew=1.0)
    goals = Goals(threshold=0.9)
    unmeasured = imbalance.assess(model, goals)
    assert unmeasured.balanced and unmeasured.traffic_spread is None  # no traffic sampled: not judged
    found = imbalance.assess(model, goals, traffic=rates, traffic_spread=0.1, traffic_floor=0)
    spread_bytes, mean = net_in_skew(model, rates)
    assert found.reasons == {"traffic_spread"} and found.signature == ("traffic_spread",)
    assert found.traffic_spread == pytest.approx(spread_bytes / mean) and found.net_in_spread == spread_bytes
    assert found.to_dict()["traffic_threshold"] == 0.1
    plan = imbalance.propose(model, goals, found, rates)
    validate(plan, model)
    after = imbalance.assess(apply(model, plan.moves), goals, traffic=rates, traffic_spread=0.1, traffic_floor=0)
    assert after.traffic_spread is not None and after.traffic_spread < found.traffic_spread


def test_a_traffic_skew_under_the_floor_or_the_threshold_is_no_reason() -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.0), 1)
    rates = synthetic_traffic(model, 1, active=0.5, skew=1.0)
    spread_bytes, mean = net_in_skew(model, rates)
    skew = spread_bytes / mean
    goals = Goals(threshold=0.9)
    assert "traffic_spread" in imbalance.assess(model, goals, traffic=rates, traffic_spread=skew * 0.9).reasons
    under_floor = imbalance.assess(model, goals, traffic=rates, traffic_spread=skew * 0.9, traffic_floor=spread_bytes)
    assert under_floor.balanced and under_floor.traffic_spread == pytest.approx(skew)
    assert imbalance.assess(model, goals, traffic=rates, traffic_spread=skew * 1.1, traffic_floor=0).balanced
    # A gone broker takes in nothing, yet is no traffic skew: only the brokers the cluster lists count.
    gone = imbalance.assess(without_broker(model, 6), goals, traffic=rates, traffic_spread=10.0)
    assert gone.reasons == {"broker_gone"}
