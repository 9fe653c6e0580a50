"""The control cycle's rate tracker takes each worker report in once and answers again without
rebuilding when nothing changed, with the same rates as taking every report in every cycle."""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any

import pytest

from strait.controller import rates as rates_module
from strait.controller.rates import RateTracker
from strait.coordination.model import PartitionKey

KEYS = [PartitionKey("r", f"t{t}", p) for t in range(3) for p in range(4)]


class Reference:
    """The tracker as it was: every report of every snapshot taken in, answers always rebuilt."""

    def __init__(self) -> None:
        self.last: dict[PartitionKey, tuple[float, float]] = {}
        self.rates: dict[PartitionKey, float] = {}

    def observe(self, stats: Mapping[str, Mapping[str, Any]]) -> None:
        for report in stats.values():
            at = float(report.get("updated", 0.0))
            for name, entry in dict(report.get("partitions", {})).items():
                key, copied = PartitionKey.parse(name), float(entry.get("bytes", 0))
                last = self.last.get(key)
                if last is not None and at > last[1] and copied >= last[0]:
                    rate = (copied - last[0]) / (at - last[1])
                    previous = self.rates.get(key)
                    self.rates[key] = rate if previous is None else 0.5 * rate + 0.5 * previous
                if last is None or at > last[1] or copied < last[0]:
                    self.last[key] = (copied, at)

    def answer(self, keys: set[PartitionKey]) -> dict[PartitionKey, float]:
        return {key: self.rates.get(key, 0.0) for key in keys}


def _history(rng: random.Random) -> list[dict[str, dict[str, Any]]]:
    """Snapshots of three workers' reports: each partition in one report at a time (a move
    resets its counter; every worker reports anew then, so no stale report still names it),
    a worker's report often the one already seen (same object, or an equal copy as read anew
    from ZooKeeper), sometimes a new one, sometimes a worker gone."""
    owner = {key: rng.choice(["w1", "w2", "w3"]) for key in KEYS}
    copied = dict.fromkeys(KEYS, 0)
    now = 100.0
    reports: dict[str, dict[str, Any]] = {}
    snapshots = []
    for _ in range(rng.randrange(5, 40)):
        now += rng.choice([0.2, 0.5, 2.0])
        moved = [key for key in KEYS if rng.random() < 0.05]
        for key in moved:
            owner[key], copied[key] = rng.choice(["w1", "w2", "w3"]), 0  # counts from 0 on its new worker
        for worker in ("w1", "w2", "w3"):
            roll = rng.random()
            if worker in reports and roll < 0.5 and not moved:
                if roll < 0.2:
                    reports[worker] = copy.deepcopy(reports[worker])
                continue
            if roll > 0.95 and not moved:
                reports.pop(worker, None)
                continue
            for key in KEYS:
                if owner[key] == worker:
                    copied[key] += rng.choice([0, 0, 100, 5000])
            reports[worker] = {
                "updated": now,
                "partitions": {str(k): {"bytes": copied[k], "records": 1} for k in KEYS if owner[k] == worker},
            }
        snapshots.append(dict(reports))
    return snapshots


@pytest.mark.parametrize("seed", range(40))
def test_the_rates_equal_those_of_taking_every_report_in_every_cycle(seed: int) -> None:
    rng = random.Random(seed)
    tracker, reference = RateTracker(), Reference()
    for snapshot in _history(rng):
        keys = set(rng.sample(KEYS, rng.randrange(1, len(KEYS))) if rng.random() < 0.3 else KEYS)
        tracker.observe(snapshot)
        reference.observe(snapshot)
        assert dict(tracker.rates(keys)) == reference.answer(keys)


def test_an_unchanged_report_is_not_taken_in_again_and_the_answer_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    original = PartitionKey.parse

    def counting(text: str) -> PartitionKey:
        parsed.append(text)
        return original(text)

    monkeypatch.setattr(rates_module.PartitionKey, "parse", counting)
    tracker = RateTracker()
    report = {"updated": 10.0, "partitions": {str(k): {"bytes": 0} for k in KEYS}}
    tracker.observe({"w1": report})
    first = tracker.rates(set(KEYS))
    assert len(parsed) == len(KEYS)
    tracker.observe({"w1": report})
    tracker.observe({"w1": copy.deepcopy(report)})  # read anew from ZooKeeper: equal, not the same
    assert len(parsed) == len(KEYS), "an unchanged report is skipped"
    assert tracker.rates(set(KEYS)) is first, "nothing changed: the same answer"
    fewer = tracker.rates(set(KEYS[:3]))
    assert fewer == dict.fromkeys(KEYS[:3], 0.0) and fewer is not first
    tracker.observe({"w1": {"updated": 12.0, "partitions": {str(k): {"bytes": 2000} for k in KEYS}}})
    assert len(parsed) == 2 * len(KEYS)
    assert tracker.rates(set(KEYS)) == dict.fromkeys(KEYS, 1000.0)
    # Same time, other partitions: not the report taken in, so taken in.
    extra = PartitionKey("r", "new", 0)
    tracker.observe({"w1": {"updated": 12.0, "partitions": {str(extra): {"bytes": 0}}}})
    assert parsed[-1] == str(extra)
