"""The control cycle places partitions again only when the placement's inputs changed.

`assign_pools` and its invariant check are pure: the cycle reuses the last answer for the same
partitions, pools and current owners, and for other rates too when that answer kept every
partition where it was (rates only choose which partitions move or are placed). The second
claim is checked here over generated cases against `assign_pools` itself."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from strait.controller import loop
from strait.controller.assignment import assign_pools
from tests.unit.test_assignment_cycle import MemoryStore, _add, _controller


def _case(rng: random.Random) -> tuple[dict[str, str], list[tuple[str, int]], Callable[[Any], frozenset[str] | None]]:
    pools = {f"w{i}": rng.choice(["a", "b", "c"]) for i in range(rng.randrange(1, 8))}
    partitions = [(rng.choice(["r1", "r2", "r3"]), p) for p in range(rng.randrange(1, 300))]
    allowed = {
        route: rng.choice([None, frozenset({"a"}), frozenset({"a", "b"}), frozenset({"b", "c"})])
        for route in ("r1", "r2", "r3")
    }
    return pools, partitions, lambda key: allowed[key[0]]


def _rates(rng: random.Random, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], float]:
    return {key: rng.choice([0.0, 0.0, rng.random() * 1e6]) for key in partitions}


@pytest.mark.parametrize("seed", range(60))
def test_a_placement_that_keeps_every_partition_is_the_same_whatever_the_rates(seed: int) -> None:
    rng = random.Random(seed)
    pools, partitions, pools_of = _case(rng)
    workers = [*pools, "gone"]
    current: dict[tuple[str, int], str | None] = {k: rng.choice([*workers, None]) for k in partitions}
    settled = 0
    for _ in range(4):  # a few rounds from an arbitrary start: placements settle
        placement = assign_pools(_rates(rng, partitions), pools, current, pools_of)
        if all(current.get(k) == w for k, w in placement.owners.items()):
            settled += 1
            for _ in range(3):
                again = assign_pools(_rates(rng, partitions), pools, current, pools_of)
                assert again.owners == placement.owners and again.stranded == placement.stranded
        current = {k: placement.owners.get(k) for k in partitions}
    assert settled, "a placement fed back as the current owners keeps them"


def test_the_cycle_places_again_only_when_its_inputs_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = loop.assign_pools

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "assign_pools", counting)
    store = MemoryStore()
    controller = _controller(store)
    store.join("w1")
    _add(store, "t", 4)
    controller.cycle()
    store.hold_what_is_assigned()
    controller.cycle()  # the workers now hold what was written: current owners unchanged
    placed = len(calls)
    controller.cycle()
    controller.cycle()
    assert len(calls) == placed, "same partitions, pools and owners: the last placement"

    store.join("w2")  # a new worker: placed again, and the move it brings goes through
    assert controller.cycle() is True
    assert len(calls) == placed + 1
    store.hold_what_is_assigned()
    assert controller.cycle() is False
    assert sorted(store.owners().values()) == ["w1", "w1", "w2", "w2"]
    _add(store, "u", 2)  # new partitions: placed again
    before = len(calls)
    controller.cycle()
    assert len(calls) > before
    assert sum(1 for w in store.owners().values() if w is not None) == 6
