"""Stuck-partition detection, the healing policy and `steer`, over many generated cases."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from strait.controller.handover import plan_handover
from strait.coordination.model import PartitionKey
from strait.metrics import healing, progress
from strait.metrics.healing import Healing, HealingPolicy, heal, steer
from strait.metrics.progress import Observation
from strait.metrics.slow import Throughput, find_slow_workers

T0 = 1_000_000.0
POLICY = HealingPolicy(stuck_after_s=10, max_moves=2, cooldown_s=100)


def key(partition: int, topic: str = "t") -> PartitionKey:
    return PartitionKey("r", topic, partition)


# --- detection ---------------------------------------------------------------------------


def run_detector(
    rounds: list[dict[PartitionKey, Observation]], step_s: float = 1.0
) -> dict[PartitionKey, progress.Progress]:
    memory: dict[PartitionKey, progress.Progress] = {}
    now = T0
    for observed in rounds:
        memory = progress.advance(memory, observed, now)
        now += step_s
    return progress.stuck(memory, now - step_s, stuck_after_s=10)


def test_a_lagging_partition_whose_checkpoint_stands_still_is_stuck_after_the_threshold() -> None:
    frozen = [{key(0): Observation(checkpoint=5, end=20 + i, owner="w1")} for i in range(12)]
    assert list(run_detector(frozen)) == [key(0)]
    assert run_detector(frozen[:10]) == {}  # 9 s: not yet


@pytest.mark.parametrize(
    "observation",
    [
        lambda i: Observation(checkpoint=5 + i, end=100, owner="w1"),  # the checkpoint moves
        lambda i: Observation(checkpoint=20, end=20, owner="w1"),  # caught up: no lag
        lambda i: Observation(checkpoint=5, end=20, owner=None),  # unowned: waiting for a hand-over
        lambda i: Observation(checkpoint=5, end=20, owner=f"w{i % 2}"),  # owner changed each round
    ],
)
def test_progress_idleness_or_a_new_owner_is_never_stuck(observation: Callable[[int], Observation]) -> None:
    assert run_detector([{key(0): observation(i)} for i in range(30)]) == {}


def test_a_checkpoint_that_never_existed_counts_from_zero() -> None:
    assert Observation(checkpoint=None, end=7, owner="w").lag == 7
    assert Observation(checkpoint=None, end=None, owner="w").lag is None


# --- the healing policy ------------------------------------------------------------------


def test_a_stuck_partition_moves_away_from_its_worker_then_is_flagged_after_bounded_retries() -> None:
    records: dict[PartitionKey, Healing] = {}
    owners = ["w1", "w2", "w3", "w1"]
    moved_from: list[str] = []
    flagged: list[PartitionKey] = []
    now = T0
    for owner in owners:
        decision = heal(records, {key(0): owner}, ["w1", "w2", "w3"], now, POLICY)
        records = decision.records
        moved_from += list(decision.moved.values())
        flagged += list(decision.flagged)
        now += POLICY.stuck_after_s  # the new owner gets a full period before it is judged
    assert moved_from == ["w1", "w2"]  # max_moves = 2
    assert flagged == [key(0)]
    assert "after 2 moves" in (records[key(0)].flagged or "")
    assert records[key(0)].avoid == {"w1", "w2"}


def test_a_partition_is_not_moved_twice_within_one_period() -> None:
    first = heal({}, {key(0): "w1"}, ["w1", "w2", "w3"], T0, POLICY)
    again = heal(first.records, {key(0): "w1"}, ["w1", "w2", "w3"], T0 + 2, POLICY)
    assert first.moved == {key(0): "w1"} and again.moved == {} and again.flagged == {}


def test_with_no_other_worker_the_partition_is_flagged_at_once() -> None:
    decision = heal({}, {key(0): "w1"}, ["w1"], T0, POLICY)
    assert decision.moved == {} and "no other worker" in decision.flagged[key(0)]


def test_healthy_partitions_are_forgotten_after_the_cooldown_and_avoidance_expires() -> None:
    records = heal({}, {key(0): "w1"}, ["w1", "w2"], T0, POLICY).records
    assert healing.avoided(records, T0 + 1, POLICY) == {key(0): frozenset({"w1"})}
    records = heal(records, {}, ["w1", "w2"], T0 + 50, POLICY).records
    assert key(0) in records
    assert healing.avoided(records, T0 + 100, POLICY) == {}
    assert heal(records, {}, ["w1", "w2"], T0 + 150, POLICY).records == {}


def test_a_flag_clears_when_the_partition_recovers() -> None:
    records = heal({}, {key(0): "w1"}, ["w1"], T0, POLICY).records
    assert records[key(0)].flagged
    records = heal(records, {}, ["w1"], T0 + 5, POLICY).records
    assert records[key(0)].flagged is None


# --- steer: invariants over generated cases ----------------------------------------------


def check_steer(seed: int) -> None:
    rng = random.Random(seed)
    workers = [f"w{i}" for i in range(rng.randint(1, 5))]
    keys = [key(p, rng.choice("ab")) for p in range(rng.randint(0, 30))]
    keys = list(dict.fromkeys(keys))
    desired = {k: rng.choice(workers) for k in keys}
    written: dict[PartitionKey, str | None] = {k: rng.choice([*workers, None]) for k in keys}
    holding = {w: frozenset(k for k in keys if written[k] == w and rng.random() < 0.8) for w in workers}
    avoid = {k: frozenset(rng.sample(workers, rng.randint(1, len(workers)))) for k in keys if rng.random() < 0.3}
    hung = set(rng.sample(workers, rng.randint(0, len(workers) - 1)))

    new_desired, new_written, new_holding = steer(desired, written, holding, avoid, workers, hung)

    assert set(new_desired) == set(desired), "every partition keeps exactly one desired owner"
    for k, owner in new_desired.items():
        assert owner in workers
        eligible = [w for w in workers if w not in avoid.get(k, frozenset()) and w not in hung]
        if owner != desired[k]:
            assert owner in eligible, "a partition is only steered to an eligible worker"
        if owner in avoid.get(k, frozenset()):
            assert not eligible, "an avoided worker keeps a partition only when nobody else may take it"
        if owner in hung and written.get(k) != owner and eligible:
            raise AssertionError("a hung worker got a partition it did not have")
    for k, w in new_written.items():
        assert w is None or w not in avoid.get(k, frozenset()), "an avoided owner's claim is void"
    for w, ks in new_holding.items():
        assert ks <= holding[w]
        assert all(w not in avoid.get(k, frozenset()) for k in ks)


@pytest.mark.parametrize("seed", range(300))
def test_steer_invariants(seed: int) -> None:
    check_steer(seed)


def test_steer_leaves_everything_alone_without_avoidance_or_hung_workers() -> None:
    desired = {key(0): "w1", key(1): "w2"}
    written: dict[PartitionKey, str | None] = {key(0): "w1", key(1): None}
    holding = {"w1": frozenset({key(0)}), "w2": frozenset()}
    assert steer(desired, written, holding, {}, ["w1", "w2"]) == (desired, written, holding)


def test_a_stuck_partition_goes_to_the_least_loaded_eligible_worker_at_once() -> None:
    desired = {key(0): "w1", key(1): "w2", key(2): "w2", key(3): "w3"}
    written: dict[PartitionKey, str | None] = dict(desired)
    holding = {w: frozenset(k for k, o in desired.items() if o == w) for w in ("w1", "w2", "w3")}
    avoid = {key(0): frozenset({"w1"})}
    new_desired, new_written, new_holding = steer(desired, written, holding, avoid, ["w1", "w2", "w3"])
    assert new_desired[key(0)] == "w3"
    assert new_written[key(0)] is None and key(0) not in new_holding["w1"]


# --- slow workers ------------------------------------------------------------------------


def test_a_worker_far_below_its_peers_per_backlogged_partition_is_slow() -> None:
    slow = find_slow_workers(
        {
            "fast1": Throughput(bytes_per_s=1000, backlogged=2),
            "fast2": Throughput(bytes_per_s=1500, backlogged=3),
            "slow": Throughput(bytes_per_s=100, backlogged=2),
            "idle": Throughput(bytes_per_s=0, backlogged=0),  # nothing to do is not slow
        }
    )
    assert [s.worker for s in slow] == ["slow"]
    assert slow[0].per_partition == 50 and slow[0].peers_median == 500


def test_a_lone_worker_is_never_slow() -> None:
    assert find_slow_workers({"w": Throughput(1, 5)}) == []


def test_a_stuck_exactly_once_partition_on_a_live_worker_is_handed_over_cleanly() -> None:
    """Exactly-once partitions (``clean``) keep the avoided worker's claim while it still reports,
    so the hand-over unassigns first and waits for its release; a hung worker's claim, and any
    claim of an at-least-once partition, are dropped so the new owner starts at once."""
    eos, alo = "eos/t/0", "alo/t/0"
    desired = {eos: "w1", alo: "w1"}
    written: dict[str, str | None] = {eos: "w1", alo: "w1"}
    holding = {"w1": frozenset({eos, alo}), "w2": frozenset[str]()}
    avoid = {eos: frozenset({"w1"}), alo: frozenset({"w1"})}

    def clean(key: str) -> bool:
        return key.startswith("eos/")

    new_desired, new_written, new_holding = steer(desired, written, holding, avoid, ["w1", "w2"], clean=clean)
    assert new_desired == {eos: "w2", alo: "w2"}
    assert new_written == {eos: "w1", alo: None}
    assert new_holding["w1"] == frozenset({eos})
    # Planned from these, the exactly-once partition is first unassigned, not given to w2.
    assert plan_handover(new_desired, new_written, new_holding) == {eos: None, alo: "w2"}

    _, hung_written, hung_holding = steer(desired, written, holding, avoid, ["w1", "w2"], hung=["w1"], clean=clean)
    assert hung_written == {eos: None, alo: None} and hung_holding["w1"] == frozenset()
