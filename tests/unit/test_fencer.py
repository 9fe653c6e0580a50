"""The leader parks exactly-once partitions with their last writer until that writer is fenced."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from strait.controller.fencer import Fencer, park_until_fenced
from strait.coordination.model import PartitionKey
from strait.fencing import FenceError

EOS, ALO = "eos", "alo"


class FakeFence:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False
        self.done = threading.Event()

    def __call__(self, props: Mapping[str, Any], ids: Iterable[str], timeout_s: float) -> None:
        self.calls.append(list(ids))
        self.done.set()
        if self.fail:
            raise FenceError({"x": "unreachable"})


def _settle(fencer: Fencer, worker: str, route: str, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fencer.fenced(worker, route):
            return True
        time.sleep(0.01)
    return False


def test_a_dead_writers_exactly_once_partitions_wait_for_the_fence_others_move_at_once() -> None:
    fake = FakeFence()
    woken = threading.Event()
    fencer = Fencer({EOS: {"bootstrap.servers": "x"}}, woken.set, fence_fn=fake)
    eos, alo, clean = PartitionKey(EOS, "t", 0), PartitionKey(ALO, "t", 0), PartitionKey(EOS, "t", 1)
    written = {eos: "w1", alo: "w1", clean: "w3"}
    plan = {eos: "w2", alo: "w2", clean: "w2"}
    # w1 is dead; w3 is live and hands `clean` over itself (it still claims it).
    result, parked = park_until_fenced(plan, written, {eos: "w1", alo: "w1", clean: "w3"}, {"w2", "w3"}, fencer)
    assert result == {eos: "w1", alo: "w2", clean: "w2"} and parked == 1
    assert fake.done.wait(5) and woken.wait(5)
    # Every pipeline's id: the record pipelines' and the batch pipelines'.
    assert fake.calls == [
        ["strait.eos.w1.realtime", "strait.eos.w1.catchup", "strait.eos.w1.batch", "strait.eos.w1.realtime-batch"]
    ]
    result, parked = park_until_fenced(plan, written, {eos: "w1", alo: "w1", clean: "w3"}, {"w2", "w3"}, fencer)
    assert result == plan and parked == 0


def test_a_failed_fence_keeps_the_partition_parked_and_is_retried() -> None:
    fake = FakeFence()
    fake.fail = True
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    key = PartitionKey(EOS, "t", 0)
    for _ in range(3):
        result, parked = park_until_fenced({key: "w2"}, {key: "w1"}, {key: "w1"}, {"w2"}, fencer)
        assert result == {key: "w1"} and parked == 1
        time.sleep(0.1)
    assert fencer.failures >= 1
    fake.fail = False
    assert _settle(fencer, "w1", EOS, timeout_s=10)


def test_healing_that_voids_a_live_workers_claim_fences_it_too() -> None:
    fake = FakeFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    key = PartitionKey(EOS, "t", 0)
    # w1 is live but hung: healing no longer trusts its claim (trusted_from lost it).
    result, parked = park_until_fenced({key: "w2"}, {key: "w1"}, {}, {"w1", "w2"}, fencer)
    assert parked == 1 and result == {key: "w1"}
    assert _settle(fencer, "w1", EOS)
    fencer.forget({"w1"})  # live again: a later failure needs a new fence
    assert not fencer.fenced("w1", EOS)


def test_a_worker_fenced_while_live_is_not_fenced_again_on_every_turn(monkeypatch: Any) -> None:
    # Forgotten at once, the fence of a live worker would be repeated on every turn of the loop
    # (about once a second), aborting each of its transactions.
    fake = FakeFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    key = PartitionKey(EOS, "t", 0)
    fencer.forget({"w1", "w2"})
    park_until_fenced({key: "w2"}, {key: "w1"}, {}, {"w1", "w2"}, fencer)
    assert _settle(fencer, "w1", EOS)
    for _ in range(20):
        fencer.forget({"w1", "w2"})
        # Parked again only if the fence was forgotten: a new one starts then.
        _, parked = park_until_fenced({key: "w2"}, {key: "w1"}, {}, {"w1", "w2"}, fencer)
        assert parked == 0
    assert len(fake.calls) == 1
    # Much later, still untrusted: fenced once more.
    monkeypatch.setattr("strait.controller.fencer.REFENCE_AFTER_S", 0.0)
    fencer.forget({"w1", "w2"})
    assert not fencer.fenced("w1", EOS) and _settle(fencer, "w1", EOS)
    assert len(fake.calls) == 2
    # Dead, then back: the old fence no longer counts.
    monkeypatch.setattr("strait.controller.fencer.REFENCE_AFTER_S", 3600.0)
    fencer.forget({"w2"})
    fencer.forget({"w1", "w2"})
    assert not fencer.fenced("w1", EOS)


def test_a_partition_written_unowned_waits_for_the_fence_of_its_last_writer() -> None:
    # A hand-over writes the partition as unowned; its old owner's session may then end while it
    # still copies, and the partition must not go to a new owner before that owner is fenced.
    fake = FakeFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    key = PartitionKey(EOS, "t", 0)
    plan = {key: "w2"}
    # w1 is dead: the partition stays unowned until w1 is fenced.
    result, parked = park_until_fenced(plan, {key: None}, {key: None}, {"w2"}, fencer, releasing={key: "w1"})
    assert result == {key: None} and parked == 1
    assert _settle(fencer, "w1", EOS)
    result, parked = park_until_fenced(plan, {key: None}, {key: None}, {"w2"}, fencer, releasing={key: "w1"})
    assert result == plan and parked == 0
    # A live last writer that let go is trusted; one the loop stopped waiting for is fenced.
    other = FakeFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=other)
    live = {"w1", "w2"}
    result, _ = park_until_fenced(plan, {key: None}, {key: None}, live, fencer, releasing={key: "w1"})
    assert result == plan and other.calls == []
    result, parked = park_until_fenced(
        plan, {key: None}, {key: None}, live, fencer, releasing={key: "w1"}, untrusted_holders={key: "w1"}
    )
    assert result == {key: None} and parked == 1
    assert _settle(fencer, "w1", EOS) and len(other.calls) == 1


def test_a_new_leader_that_does_not_know_the_last_writer_fences_every_worker_gone() -> None:
    fake = FakeFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    key, alo = PartitionKey(EOS, "t", 0), PartitionKey(ALO, "t", 0)
    plan = {key: "w2", alo: "w2"}
    result, parked = park_until_fenced(
        plan, {key: None, alo: None}, {key: None, alo: None}, {"w2"}, fencer, unknown_last_writers=["w1", "w9"]
    )
    assert result == {key: None, alo: "w2"} and parked == 1
    assert _settle(fencer, "w1", EOS) and _settle(fencer, "w9", EOS)
    result, parked = park_until_fenced(
        plan, {key: None, alo: None}, {key: None, alo: None}, {"w2"}, fencer, unknown_last_writers=["w1", "w9"]
    )
    assert result == plan and parked == 0


class HeldFence(FakeFence):
    """A fence that returns only when the test lets it."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def __call__(self, props: Mapping[str, Any], ids: Iterable[str], timeout_s: float) -> None:
        super().__call__(props, ids, timeout_s)
        self.go.wait(5)


