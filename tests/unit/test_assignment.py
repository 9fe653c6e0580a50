"""The pure assignment and hand-over functions, checked by shared invariants over many cases."""

from __future__ import annotations

import random

import pytest

from strait.controller.assignment import assign
from strait.controller.handover import plan_handover
from strait.controller.invariants import minimal_moves, violations
from strait.coordination.model import PartitionKey


def _partitions(rng: random.Random, topics: int, route: str = "r") -> dict[PartitionKey, float]:
    return {
        PartitionKey(route, f"t{t}", p): rng.choice([0.0, 10.0, 1000.0, rng.uniform(0, 5000)])
        for t in range(topics)
        for p in range(rng.randint(1, 12))
    }


def _workers(n: int) -> list[str]:
    return [f"w{i}" for i in range(n)]


def _check(
    partitions: dict[PartitionKey, float], workers: list[str], current: dict[PartitionKey, str | None]
) -> dict[PartitionKey, str]:
    result = assign(partitions, workers, current)
    assert violations(partitions, workers, current, result) == []
    return result


@pytest.mark.parametrize("seed", range(300))
def test_random_changes_keep_invariants(seed: int) -> None:
    rng = random.Random(seed)
    workers = _workers(rng.randint(1, 8))
    partitions = _partitions(rng, rng.randint(0, 10))
    mapping = _check(partitions, workers, {})
    for _ in range(6):
        change = rng.choice(["add-topic", "remove-topic", "add-worker", "kill-worker", "grow", "noop"])
        if change == "add-topic":
            partitions.update(_partitions(rng, 1, route=f"new{rng.random()}"))
        elif change == "remove-topic" and partitions:
            gone = rng.choice(sorted({k.topic for k in partitions}))
            partitions = {k: v for k, v in partitions.items() if k.topic != gone}
        elif change == "add-worker":
            workers.append(f"x{rng.random()}")
        elif change == "kill-worker" and len(workers) > 1:
            workers.remove(rng.choice(workers))
        elif change == "grow" and partitions:
            key = rng.choice(sorted(partitions))
            partitions[PartitionKey(key.route, key.topic, 100 + rng.randint(0, 50))] = 1.0
        previous: dict[PartitionKey, str | None] = dict(mapping)
        mapping = _check(partitions, workers, previous)


@pytest.mark.parametrize("seed", range(100))
def test_adding_a_topic_moves_no_existing_partition(seed: int) -> None:
    rng = random.Random(seed)
    workers = _workers(rng.randint(1, 6))
    partitions = _partitions(rng, rng.randint(1, 8))
    before = assign(partitions, workers, {})
    added = _partitions(rng, 1, route="added")
    after = _check({**partitions, **added}, workers, dict(before))
    assert {k: after[k] for k in before} == before


@pytest.mark.parametrize("seed", range(100))
def test_a_new_worker_takes_only_a_fair_share(seed: int) -> None:
    rng = random.Random(seed)
    workers = _workers(rng.randint(1, 6))
    partitions = _partitions(rng, rng.randint(1, 8))
    before = assign(partitions, workers, {})
    after = _check(partitions, [*workers, "new"], dict(before))
    moved = [k for k in partitions if after[k] != before[k]]
    assert all(after[k] == "new" for k in moved)
    assert len(moved) == len(partitions) // (len(workers) + 1)


@pytest.mark.parametrize("seed", range(100))
def test_a_dead_workers_partitions_spread_and_nothing_else_moves(seed: int) -> None:
    rng = random.Random(seed)
    workers = _workers(rng.randint(2, 6))
    partitions = _partitions(rng, rng.randint(1, 8))
    before = assign(partitions, workers, {})
    dead = rng.choice(workers)
    survivors = [w for w in workers if w != dead]
    after = _check(partitions, survivors, dict(before))
    moved_from_live = [k for k in partitions if before[k] != dead and after[k] != before[k]]
    assert len(moved_from_live) == minimal_moves(partitions, survivors, {k: w for k, w in before.items() if w != dead})


def test_heavy_partitions_spread_over_workers() -> None:
    partitions = {PartitionKey("r", "hot", p): 1000.0 for p in range(2)}
    partitions.update({PartitionKey("r", "cold", p): 1.0 for p in range(2)})
    result = assign(partitions, ["a", "b"], {})
    hot_owners = {result[PartitionKey("r", "hot", p)] for p in range(2)}
    assert hot_owners == {"a", "b"}


def test_no_workers_means_nothing_assigned() -> None:
    assert assign({PartitionKey("r", "t", 0): 1.0}, [], {}) == {}


def test_checker_catches_a_bad_assignment() -> None:
    partitions = {PartitionKey("r", "t", p): 0.0 for p in range(4)}
    lopsided = {k: "a" for k in partitions}
    assert violations(partitions, ["a", "b"], {}, lopsided)
    current = {k: ("a" if k.partition < 2 else "b") for k in partitions}
    shuffled = {k: ("b" if k.partition < 2 else "a") for k in partitions}
    assert any("moved" in p for p in violations(partitions, ["a", "b"], current, shuffled))


K0, K1 = PartitionKey("r", "t", 0), PartitionKey("r", "t", 1)


def test_handover_waits_for_the_old_owner_to_release() -> None:
    # Desired: K0 moves a -> b; a still holds it.
    plan = plan_handover({K0: "b", K1: "a"}, {K0: "a", K1: "a"}, {"a": frozenset({K0, K1}), "b": frozenset()})
    assert plan == {K0: None, K1: "a"}
    # a released it: now b gets it.
    plan = plan_handover({K0: "b", K1: "a"}, plan, {"a": frozenset({K1}), "b": frozenset()})
    assert plan == {K0: "b", K1: "a"}


def test_handover_from_a_dead_worker_is_immediate() -> None:
    plan = plan_handover({K0: "b"}, {K0: "dead"}, {"b": frozenset()})
    assert plan == {K0: "b"}


def test_handover_waits_even_before_the_old_owner_reported_holding() -> None:
    plan = plan_handover({K0: "b"}, {K0: "a"}, {"a": frozenset(), "b": frozenset()})
    assert plan == {K0: None}
