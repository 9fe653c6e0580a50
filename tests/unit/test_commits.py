"""Checkpoint commits on their own thread (strait.worker.commits): the control thread never waits
on the group coordinator, a commit carries each partition's newest checkpoint and never lowers
one, the lease is asked right before each request, and the cadence commits a batch's worth of
progress at once and anything else within the interval."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping

import pytest
from confluent_kafka import KafkaError, KafkaException

from strait.worker.checkpoint import AckTracker
from strait.worker.commits import Committer, commit_due
from strait.worker.lease import Lease
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask
from tests.unit.test_worker_copier import FakeCheckpoints, FakePipeline, _task, lease_copier, turn


class GatedCheckpoints(FakeCheckpoints):
    """Commits that wait for the test to open a gate (a coordinator that does not answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_next: Exception | None = None

    def commit(self, offsets: Mapping[PartitionTask, int]) -> set[PartitionTask]:
        self.entered.set()
        self.gate.wait(30)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return super().commit(offsets)


def _state(partition: int, acked_to: int) -> PartitionState:
    state = PartitionState(_task(partition))
    state.tracker = AckTracker(0)
    for offset in range(acked_to):
        state.tracker.sent(offset)
        state.tracker.acked(offset)
    return state


def _committer(store: FakeCheckpoints, lease: Lease | None = None) -> tuple[Committer, list[float]]:
    answered: list[float] = []
    valid = (lambda: True) if lease is None else lease.valid
    committer = Committer(store, route="a-b", lease=valid, on_committed=lambda _c, seconds: answered.append(seconds))
    return committer, answered


def test_commit_due_invariants_over_generated_cases() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        now = rng.uniform(0, 10)
        next_commit = rng.uniform(0, 10)
        after = rng.choice([1, 100, 1_000, 5_000])
        progress = [rng.choice([0, 1, after - 1, after, after * 3]) for _ in range(rng.randint(0, 5))]
        busy = rng.random() < 0.3
        due = commit_due(now, next_commit, progress, after_records=after, busy=busy)
        if busy:
            assert not due, "a second request while one is out"
        elif now >= next_commit:
            assert due, "the interval passed without a commit"
        elif any(p >= after for p in progress):
            assert due, "a batch's worth of progress waited for the interval"
        else:
            assert not due, "a commit with neither the interval passed nor a batch's worth of progress"


def test_a_commit_the_coordinator_does_not_answer_does_not_hold_the_caller_and_later_ones_merge() -> None:
    store = GatedCheckpoints()
    committer, answered = _committer(store)
    a, b = _state(0, 10), _state(1, 5)
    first = committer.submit([(a, 10)])
    assert store.entered.wait(5)
    # The request is out and unanswered; handing over more returns at once.
    second = committer.submit([(a, 20), (b, 5)])
    third = committer.submit([(a, 15)])  # older than what waits: must not lower it
    assert committer.busy() and not first.done.is_set() and not second.done.is_set()
    sending = committer.sending_for()
    assert sending is not None and sending >= 0
    store.gate.set()
    assert committer.wait_idle(5)
    assert first.done.is_set() and second.done.is_set() and third.done.is_set()
    assert not first.failed and not second.failed and not third.failed
    # One request for the first hand-over, one for everything handed over while it was out.
    assert store.commits == [{a.task: 10}, {a.task: 20, b.task: 5}]
    assert a.committed == 20 and b.committed == 5
    assert len(answered) == 2
    assert committer.stop(5)


def test_the_lease_is_asked_right_before_the_request_not_at_hand_over() -> None:
    store = GatedCheckpoints()
    lease = Lease(valid_for_s=60)
    lease.confirm()
    committer, answered = _committer(store, lease)
    a = _state(0, 10)
    committer.submit([(a, 3)])
    assert store.entered.wait(5)
    waiting = committer.submit([(a, 10)])  # handed over with a valid lease
    lease.revoke()  # the session is in doubt before the next request goes out
    store.gate.set()
    assert committer.wait_idle(5)
    assert waiting.failed == {a.task}
    assert store.history(a.task) == [3] and a.committed == 3
    assert len(answered) == 1
    assert committer.stop(5)


def test_a_failed_request_answers_its_tickets_and_changes_no_checkpoint() -> None:
    store = GatedCheckpoints()
    store.fail_next = KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    store.gate.set()
    committer, _ = _committer(store)
    a = _state(0, 10)
    ticket = committer.submit([(a, 10)])
    assert ticket.done.wait(5)
    assert ticket.failed == {a.task} and a.committed is None
    again = committer.submit([(a, 10)])
    assert again.done.wait(5)
    assert not again.failed and a.committed == 10
    assert committer.stop(5)


def test_stop_gives_up_on_a_request_that_is_never_answered() -> None:
    store = GatedCheckpoints()
    committer, _ = _committer(store)
    committer.submit([(_state(0, 1), 1)])
    assert store.entered.wait(5)
    assert not committer.stop(0.2)
    store.gate.set()  # let the thread end


def test_the_copier_goes_on_while_a_commit_waits_and_its_revoke_ends_once_answered() -> None:
    lease = Lease(valid_for_s=60)
    lease.confirm()
    store = GatedCheckpoints()
    store.gate.set()
    copier, _ = lease_copier(lease)
    copier._checkpoints = store
    copier._committer._store = store
    first = _task(0)
    copier.assign([first])
    turn(copier)
    realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
    state = realtime.states[first]
    realtime.send(state, 0, 1, 2)
    realtime.ack(state, 0, 1, 2)
    store.gate.clear()
    store.entered.clear()
    copier._tick()  # commits 3, and the coordinator does not answer
    assert store.entered.wait(5)
    # The control thread still starts partitions and begins revokes meanwhile.
    second = _task(1)
    copier.assign([second])
    copier._tick()
    assert second in realtime.states
    realtime.send(state, 3, 4)
    realtime.ack(state, 3, 4)
    copier.revoke([first], timeout_s=0)
    for _ in range(3):
        copier._tick()
    assert first in copier.assigned(), "a revoke ended before its final checkpoint was committed"
    store.gate.set()
    assert copier._committer.wait_idle(5)
    turn(copier)
    turn(copier)
    assert first not in copier.assigned()
    assert store.history(first)[-1] == 5, "the revoke let the partition go before committing its end"
    copier.stop(drain=False, timeout_s=1)


def test_a_request_out_too_long_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    store = GatedCheckpoints()
    now = [0.0]
    committer = Committer(
        store, route="a-b", lease=lambda: True, on_committed=lambda _c, _s: None, clock=lambda: now[0]
    )
    committer.submit([(_state(0, 1), 1)])
    assert store.entered.wait(5)
    with caplog.at_level(logging.WARNING, logger="strait.worker.commits"):
        now[0] = 29.0
        committer.report_overdue(30.0)
        assert not caplog.records
        now[0] = 31.0
        committer.report_overdue(30.0)
        committer.report_overdue(30.0)
        overdue = [r for r in caplog.records if "has waited" in r.getMessage()]
        assert len(overdue) == 1
    store.gate.set()
    assert committer.stop(5)
