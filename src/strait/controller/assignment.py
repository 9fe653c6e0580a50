"""Which worker copies which partition: a pure function, no I/O.

The controller calls `assign_pools` on every cycle with what it knows now. The function keeps
every partition where it is unless keeping it would break a rule, so:

- adding a topic moves no existing partition (new partitions fill the free slots);
- adding a worker moves only about a fair share of partitions to it;
- a dead or draining worker's partitions spread over the others, nothing else moves.

Workers belong to one pool each, and a route may be limited to some pools. The decision is
made in two stages:

1. Which pool each partition goes to. A partition stays in the pool of its live owner when that
   pool is allowed; the others (new partitions, a dead worker's) go to the allowed pool whose
   workers have the fewest partitions each. Pools are then levelled: while some worker of pool p
   would own two or more partitions more than some worker of pool q, and p holds a partition
   that may run on q, one such partition moves (a partition not placed yet first, else one of
   the fullest worker of p). A route none of whose pools has a live worker is left unassigned
   and reported (`Placement.stranded`), never placed in another pool.
2. Which worker of the pool: `assign`, inside each pool. Balance is by partition count first
   (every worker of a pool within one of the pool's fair share) and by bytes/s second:
   partitions that must be placed go, heaviest first, to the least-loaded worker with a free
   slot, and over-full workers shed their heaviest partitions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_POOL = "default"


@dataclass(frozen=True)
class Quota:
    """How many partitions each of `workers` workers may own: `floor`, or `floor + 1` for at most
    `extra` of them."""

    floor: int
    extra: int

    @classmethod
    def of(cls, partitions: int, workers: int) -> Quota:
        return cls(floor=partitions // workers, extra=partitions % workers)

    @property
    def ceil(self) -> int:
        return self.floor + (1 if self.extra else 0)


def ordered(keys: Iterable[K]) -> list[K]:
    """Keys in a deterministic order (their own, or their repr's when they do not compare)."""
    items = list(keys)
    try:
        return sorted(items)  # type: ignore[type-var]
    except TypeError:
        return sorted(items, key=repr)


def _heaviest_first(keys: Iterable[K], rates: Mapping[K, float]) -> list[K]:
    items = list(keys)
    try:
        return sorted(items, key=lambda k: (-rates[k], k))  # type: ignore[arg-type,return-value]
    except TypeError:
        return sorted(items, key=lambda k: (-rates[k], repr(k)))


def assign(
    partitions: Mapping[K, float],
    workers: Collection[str],
    current: Mapping[K, str | None],
) -> dict[K, str]:
    """Map every partition (with its bytes/s) to one of `workers`, moving as few as possible.

    `current` is the mapping in force; entries for unknown partitions or workers are ignored.
    Returns an empty mapping when there are no workers.
    """
    live = sorted(set(workers))
    if not live:
        return {}
    owned: dict[str, list[K]] = {w: [] for w in live}
    unplaced: list[K] = []
    for key in partitions:
        owner = current.get(key)
        if owner in owned:
            owned[owner].append(key)  # type: ignore[index]
        else:
            unplaced.append(key)
    return _balance(partitions, owned, unplaced, len(partitions))


def _balance(rates: Mapping[K, float], owned: dict[str, list[K]], unplaced: list[K], total: int) -> dict[K, str]:
    """`assign` once each of `total` partitions is with its live owner (`owned`, every worker a
    key) or in `unplaced`; `rates` has (at least) their bytes/s. `owned` and `unplaced` are
    consumed."""
    partitions = rates
    live = sorted(owned)
    quota = Quota.of(total, len(live))

    def load(worker: str) -> float:
        return sum(map(partitions.__getitem__, owned[worker]))

    def shed(worker: str, count: int) -> None:
        gone = _heaviest_first(owned[worker], partitions)[:count]
        unplaced.extend(gone)
        dropped = set(gone)
        owned[worker] = [k for k in owned[worker] if k not in dropped]

    for worker in live:
        if len(owned[worker]) > quota.ceil:
            shed(worker, len(owned[worker]) - quota.ceil)
    if quota.extra:
        at_ceil = [w for w in live if len(owned[w]) == quota.ceil]
        # Only `extra` workers may keep the extra partition: the heaviest others give one up.
        for worker in sorted(at_ceil, key=lambda w: (-load(w), w))[: max(0, len(at_ceil) - quota.extra)]:
            shed(worker, 1)

    loads = {w: load(w) for w in live}
    ceil_slots = quota.extra - sum(1 for w in live if len(owned[w]) == quota.ceil and quota.extra)

    def has_room(worker: str) -> bool:
        count = len(owned[worker])
        return count < quota.floor or (count == quota.floor and ceil_slots > 0)

    # The least-loaded worker with a free slot, from a heap with lazy deletion: a worker's entry
    # is stale once it received a partition, and a worker without room never has room again
    # (counts only grow, and so do the slots taken).
    heap = [(loads[w], len(owned[w]), w) for w in live if has_room(w)]
    heapq.heapify(heap)
    for key in _heaviest_first(unplaced, partitions):
        while True:
            load_, count, target = heapq.heappop(heap)
            if (load_, count) == (loads[target], len(owned[target])) and has_room(target):
                break
        if len(owned[target]) == quota.floor:
            ceil_slots -= 1
        owned[target].append(key)
        loads[target] += partitions[key]
        if has_room(target):
            heapq.heappush(heap, (loads[target], len(owned[target]), target))

    return {key: worker for worker, keys in owned.items() for key in keys}


@dataclass(frozen=True)
class Placement(Generic[K]):
    """The result of `assign_pools`: every partition that may run somewhere, with its worker;
    `stranded` partitions have no live worker in any pool they may use (route pools)."""

    owners: dict[K, str]
    stranded: dict[K, frozenset[str]] = field(default_factory=dict)


def _any_pool(_key: object) -> None:
    return None


def assign_pools(
    partitions: Mapping[K, float],
    workers: Mapping[str, str],
    current: Mapping[K, str | None],
    pools_of: Callable[[K], frozenset[str] | None] = _any_pool,
) -> Placement[K]:
    """Map every partition to a worker of a pool it may use, moving as few as possible.

    `workers` maps each assignable worker to its pool; `pools_of(key)` names the pools a
    partition may use (None: any). See the module documentation for the rules.
    """
    members: dict[str, list[str]] = {}
    for worker, pool in sorted(workers.items()):
        members.setdefault(pool, []).append(worker)
    size = {pool: len(ws) for pool, ws in members.items()}
    live_pools = frozenset(members)

    # A partition's class: the live pools it may use.
    classes: dict[frozenset[str] | None, frozenset[str]] = {}
    stranded: dict[K, frozenset[str]] = {}
    # Kept partitions by owner and class; partitions without a pool yet by class; those
    # given a pool by this call by class and pool.
    kept: dict[str, dict[frozenset[str], list[K]]] = {w: {} for w in workers}
    floating: dict[frozenset[str], list[K]] = {}
    placed: dict[tuple[frozenset[str], str], list[K]] = {}
    count: dict[str, int] = dict.fromkeys(members, 0)
    for key in partitions:
        allowed = pools_of(key)
        eligible = classes.get(allowed)
        if eligible is None:
            eligible = live_pools if allowed is None else live_pools & allowed
            classes[allowed] = eligible
        if not eligible:
            stranded[key] = allowed or frozenset()
            continue
        owner = current.get(key)
        owner_pool = workers.get(owner) if owner is not None else None
        if owner_pool is not None and owner_pool in eligible:
            kept[owner].setdefault(eligible, []).append(key)  # type: ignore[index]
            count[owner_pool] += 1
        else:
            floating.setdefault(eligible, []).append(key)
    holds = {w: sum(len(keys) for keys in by_class.values()) for w, by_class in kept.items()}

    def ratio(pool: str) -> tuple[float, str]:
        return (count[pool] / size[pool], pool)

    # Stage 1a: partitions without a pool go to the allowed pool with the fewest per worker;
    # the most constrained first, so that flexible ones fill around them.
    for eligible in sorted(floating, key=lambda s: (len(s), sorted(s))):
        choices = sorted(eligible)
        keys = ordered(floating[eligible])
        if len(choices) == 1:
            placed.setdefault((eligible, choices[0]), []).extend(keys)
            count[choices[0]] += len(keys)
            continue
        for key in keys:
            pool = min(choices, key=ratio)
            placed.setdefault((eligible, pool), []).append(key)
            count[pool] += 1

    # Stage 1b: level pools where a partition may run on both: no worker of one pool two or
    # more partitions above a worker of the other.
    def lowest(pool: str) -> int:
        return count[pool] // size[pool]

    def highest(pool: str) -> int:
        return -(-count[pool] // size[pool])

    holders: dict[tuple[frozenset[str], str], set[str]] = {}
    for worker, by_class in kept.items():
        for eligible, keys in by_class.items():
            if keys and len(eligible) > 1:
                holders.setdefault((eligible, workers[worker]), set()).add(worker)
    movable = sorted({s for s in classes.values() if len(s) > 1}, key=sorted)
    while movable:
        best: tuple[int, str, str, frozenset[str]] | None = None
        for eligible in movable:
            for source in sorted(eligible):
                if not placed.get((eligible, source)) and not holders.get((eligible, source)):
                    continue
                for target in sorted(eligible):
                    gap = highest(source) - lowest(target)
                    if target != source and gap >= 2 and (best is None or gap > best[0]):
                        best = (gap, source, target, eligible)
        if best is None:
            break
        _, source, target, eligible = best
        waiting = placed.get((eligible, source))
        if waiting:
            key = waiting.pop()
        else:
            # From the fullest worker of the pool, so that the pool stays level by itself.
            candidates = holders[(eligible, source)]
            owner = max(candidates, key=lambda w: (holds[w], w))
            key = kept[owner][eligible].pop()
            holds[owner] -= 1
            if not kept[owner][eligible]:
                candidates.discard(owner)
        placed.setdefault((eligible, target), []).append(key)
        count[source] -= 1
        count[target] += 1

    # Stage 2: inside each pool.
    owners: dict[K, str] = {}
    for pool, pool_workers in members.items():
        owned: dict[str, list[K]] = {
            w: kept[w].popitem()[1] if len(kept[w]) == 1 else [k for keys in kept[w].values() for k in keys]
            for w in pool_workers
        }
        unplaced = [k for (_, p), keys in placed.items() if p == pool for k in keys]
        total = sum(map(len, owned.values())) + len(unplaced)
        owners.update(_balance(partitions, owned, unplaced, total))
    return Placement(owners=owners, stranded=stranded)
