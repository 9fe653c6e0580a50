"""Assignment at scale: how long the controller takes to decide after a worker dies or joins.

No cluster: the pure `assign_pools` and the invariant checker the controller runs on every
cycle, on a generated fleet (default 100,000 partitions, 500 workers in 5 pools). Routes: most
partitions on a route that may use every pool, the rest on routes limited to one pool each
(priority routes), with skewed bytes/s. For each repeat: one worker dies (a different one each
time), then one joins a pool; measured are the wall and CPU time of `assign_pools`, of the
checker, and the partitions moved against what had to move (the dead worker's; the new
worker's share).

Run: `strait bench assignment [--partitions 100000] [--workers 500] [--pools 5] [--repeats 5]`.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strait.controller.assignment import Placement, assign_pools
from strait.controller.invariants import pool_violations
from strait.coordination.model import PartitionKey

GOAL_S = 1.0


@dataclass(frozen=True)
class Fleet:
    partitions: dict[PartitionKey, float]
    workers: dict[str, str]
    route_pools: dict[str, frozenset[str] | None]

    def pools_of(self, key: PartitionKey) -> frozenset[str] | None:
        return self.route_pools.get(key.route)


def generate(partitions: int, workers: int, pools: int, seed: int = 1, pinned_share: float = 0.2) -> Fleet:
    """A fleet: `pools` pools of equal size; a `pinned_share` of partitions on routes limited to
    one pool each (pools 1..n-1), the rest on a route that may use any pool; 100 partitions a
    topic; bytes/s log-uniform between 1 KB/s and 10 MB/s."""
    rng = random.Random(seed)
    names = [f"pool{p}" for p in range(pools)]
    route_pools: dict[str, frozenset[str] | None] = {"shared": None}
    for name in names[1:]:
        route_pools[f"only-{name}"] = frozenset({name})
    pinned_routes = [r for r in route_pools if r != "shared"]
    keys: dict[PartitionKey, float] = {}
    topic = 0
    while len(keys) < partitions:
        route = rng.choice(pinned_routes) if pinned_routes and rng.random() < pinned_share else "shared"
        for p in range(min(100, partitions - len(keys))):
            keys[PartitionKey(route, f"topic-{topic:05d}", p)] = 10 ** rng.uniform(3, 7)
        topic += 1
    fleet_workers = {f"worker-{w:04d}": names[w % pools] for w in range(workers)}
    return Fleet(keys, fleet_workers, route_pools)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _step(fleet: Fleet, workers: dict[str, str], current: dict[PartitionKey, str]) -> dict[str, Any]:
    placement: Placement[PartitionKey]
    placement, wall, cpu = _timed(lambda: assign_pools(fleet.partitions, workers, current, fleet.pools_of))
    problems, check_s, _ = _timed(
        lambda: pool_violations(fleet.partitions, workers, current, placement.owners, fleet.pools_of)
    )
    moved = sum(1 for k, w in placement.owners.items() if current.get(k) != w)
    return {
        "owners": placement.owners,
        "assign_s": wall,
        "assign_cpu_s": cpu,
        "check_s": check_s,
        "moved": moved,
        "violations": problems,
    }


def run(
    partitions: int = 100_000,
    workers: int = 500,
    pools: int = 5,
    repeats: int = 5,
    seed: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every figure of the scenario, JSON-ready."""
    fleet = generate(partitions, workers, pools, seed)
    load_before = list(os.getloadavg())
    first = _step(fleet, fleet.workers, {})
    log(f"first assignment of {partitions:,} partitions: {first['assign_s']:.2f} s")
    settled = _step(fleet, fleet.workers, first["owners"])
    current: dict[PartitionKey, str] = settled["owners"]
    rng = random.Random(seed)
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        dead = rng.choice(sorted(fleet.workers))
        survivors = {w: p for w, p in fleet.workers.items() if w != dead}
        death = _step(fleet, survivors, current)
        owned_by_dead = sum(1 for w in current.values() if w == dead)
        # Partitions of the dead worker that may only run in its pool: they may push its pool-mates
        # above other pools' workers, and as many others at most may then leave to level it.
        pinned = sum(
            1 for k, w in current.items() if w == dead and fleet.pools_of(k) == frozenset({fleet.workers[dead]})
        )
        moved_others = sum(1 for k, w in death["owners"].items() if w != current.get(k) and current.get(k) != dead)
        new = f"joiner-{repeat}"
        pool = fleet.workers[dead]
        joined = {**fleet.workers, new: pool}
        join = _step(fleet, joined, current)
        counts = Counter(join["owners"].values())
        mates = [w for w, p in joined.items() if p == pool]
        row = {
            "dead": dead,
            "pool": pool,
            "death_assign_s": death["assign_s"],
            "death_assign_cpu_s": death["assign_cpu_s"],
            "death_check_s": death["check_s"],
            "death_moved": death["moved"],
            "dead_owned": owned_by_dead,
            "dead_pinned": pinned,
            "death_moved_others": moved_others,
            "join_assign_s": join["assign_s"],
            "join_assign_cpu_s": join["assign_cpu_s"],
            "join_check_s": join["check_s"],
            "join_moved": join["moved"],
            "new_worker_owns": counts[new],
            "pool_fair_share": sum(counts[w] for w in mates) / len(mates),
            "violations": death["violations"] + join["violations"],
        }
        runs.append(row)
        log(
            f"repeat {repeat + 1}: death of {dead} ({pool}, owned {owned_by_dead}): {death['assign_s']:.3f} s, "
            f"moved {death['moved']} ({moved_others} not its own); join of {new}: {join['assign_s']:.3f} s, "
            f"moved {join['moved']}, it owns {counts[new]} (fair share in its pool "
            f"{row['pool_fair_share']:.1f}); checker {death['check_s']:.3f} / {join['check_s']:.3f} s"
        )

    def summary(field: str) -> dict[str, float]:
        values = [r[field] for r in runs]
        return {"median": statistics.median(values), "max": max(values)}

    return {
        "scenario": "assignment",
        "parameters": {"partitions": partitions, "workers": workers, "pools": pools, "repeats": repeats, "seed": seed},
        "routes": {r: sorted(p) if p else None for r, p in fleet.route_pools.items()},
        "partitions_per_route": dict(sorted(Counter(k.route for k in fleet.partitions).items())),
        "first_assign_s": first["assign_s"],
        "steady_cycle_s": settled["assign_s"],
        "steady_cycle_moved": settled["moved"],
        "death_assign_s": summary("death_assign_s"),
        "join_assign_s": summary("join_assign_s"),
        "check_s": summary("death_check_s"),
        "goal_s": GOAL_S,
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "runs": runs,
        "violations": sum(len(r["violations"]) for r in runs) + len(first["violations"]) + len(settled["violations"]),
    }
