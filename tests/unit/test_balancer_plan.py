"""Plan files: round trip, and refusal of malformed or stale plans with the partition named."""

from __future__ import annotations

import json

import pytest

from strait.balancer import operations
from strait.balancer.errors import PlanError, StalePlanError
from strait.balancer.model import ClusterModel, Partition
from strait.balancer.plan import Plan, apply, validate
from strait.balancer.synthetic import Shape, generate


@pytest.fixture
def model() -> ClusterModel:
    return generate(Shape(brokers=6, dirs_per_broker=2, partitions=200, racks=3, skew=0.4, fill=0.3), 3)


def test_plan_round_trips_through_json(model: ClusterModel) -> None:
    plan = operations.rebalance(model)
    assert plan.moves
    again = Plan.from_json(plan.to_json())
    assert again.moves == plan.moves
    assert again.to_json() == plan.to_json()
    validate(again, model)


def test_model_round_trips_through_dict(model: ClusterModel) -> None:
    assert ClusterModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model


def test_stale_plan_is_refused_naming_the_partition(model: ClusterModel) -> None:
    plan = operations.rebalance(model)
    first = next(m for m in plan.moves if m.kind == "inter")
    old = model.partitions[first.key]
    changed = Partition(
        old.topic, old.partition, tuple(reversed(old.replicas)), tuple(reversed(old.dirs)), old.size, old.leader
    )
    moved = ClusterModel.build(
        model.brokers.values(),
        model.all_dirs(),
        [*(p for p in model.partitions.values() if p.key != old.key), changed],
        model.cluster_id,
    )
    with pytest.raises(StalePlanError, match=f"{old.topic}-{old.partition}"):
        validate(plan, moved)


def test_plan_already_applied_is_stale(model: ClusterModel) -> None:
    plan = operations.rebalance(model)
    with pytest.raises(StalePlanError):
        validate(plan, apply(model, plan.moves))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("moves"), "no 'moves'"),
        (lambda d: d.update(format=99), "format"),
        (lambda d: d["moves"][0].pop("bytes"), "move #0"),
        (lambda d: d["moves"][0].update(kind="teleport"), "teleport"),
        (lambda d: d["moves"][0].update(target=[1, 1, 2]), "distinct"),
        (lambda d: d["moves"].append(dict(d["moves"][0])), "twice"),
    ],
)
def test_malformed_plan_is_refused(model: ClusterModel, mutate: object, message: str) -> None:
    plan = operations.rebalance(model)
    data = json.loads(plan.to_json())
    data["moves"].sort(key=lambda m: m["kind"])  # an inter-broker move first
    assert callable(mutate)
    mutate(data)
    with pytest.raises(PlanError, match=message):
        Plan.from_dict(data)


def test_not_json_is_refused() -> None:
    with pytest.raises(PlanError, match="not valid JSON"):
        Plan.from_json("{moves: ")


def test_plan_for_another_cluster_is_refused(model: ClusterModel) -> None:
    plan = operations.rebalance(model)
    data = json.loads(plan.to_json())
    data["cluster_id"] = "someone-else"
    with pytest.raises(PlanError, match="someone-else"):
        validate(Plan.from_dict(data), model)


def test_unknown_target_dir_is_refused(model: ClusterModel) -> None:
    plan = operations.rebalance(model)
    data = json.loads(plan.to_json())
    intra = next(m for m in data["moves"] if m["kind"] == "intra")
    intra["target_dir"] = "/nowhere"
    with pytest.raises(PlanError, match="/nowhere"):
        validate(Plan.from_dict(data), model)
