"""Worker pools: the pool-aware assignment, checked by shared invariants over many generated cases.

Each case draws pools, workers in them and routes limited to some pools (or none), then applies
random deaths, joins and topic changes; every result must pass `pool_violations` (pool
constraint, balance inside each pool, pools level where a partition may use both, no needless
move inside a pool), and deaths and joins must move only what they have to.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strait.controller.assignment import Quota, assign_pools
from strait.controller.invariants import pool_violations
from strait.coordination.model import PartitionKey

POOLS = ["default", "vip", "batch", "eu"]


class Case:
    """Routes with their pools, partitions with their rates, workers with their pool."""

    def __init__(self, rng: random.Random, *, single_pool_routes: bool = False) -> None:
        self.rng = rng
        self.single = single_pool_routes
        pools = POOLS[: rng.randint(1, len(POOLS))]
        self.pools = pools
        self.routes: dict[str, frozenset[str] | None] = {}
        for r in range(rng.randint(1, 4)):
            self.routes[f"r{r}"] = self._route_pools()
        self.partitions: dict[PartitionKey, float] = {}
        for _ in range(rng.randint(0, 8)):
            self.add_topic()
        self.workers: dict[str, str] = {}
        for _ in range(rng.randint(0, 10)):
            self.add_worker()

    def _route_pools(self) -> frozenset[str] | None:
        if self.rng.random() < 0.4:
            return None
        if self.single:
            return frozenset({self.rng.choice(self.pools)})
        # Sometimes a pool no worker is in: its routes wait, reported.
        return frozenset(self.rng.sample([*self.pools, "empty"], self.rng.randint(1, 2)))

    def pools_of(self, key: PartitionKey) -> frozenset[str] | None:
        return self.routes.get(key.route)

    def add_topic(self) -> None:
        route = self.rng.choice(sorted(self.routes))
        topic = f"t{self.rng.randrange(10**6)}"
        for p in range(self.rng.randint(1, 12)):
            self.partitions[PartitionKey(route, topic, p)] = self.rng.choice([0.0, 10.0, 1000.0])

    def add_worker(self, pool: str | None = None) -> str:
        worker = f"w{self.rng.randrange(10**6)}"
        self.workers[worker] = pool or self.rng.choice(self.pools)
        return worker

    def assign(self, current: dict[PartitionKey, str]) -> dict[PartitionKey, str]:
        placement = assign_pools(self.partitions, self.workers, current, self.pools_of)
        problems = pool_violations(self.partitions, self.workers, current, placement.owners, self.pools_of)
        assert problems == []
        live_pools = set(self.workers.values())
        for key in self.partitions:
            allowed = self.pools_of(key)
            usable = live_pools if allowed is None else live_pools & allowed
            assert (key in placement.stranded) == (not usable)
        return placement.owners


@pytest.mark.parametrize("seed", range(400))
def test_random_changes_keep_pool_invariants(seed: int) -> None:
    rng = random.Random(seed)
    case = Case(rng)
    mapping = case.assign({})
    for _ in range(8):
        change = rng.choice(["add-topic", "remove-topic", "join", "kill", "grow", "reroute", "noop"])
        if change == "add-topic":
            case.add_topic()
        elif change == "remove-topic" and case.partitions:
            gone = rng.choice(sorted({k.topic for k in case.partitions}))
            case.partitions = {k: v for k, v in case.partitions.items() if k.topic != gone}
        elif change == "join":
            case.add_worker()
        elif change == "kill" and case.workers:
            del case.workers[rng.choice(sorted(case.workers))]
        elif change == "grow" and case.partitions:
            key = rng.choice(sorted(case.partitions))
            case.partitions[PartitionKey(key.route, key.topic, 100 + rng.randint(0, 50))] = 1.0
        elif change == "reroute":  # the configuration changed a route's pools
            route = rng.choice(sorted(case.routes))
            case.routes[route] = case._route_pools()
        mapping = case.assign(mapping)


@pytest.mark.parametrize("seed", range(300))
def test_an_assignment_is_stable(seed: int) -> None:
    case = Case(random.Random(seed))
    first = case.assign({})
    assert case.assign(first) == first


@pytest.mark.parametrize("seed", range(500))
def test_only_the_dead_workers_partitions_move(seed: int) -> None:
    """Nothing but the dead worker's partitions moves, with one exception: when partitions of a
    route limited to its pool must stay in that pool and lift the pool's workers two above
    another pool's, flexible partitions (routes on every pool) leave that pool to level it, at
    most as many as those pinned partitions."""
    rng = random.Random(seed)
    case = Case(rng, single_pool_routes=True)
    if len(case.workers) < 2:
        case.add_worker()
        case.add_worker()
    before = case.assign({})
    dead = rng.choice(sorted(case.workers))
    pool = case.workers.pop(dead)
    after = case.assign(before)
    moved = [k for k in before if before[k] != dead and after.get(k) != before[k]]
    pinned = [k for k, w in before.items() if w == dead and case.pools_of(k) == frozenset({pool})]
    assert len(moved) <= len(pinned)
    for key in moved:
        assert case.pools_of(key) is None
        assert case.workers[before[key]] == pool and case.workers[after[key]] != pool


def test_a_dead_worker_in_a_pool_of_flexible_routes_moves_nothing_else() -> None:
    """The strict form, for routes that may use every pool (the usual case)."""
    for seed in range(200):
        rng = random.Random(seed)
        case = Case(rng)
        case.routes = dict.fromkeys(case.routes)
        if len(case.workers) < 2:
            case.add_worker()
            case.add_worker()
        before = case.assign({})
        dead = rng.choice(sorted(case.workers))
        del case.workers[dead]
        after = case.assign(before)
        assert [k for k in before if before[k] != dead and after[k] != before[k]] == []


@pytest.mark.parametrize("seed", range(500))
def test_a_new_worker_takes_about_a_fair_share(seed: int) -> None:
    """Its pool's fair share comes to it; the only other moves re-level a pool that gave it
    flexible partitions (when only some of that pool's workers held any), at most one per
    partition given."""
    rng = random.Random(seed)
    case = Case(rng, single_pool_routes=True)
    before = case.assign({})
    new = case.add_worker()
    after = case.assign(before)
    moved = [k for k in before if k in after and before[k] != after[k]]
    to_new = [k for k in moved if after[k] == new]
    for pool in set(case.workers.values()):
        gave = sum(1 for k in to_new if case.workers[before[k]] == pool and pool != case.workers[new])
        inside = [k for k in moved if after[k] != new and case.workers[before[k]] == pool]
        assert all(case.workers[after[k]] == pool for k in inside)
        assert len(inside) <= gave
    pool = case.workers[new]
    mates = [w for w, p in case.workers.items() if p == pool]
    counts = Counter(after.values())
    quota = Quota.of(sum(counts[w] for w in mates), len(mates))
    assert quota.floor <= counts[new] <= quota.ceil


def test_a_new_worker_on_flexible_routes_is_the_only_one_to_gain() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        case = Case(rng)
        case.routes = dict.fromkeys(case.routes)
        before = case.assign({})
        new = case.add_worker()
        after = case.assign(before)
        assert all(after[k] == new for k in before if after[k] != before[k])
        fair = len(case.partitions) // len(case.workers)
        assert fair <= Counter(after.values())[new] <= fair + 1


def test_a_route_whose_pools_have_no_live_worker_waits_and_is_reported() -> None:
    keys = [PartitionKey("gold", "orders", p) for p in range(4)] + [PartitionKey("bulk", "logs", p) for p in range(4)]
    partitions = dict.fromkeys(keys, 0.0)
    routes = {"gold": frozenset({"vip"}), "bulk": None}

    def pools_of(key: PartitionKey) -> frozenset[str] | None:
        return routes[key.route]

    workers = {"a": "default", "b": "default"}
    placement = assign_pools(partitions, workers, {}, pools_of)
    assert set(placement.stranded) == {k for k in keys if k.route == "gold"}
    assert set(placement.owners) == {k for k in keys if k.route == "bulk"}
    workers["v"] = "vip"
    placement = assign_pools(partitions, workers, placement.owners, pools_of)
    assert placement.stranded == {}
    assert {w for k, w in placement.owners.items() if k.route == "gold"} == {"v"}
    assert pool_violations(partitions, workers, {}, placement.owners, pools_of) == []


def test_the_checker_catches_a_partition_outside_its_pools() -> None:
    key = PartitionKey("gold", "orders", 0)
    problems = pool_violations({key}, {"a": "default", "v": "vip"}, {}, {key: "a"}, lambda k: frozenset({"vip"}))
    assert any("outside their pools" in p for p in problems)


def test_pools_level_where_a_route_may_use_both() -> None:
    partitions = {PartitionKey("r", "t", p): 0.0 for p in range(30)}
    workers = {"a": "default", "b": "default", "v": "vip"}
    owners = assign_pools(partitions, workers, {}).owners
    assert sorted(Counter(owners.values()).values()) == [10, 10, 10]
    lopsided = {k: ("a" if k.partition < 15 else "b") for k in partitions}
    assert any("not level" in p for p in pool_violations(partitions, workers, {}, lopsided))


def test_the_checker_catches_a_borrowed_pool_a_needless_move_and_a_missing_owner() -> None:
    gold = PartitionKey("gold", "orders", 0)
    bulk = {PartitionKey("bulk", "logs", p) for p in range(4)}
    routes = {"gold": frozenset({"vip"}), "bulk": None}
    workers = {"a": "default", "b": "default"}

    def pools_of(key: PartitionKey) -> frozenset[str] | None:
        return routes[key.route]

    current = {k: ("a" if k.partition < 2 else "b") for k in bulk}
    borrowed = {**current, gold: "a"}  # no vip worker: gold must wait, not run on a
    assert any("without a live pool" in p for p in pool_violations({gold, *bulk}, workers, current, borrowed, pools_of))
    swapped = {k: ("b" if w == "a" else "a") for k, w in current.items()}
    assert any("moved 4" in p for p in pool_violations(bulk, workers, current, swapped, pools_of))
    partial = {k: w for k, w in current.items() if k.partition}
    assert any("no owner" in p for p in pool_violations(bulk, workers, current, partial, pools_of))