def test_a_fence_that_finishes_after_its_worker_came_back_does_not_count_for_its_next_death() -> None:
    # The worker re-registered while its fence ran and took its transactional ids back with a new
    # epoch: counted, that fence let its partitions move unfenced when it died again (an
    # exactly-once chaos run: the frozen worker's open transaction committed beside the new
    # owner's copy).
    fake = HeldFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    fencer.forget({"w2"})  # w1 dead
    assert not fencer.fenced("w1", EOS)  # its fence begins
    assert fake.done.wait(5)
    fencer.forget({"w1", "w2"})  # w1 is back before the fence finished
    fake.go.set()
    fencer.forget({"w2"})  # and dead again
    assert _settle(fencer, "w1", EOS)
    assert len(fake.calls) == 2, "the fence begun before w1 came back counted for its next death"


def test_a_live_worker_given_partitions_after_its_fence_is_fenced_again_when_it_dies() -> None:
    # Fenced while live (healing gave up on it), then given partitions again: its pipelines take
    # their transactional ids back, so the fence kept against fence storms must not count.
    fake = FakeFence()
    fencer = Fencer({EOS: {}}, lambda: None, fence_fn=fake)
    key = PartitionKey(EOS, "t", 0)
    fencer.forget({"w1", "w2"})
    park_until_fenced({key: "w2"}, {key: "w1"}, {}, {"w1", "w2"}, fencer)
    assert _settle(fencer, "w1", EOS) and len(fake.calls) == 1
    fencer.forget({"w1", "w2"})
    assert fencer.fenced("w1", EOS), "a live worker's fence is kept (no fence storm)"
    fencer.handed("w1", EOS)
    fencer.handed("w1", ALO)  # a route without fencing: nothing to do
    fencer.forget({"w2"})  # w1 dies
    result, parked = park_until_fenced({key: "w2"}, {key: "w1"}, {key: "w1"}, {"w2"}, fencer)
    assert parked == 1 and result == {key: "w1"}, "moved on the fence from before w1 was given partitions"
    assert _settle(fencer, "w1", EOS) and len(fake.calls) == 2
