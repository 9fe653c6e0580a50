"""Properties every assignment must have; shared by the tests and the controller's own checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Hashable, Mapping
from typing import TypeVar

from strait.controller.assignment import Quota

K = TypeVar("K", bound=Hashable)


def minimal_moves(partitions: Collection[K], workers: Collection[str], current: Mapping[K, str | None]) -> int:
    """The fewest partitions that must leave a live owner for the counts to become fair."""
    live = set(workers)
    if not live:
        return 0
    quota = Quota.of(len(partitions), len(live))
    kept = Counter(w for k, w in current.items() if k in partitions and w in live)
    moves = sum(max(0, c - quota.ceil) for c in kept.values())
    if quota.extra:
        moves += max(0, sum(1 for c in kept.values() if c >= quota.ceil) - quota.extra)
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
