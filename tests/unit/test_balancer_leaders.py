"""Preferred-leader counts after planning, against the best any leader choice allows.

With the replicas where a plan puts them, a broker can lead only partitions it holds. The best
counts are found by a reference algorithm (shift leadership along a path from a broker leading c
to one leading c - 2 or fewer, through "leads a partition the next one follows"; when no such
path is left, the highest count is as low, and the lowest as high, as any choice allows).
Without traffic no partition may be led by a broker leading two more than one of its followers,
and where any two brokers may share a partition (no rack keeps them apart) the planner must reach
exactly those extremes. Where racks keep brokers apart (two replicas, four racks) a better choice
can need a chain of hand-overs through other racks, which the planner does not search: there it
must come within two of them.
"""

from __future__ import annotations

from collections import deque

import pytest

from strait.balancer import operations
from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel
from strait.balancer.plan import apply
from strait.balancer.synthetic import Shape, generate

SHAPES = {
    "new-brokers": Shape(brokers=12, dirs_per_broker=3, partitions=1500, skew=0.3, empty_brokers=2),
    "many-brokers": Shape(brokers=30, dirs_per_broker=4, partitions=3000, skew=0.1, empty_brokers=3, fill=0.4),
    "one-rack": Shape(brokers=16, dirs_per_broker=2, partitions=1600, skew=0.5, racks=1),
    "rf2-four-racks": Shape(brokers=10, dirs_per_broker=2, partitions=900, replication=2, racks=4, skew=0.4),
}
APART = {"rf2-four-racks"}  # racks keep some brokers from sharing any partition


def counts(model: ClusterModel) -> dict[int, int]:
    """Partitions with followers led per live broker (the ones a leader choice can move)."""
    led = dict.fromkeys(model.brokers, 0)
    for p in model.partitions.values():
        if len(p.replicas) > 1:
            led[p.replicas[0]] += 1
    return led


def best_extremes(model: ClusterModel) -> tuple[int, int]:
    """(lowest, highest) leader count of the best leader choice for `model`'s replicas."""
    reps = [list(p.replicas) for p in model.partitions.values() if len(p.replicas) > 1]
    count = counts(model)
    leads: dict[int, dict[int, set[int]]] = {b: {} for b in model.brokers}
    for i, r in enumerate(reps):
        for f in r[1:]:
            leads[r[0]].setdefault(f, set()).add(i)
    while True:
        for source in sorted(count, key=lambda b: -count[b]):
            came: dict[int, int | None] = {source: None}
            queue, found = deque([source]), None
            while queue:
                x = queue.popleft()
                if count[x] <= count[source] - 2:
                    found = x
                    break
                for f, held in leads[x].items():
                    if held and f not in came:
                        came[f] = x
                        queue.append(f)
            if found is None:
                continue
            y = found
            while (x := came[y]) is not None:
                i = next(iter(leads[x][y]))
                for f in reps[i][1:]:
                    leads[x][f].discard(i)
                j = reps[i].index(y)
                reps[i][0], reps[i][j] = reps[i][j], reps[i][0]
                for f in reps[i][1:]:
                    leads[y].setdefault(f, set()).add(i)
                y = x
            count[source] -= 1
            count[found] += 1
            break
        else:
            return min(count.values()), max(count.values())


def uneven_pairs(model: ClusterModel) -> list[str]:
    """Partitions whose leader leads two or more than one of its followers."""
    led = counts(model)
    return [
        f"{p.name}: leader {p.replicas[0]} leads {led[p.replicas[0]]}, follower {f} leads {led[f]}"
        for p in model.partitions.values()
        if len(p.replicas) > 1
        for f in p.replicas[1:]
        if led[p.replicas[0]] >= led[f] + 2
    ]


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
@pytest.mark.parametrize("seed", range(3))
def test_rebalanced_leader_counts_are_as_even_as_the_replicas_allow(shape_name: str, seed: int) -> None:
    model = generate(SHAPES[shape_name], seed)
    after = apply(model, operations.rebalance(model, Goals()).moves)
    led = counts(after)
    assert uneven_pairs(after) == []
    low, high = best_extremes(after)
    if shape_name in APART:
        assert min(led.values()) >= low - 2 and max(led.values()) <= high + 2
    else:
        assert (min(led.values()), max(led.values())) == (low, high)


@pytest.mark.parametrize("seed", range(4))
def test_the_leaders_operation_reaches_the_best_counts(seed: int) -> None:
    model = generate(SHAPES["many-brokers"], seed)
    after = apply(model, operations.leaders(model).moves)
    led = counts(after)
    assert uneven_pairs(after) == []
    assert (min(led.values()), max(led.values())) == best_extremes(after)


def test_the_checks_catch_a_plan_that_leaves_leaders_alone() -> None:
    model = generate(SHAPES["new-brokers"], 1)
    after = apply(model, operations.rebalance(model, Goals(leaders=False)).moves)
    led = counts(after)
    assert uneven_pairs(after)
    assert (min(led.values()), max(led.values())) != best_extremes(after)
