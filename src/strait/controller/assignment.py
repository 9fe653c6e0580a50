"""Which worker copies which partition: a pure function, no I/O.

The controller calls `assign` on every cycle with what it knows now. The function keeps every
partition where it is unless keeping it would break the balance, so:

- adding a topic moves no existing partition (new partitions fill the free slots);
- adding a worker moves only about a fair share of partitions to it;
- a dead or draining worker's partitions spread over the others, nothing else moves.

Balance is by partition count first (every worker within one of the fair share) and by bytes/s
second: partitions that must be placed go, heaviest first, to the least-loaded worker with a
free slot, and over-full workers shed their heaviest partitions.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


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
    quota = Quota.of(len(partitions), len(live))
    owned: dict[str, list[K]] = {w: [] for w in live}
    unplaced: list[K] = []
    for key in sorted(partitions, key=repr):
        owner = current.get(key)
        if owner in owned:
            owned[owner].append(key)  # type: ignore[index]
        else:
            unplaced.append(key)

    def rate(key: K) -> float:
        return partitions[key]

    def load(worker: str) -> float:
        return sum(rate(k) for k in owned[worker])

    def shed(worker: str, count: int) -> None:
        heaviest_first = sorted(owned[worker], key=lambda k: (-rate(k), repr(k)))
        for key in heaviest_first[:count]:
            owned[worker].remove(key)
            unplaced.append(key)

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
    for key in sorted(unplaced, key=lambda k: (-rate(k), repr(k))):
        candidates = [
            w for w in live if len(owned[w]) < quota.floor or (len(owned[w]) == quota.floor and ceil_slots > 0)
        ]
        target = min(candidates, key=lambda w: (loads[w], len(owned[w]), w))
        if len(owned[target]) == quota.floor:
            ceil_slots -= 1
        owned[target].append(key)
        loads[target] += rate(key)

    return {key: worker for worker, keys in owned.items() for key in keys}
