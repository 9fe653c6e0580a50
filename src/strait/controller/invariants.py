"""Properties every assignment must have; shared by the tests and the controller's own checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import TypeVar

from strait.controller.assignment import Quota

K = TypeVar("K", bound=Hashable)


def minimal_moves(partitions: Collection[K], workers: Collection[str], current: Mapping[K, str | None]) -> int:
    """The fewest partitions that must leave a live owner for the counts to become fair."""
    live = set(workers)
    if not live:
        return 0
    kept = Counter(w for k, w in current.items() if k in partitions and w in live)
    return _fewest_moves(len(partitions), len(live), kept.values())


def _fewest_moves(partitions: int, workers: int, kept: Iterable[int]) -> int:
    """`minimal_moves` from the number of partitions each worker keeps (workers keeping none may
    be left out)."""
    quota = Quota.of(partitions, workers)
    counts = list(kept)
    moves = sum(max(0, c - quota.ceil) for c in counts)
    if quota.extra:
        moves += max(0, sum(1 for c in counts if c >= quota.ceil) - quota.extra)
    return moves


def violations(
    partitions: Collection[K],
    workers: Collection[str],
    current: Mapping[K, str | None],
    result: Mapping[K, str],
) -> list[str]:
    """Everything wrong with `result` as an assignment of `partitions` to `workers` from `current`."""
    problems: list[str] = []
    live = set(workers)
    if not live:
        return [f"{len(result)} partitions assigned with no workers"] if result else []
    missing = [k for k in partitions if k not in result]
    if missing:
        problems.append(f"{len(missing)} partitions have no owner, e.g. {missing[0]!r}")
    extra = [k for k in result if k not in partitions]
    if extra:
        problems.append(f"{len(extra)} unknown partitions assigned, e.g. {extra[0]!r}")
    dead = sorted({w for w in result.values() if w not in live})
    if dead:
        problems.append(f"partitions assigned to workers that are not live: {dead}")
    quota = Quota.of(len(partitions), len(live))
    counts = Counter(result.values())
    unfair = {w: counts.get(w, 0) for w in live if not quota.floor <= counts.get(w, 0) <= quota.ceil}
    if unfair:
        problems.append(f"counts outside [{quota.floor}, {quota.ceil}]: {unfair}")
    moved = sum(1 for k in partitions if current.get(k) in live and result.get(k) != current.get(k))
    needed = minimal_moves(partitions, live, current)
    if moved > needed:
        problems.append(f"moved {moved} partitions where {needed} would do")
    return problems


def pool_violations(
    partitions: Collection[K],
    workers: Mapping[str, str],
    current: Mapping[K, str | None],
    result: Mapping[K, str],
    pools_of: Callable[[K], frozenset[str] | None] = lambda _key: None,
) -> list[str]:
    """Everything wrong with `result` as a pool-aware assignment (see `assign_pools`).

    `workers` maps each assignable worker to its pool, `pools_of` names a partition's pools
    (None: any). Checked: a partition is assigned exactly when one of its pools has a live
    worker, only to a worker of one of its pools; each pool's workers are within one of the
    pool's fair share; no worker of one pool holds two or more partitions more than a worker of
    another pool that one of its partitions may use; and inside a pool no more partitions moved
    than the pool's balance needs. One pass over the partitions (the controller runs it on every
    cycle).
    """
    problems: list[str] = []
    live_pools = frozenset(workers.values())
    members: dict[str, list[str]] = {}
    for worker, pool in workers.items():
        members.setdefault(pool, []).append(worker)
    classes: dict[frozenset[str] | None, frozenset[str]] = {}
    missing: list[K] = []
    stranded: list[K] = []
    outside: list[K] = []
    dead: set[str] = set()
    unique = isinstance(partitions, set | frozenset | dict)
    known = partitions if unique else set(partitions)
    seen: set[K] = set()  # only when `partitions` may repeat a key: each counts once per pool
    # Per pool: how many partitions it owns, and per worker of the pool how many of its
    # partitions it keeps from `current` (computed here, in the one pass, for the move check).
    in_pool: dict[str, int] = dict.fromkeys(members, 0)
    kept: dict[str, int] = {}
    moved: dict[str, int] = dict.fromkeys(members, 0)
    # Per pool, each class (the live pools a partition may use) found in it, with an example.
    found: dict[str, dict[frozenset[str], K]] = {pool: {} for pool in members}
    for key in partitions:
        allowed = pools_of(key)
        usable = classes.get(allowed)
        if usable is None:
            usable = classes[allowed] = live_pools if allowed is None else live_pools & allowed
        owner = result.get(key)
        if owner is None:
            if usable:
                missing.append(key)
            continue
        if not usable:
            stranded.append(key)
        owner_pool = workers.get(owner)
        if owner_pool is None:
            dead.add(owner)
            continue
        if owner_pool not in usable:
            outside.append(key)
        found[owner_pool].setdefault(usable, key)
        if not unique:
            if key in seen:
                continue
            seen.add(key)
        in_pool[owner_pool] += 1
        previous = current.get(key)
        if previous is not None and workers.get(previous) == owner_pool:
            kept[previous] = kept.get(previous, 0) + 1
            if previous != owner:
                moved[owner_pool] += 1
    if missing:
        problems.append(f"{len(missing)} partitions have no owner, e.g. {missing[0]!r}")
    if stranded:
        problems.append(f"{len(stranded)} partitions without a live pool were assigned, e.g. {stranded[0]!r}")
    extra = [k for k in result if k not in known]
    if extra:
        problems.append(f"{len(extra)} unknown partitions assigned, e.g. {extra[0]!r}")
    if dead:
        problems.append(f"partitions assigned to workers that are not live: {sorted(dead)}")
    if outside:
        key = outside[0]
        problems.append(
            f"{len(outside)} partitions on a worker outside their pools, e.g. {key!r} on {result[key]} "
            f"(pool {workers[result[key]]}, allowed {sorted(pools_of(key) or ['any'])})"
        )
    counts = Counter(result.values())
    for pool, pool_workers in sorted(members.items()):
        quota = Quota.of(in_pool[pool], len(pool_workers))
        unfair = {w: counts.get(w, 0) for w in pool_workers if not quota.floor <= counts.get(w, 0) <= quota.ceil}
        if unfair:
            problems.append(f"pool {pool}: counts outside [{quota.floor}, {quota.ceil}]: {unfair}")
        needed = _fewest_moves(in_pool[pool], len(pool_workers), (kept.get(w, 0) for w in pool_workers))
        if moved[pool] > needed:
            problems.append(f"pool {pool}: moved {moved[pool]} partitions where {needed} would do")
    most = {p: max(counts.get(w, 0) for w in ws) for p, ws in members.items()}
    least = {p: min(counts.get(w, 0) for w in ws) for p, ws in members.items()}
    for pool in sorted(found):
        example: dict[str, K] = {}
        for usable, key in found[pool].items():
            for other in usable - {pool}:
                example.setdefault(other, key)
        for other, key in sorted(example.items()):
            if most[pool] - least[other] >= 2:
                problems.append(
                    f"pools not level: a worker of {pool} owns {most[pool]}, one of {other} owns "
                    f"{least[other]}, and {key!r} could run on either"
                )
    return problems
