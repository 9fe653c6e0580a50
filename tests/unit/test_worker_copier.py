"""The copier's control logic: where partitions start, clean hand-over, moves between pipelines.

Pipelines, checkpoint store and destination topics are in-memory fakes with the copier's own
interfaces; the Kafka-facing versions are covered by tests/integration/test_copier.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from strait.worker import moves, starts
from strait.worker.checkpoint import AckTracker, start_offset
from strait.worker.copier import Copier
from strait.worker.destination import DestinationError
from strait.worker.entries import Entry
from strait.worker.lease import Lease
from strait.worker.pipeline import PartitionState
from strait.worker.source_checkpoints import StartOffsets
from strait.worker.task import PartitionTask

ROUTE = "a-b"


class FakePipeline:
    """Copies nothing by itself: tests send and acknowledge records through it."""

    def __init__(self, *, name: str, **_: Any) -> None:
        self.name = name
        self.adds: list[tuple[PartitionTask, int]] = []
        self.states: dict[PartitionTask, PartitionState] = {}
        self._releases: list[tuple[PartitionState, threading.Event]] = []
        self._lock = threading.Lock()
        self.stopped = False
        self.held = False
        self.hold_calls = 0

    def start(self) -> None:
        pass

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        with self._lock:
            state.tracker = AckTracker(offset)
            state.pipeline = self.name
            state.fetching = True
            self.adds.append((state.task, offset))
            self.states[state.task] = state

    def release(self, state: PartitionState) -> threading.Event:
        done = threading.Event()
        with self._lock:
            state.fetching = False
            self.states.pop(state.task, None)
            self._releases.append((state, done))
            self._settle()
        return done

    def abandon(self, state: PartitionState) -> threading.Event | None:
        self.release(state)
        return None

    def hold(self, on: bool) -> None:
        self.held = on
        self.hold_calls += 1

    def stop(self, timeout_s: float) -> None:
        self.stopped = True

    def send(self, state: PartitionState, *offsets: int) -> None:
        assert state.tracker is not None
        for offset in offsets:
            state.tracker.sent(offset, source_gap=True)  # gaps here stand for markers and compaction

    def fail(self, state: PartitionState, *offsets: int) -> None:
        with self._lock:
            assert state.tracker is not None
            for offset in offsets:
                state.tracker.failed(offset)
            self._settle()

    def ack(self, state: PartitionState, *offsets: int) -> None:
        with self._lock:
            assert state.tracker is not None
            for offset in offsets:
                state.tracker.acked(offset)
            self._settle()

    def _settle(self) -> None:
        for state, done in self._releases:
            if state.tracker is None or state.tracker.in_flight == 0:
                done.set()


class FakeCheckpoints:
    """Committed offsets in memory, with the source's offset range per partition."""

    def __init__(self) -> None:
        self.committed: dict[PartitionTask, int] = {}
        self.ranges: dict[PartitionTask, tuple[int, int]] = {}
        self.commits: list[dict[PartitionTask, int]] = []
        self.lock = threading.Lock()

    def start_offsets(self, tasks: list[PartitionTask]) -> dict[PartitionTask, StartOffsets]:
        result = {}
        for task in tasks:
            low, high = self.ranges.get(task, (0, 100))
            checkpoint = self.committed.get(task)
            result[task] = StartOffsets(start_offset(task.start, checkpoint, low, high), high, checkpoint)
        return result

    def commit(self, offsets: Mapping[PartitionTask, int]) -> set[PartitionTask]:
        with self.lock:
            self.committed.update(offsets)
            self.commits.append(dict(offsets))
        return set()

    def close(self) -> None:
        pass

    def history(self, task: PartitionTask) -> list[int]:
        with self.lock:
            return [commit[task] for commit in self.commits if task in commit]


class FakeDestinations:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.failures: list[Exception] = []
        self.prepared: list[dict[tuple[str, str], int]] = []

    def ensure(self, source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        self.calls.append((source_topic, destination_topic, min_partitions))
        if self.failures:
            raise self.failures.pop(0)
        return min_partitions

    def ensure_many(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        results: dict[tuple[str, str], int | Exception] = {}
        for (source, destination), partitions in wanted.items():
            try:
                results[(source, destination)] = self.ensure(source, destination, min_partitions=partitions)
            except Exception as exc:
                results[(source, destination)] = exc
        return results

    def ready(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        return self.ensure_many(wanted)

    def prepare(self, wanted: Mapping[tuple[str, str], int]) -> None:
        self.prepared.append(dict(wanted))

    def forget(self, destination_topic: str) -> None:
        pass


class Harness:
    def __init__(self, copier: Copier, checkpoints: FakeCheckpoints, destinations: FakeDestinations) -> None:
        self.copier, self.checkpoints, self.destinations = copier, checkpoints, destinations
        self.realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
        self.catchup: FakePipeline = copier._catchup  # type: ignore[assignment]

    def state(self, task: PartitionTask) -> PartitionState:
        for pipeline in (self.realtime, self.catchup):
            if task in pipeline.states:
                return pipeline.states[task]
        raise KeyError(task)


def _wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _task(partition: int = 0, topic: str = "orders", start: str = "earliest") -> PartitionTask:
    return PartitionTask(ROUTE, topic, partition, f"{topic}-copy", start)  # type: ignore[arg-type]


SENTINEL = _task(0, topic="sentinel")


def _start_sentinel(harness: Harness) -> None:
    """A partition whose commits show the control thread's progress (see :func:`_a_turn_passes`)."""
    harness.copier.assign([SENTINEL])
    _wait_for(lambda: harness.checkpoints.history(SENTINEL) == [0])


def _a_turn_passes(harness: Harness) -> None:
    """Return once the control thread has run a whole turn that began after this call: the
    sentinel's next record is acknowledged now, and its checkpoint is committed at the end of a
    turn, after that turn's revokes were handled. Whatever the copier would do wrongly on its
    next turn has been done by then."""
    state = harness.state(SENTINEL)
    offset = state.checkpoint
    assert offset is not None
    harness.realtime.send(state, offset)
    harness.realtime.ack(state, offset)
    _wait_for(lambda: harness.checkpoints.history(SENTINEL)[-1:] == [offset + 1])


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.0)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.02)
    monkeypatch.setattr(starts, "START_RETRY_S", 0.05)
    checkpoints, destinations = FakeCheckpoints(), FakeDestinations()
    copier = Copier(
        route=ROUTE,
        source={"bootstrap.servers": "127.0.0.1:1"},
        destination={"bootstrap.servers": "127.0.0.1:1"},
        group_id="strait-a-b",
        worker_id="w1",
        commit_interval_s=0.02,
        catchup_lag_threshold=1000,
        pipeline_factory=FakePipeline,
        checkpoints=checkpoints,
        destinations=destinations,
    )
    copier.start()
    yield Harness(copier, checkpoints, destinations)
    copier.stop(drain=False, timeout_s=1)


def test_partitions_start_at_their_checkpoint_or_at_task_start(harness: Harness) -> None:
    resumed, fresh, latest = _task(0), _task(1), _task(2, start="latest")
    harness.checkpoints.committed[resumed] = 42
    harness.checkpoints.ranges[latest] = (10, 90)
    harness.copier.assign([resumed, fresh, latest])
    _wait_for(lambda: len(harness.realtime.adds) == 3)
    assert sorted(harness.realtime.adds, key=lambda a: a[0].partition) == [(resumed, 42), (fresh, 0), (latest, 90)]
    assert harness.destinations.calls == [("orders", "orders-copy", 3)]
    # Resolved starts are committed at once: a later owner must not resolve "latest" again.
    _wait_for(lambda: harness.checkpoints.history(latest) == [90])
    assert harness.checkpoints.history(fresh) == [0]
    assert all(s.state == "ok" for s in harness.copier.stats().values())


def test_a_partition_far_behind_starts_in_the_catchup_pipeline(harness: Harness) -> None:
    behind, current = _task(0), _task(1)
    harness.checkpoints.ranges[behind] = (0, 1_000_000)
    harness.checkpoints.ranges[current] = (0, 10)
    harness.copier.assign([behind, current])
    _wait_for(lambda: len(harness.realtime.adds) + len(harness.catchup.adds) == 2)
    assert harness.catchup.adds == [(behind, 0)]
    assert harness.realtime.adds == [(current, 0)]


def test_revoke_waits_for_in_flight_acks_then_commits_the_exact_end(harness: Harness) -> None:
    task = _task()
    harness.copier.assign([task])
    _wait_for(lambda: task in harness.realtime.states)
    state = harness.state(task)
    harness.realtime.send(state, 0, 1, 2, 5)  # 3-4: a transaction marker and an aborted record
    harness.realtime.ack(state, 0)
    _start_sentinel(harness)

    returned = threading.Event()

    def revoke() -> None:
        harness.copier.revoke([task])
        returned.set()

    threading.Thread(target=revoke, daemon=True).start()
    # The control thread has asked the pipeline to release the partition, and a later turn
    # found records still in flight: the revoke is still waiting.
    _wait_for(lambda: any(s.task == task for s, _ in harness.realtime._releases))
    _a_turn_passes(harness)
    assert not returned.is_set(), "revoke returned with records in flight"
    assert harness.copier.stats()[task].state == "draining"
    harness.realtime.ack(state, 5, 2, 1)
    assert returned.wait(5)
    assert harness.checkpoints.history(task)[-1] == 6
    assert harness.copier.assigned() == {SENTINEL}
    commits = len(harness.checkpoints.commits)
    _a_turn_passes(harness)
    assert harness.checkpoints.history(task)[-1] == 6
    again = [c for c in harness.checkpoints.commits[commits:] if task in c]
    assert not again, "a released partition was committed again"


def test_a_revoke_that_times_out_keeps_the_partition_held_until_its_records_are_answered(
    harness: Harness,
) -> None:
    # Counted as released, a timed-out revoke would let the next owner write while this
    # worker's records are still in flight (a stalled destination).
    task = _task()
    harness.copier.assign([task])
    _wait_for(lambda: task in harness.realtime.states)
    state = harness.state(task)
    harness.realtime.send(state, 0, 1, 2)
    harness.realtime.ack(state, 0, 2)
    _start_sentinel(harness)
    started = time.monotonic()
    assert harness.copier.revoke([task], timeout_s=0.3) == {task}
    assert time.monotonic() - started < 3
    assert task in harness.copier.assigned(), "released with a record in flight"
    _a_turn_passes(harness)  # a turn past the revoke's deadline
    assert task in harness.copier.assigned()
    # Assigned again meanwhile: it must start afresh after the revoke, not be lost in it.
    harness.copier.assign([task])
    harness.realtime.fail(state, 1)  # the producer gives up on record 1 (delivery timeout)
    _wait_for(lambda: harness.checkpoints.history(task)[-1:] == [1])  # 1 is re-sent by the next owner
    _wait_for(lambda: [offset for t, offset in harness.realtime.adds if t == task] == [0, 1])


def test_a_partition_that_falls_behind_moves_to_catchup_at_its_checkpoint(harness: Harness) -> None:
    task = _task()
    harness.checkpoints.ranges[task] = (0, 0)
    harness.copier.assign([task])
    _wait_for(lambda: task in harness.realtime.states)
    state = harness.state(task)
    harness.realtime.send(state, 0, 1, 2)
    harness.realtime.ack(state, 0, 1, 2)
    state.source_end = 50_000
    _wait_for(lambda: harness.catchup.adds == [(task, 3)])
    assert task not in harness.realtime.states
    # Caught up again: back to the realtime pipeline, again at the exact checkpoint.
    harness.catchup.send(state, 3, 4)
    harness.catchup.ack(state, 3, 4)
    state.source_end = 5
    _wait_for(lambda: harness.realtime.adds[-1] == (task, 5))
    assert harness.copier.stats()[task].pipeline == "realtime"


def test_a_failing_destination_is_reported_and_tried_again(harness: Harness) -> None:
    task = _task()
    harness.destinations.failures.append(DestinationError("destination topic 'orders-copy': not authorised"))
    harness.copier.assign([task])
    _wait_for(lambda: len(harness.destinations.calls) >= 1)
    _wait_for(lambda: task in harness.realtime.states)
    assert harness.copier.stats()[task].state == "ok"
    assert len(harness.destinations.calls) == 2


def test_assigned_partitions_have_their_destination_topics_prepared_at_once(harness: Harness) -> None:
    harness.copier.assign([_task(0), _task(3), _task(0, topic="refunds")])
    assert harness.destinations.prepared == [{("orders", "orders-copy"): 4, ("refunds", "refunds-copy"): 1}]


def test_a_failed_start_is_tried_again_soon_then_less_and_less_often(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(starts, "START_RETRY_S", 5.0)
    monkeypatch.setattr(starts, "FIRST_START_RETRY_S", 0.25)
    monkeypatch.setattr(starts, "QUICK_TRIES", 6)
    entry = Entry(state=PartitionState(_task()))
    waits = []
    for _ in range(12):
        before = time.monotonic()
        harness.copier._retry_later([entry], "source topic 'orders' does not exist")
        waits.append(entry.next_attempt - before)
    assert [round(w * 4) / 4 for w in waits] == [0.25] * 6 + [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert entry.start_error == "source topic 'orders' does not exist"


def test_failed_partition_shows_its_reason(harness: Harness) -> None:
    task = _task()
    harness.copier.assign([task])
    _wait_for(lambda: task in harness.realtime.states)
    harness.state(task).error = "destination orders-copy/0 does not exist (deleted?)"
    assert harness.copier.stats()[task].state == "failed:destination orders-copy/0 does not exist (deleted?)"


def test_tasks_of_another_route_or_clashing_settings_are_rejected(harness: Harness) -> None:
    with pytest.raises(ValueError, match="route"):
        harness.copier.assign([PartitionTask("other", "orders", 0, "orders", "earliest")])
    harness.copier.assign([_task()])
    harness.copier.assign([_task()])  # the same task again is a no-op
    with pytest.raises(ValueError, match="already assigned"):
        harness.copier.assign([PartitionTask(ROUTE, "orders", 0, "renamed", "earliest")])
    assert harness.copier.assigned() == {_task()}


def test_stop_with_drain_hands_every_partition_over(harness: Harness) -> None:
    tasks = [_task(0), _task(1)]
    harness.copier.assign(tasks)
    _wait_for(lambda: all(t in harness.realtime.states for t in tasks))
    for offset_base, task in enumerate(tasks):
        state = harness.state(task)
        harness.realtime.send(state, 10 + offset_base)
        harness.realtime.ack(state, 10 + offset_base)
    harness.copier.stop(drain=True, timeout_s=5)
    assert [harness.checkpoints.history(t)[-1] for t in tasks] == [11, 12]
    assert harness.realtime.stopped and harness.catchup.stopped
    assert harness.copier.assigned() == set()


def turn(copier: Copier) -> None:
    """One turn of a copier driven by the test, its checkpoint commits answered before and after:
    a commit is due only while none is out (strait.worker.commits)."""
    assert copier._committer.wait_idle(5), "a checkpoint commit was not answered"
    copier._tick()
    assert copier._committer.wait_idle(5), "a checkpoint commit was not answered"


def lease_copier(lease: Lease, pipeline_factory: Any = FakePipeline, **options: Any) -> tuple[Copier, FakeCheckpoints]:
    """A copier asking ``lease``, not started: each ``_tick`` is one turn, driven by the test."""
    checkpoints = FakeCheckpoints()
    copier = Copier(
        route=ROUTE,
        source={"bootstrap.servers": "127.0.0.1:1"},
        destination={"bootstrap.servers": "127.0.0.1:1"},
        group_id="strait-a-b",
        worker_id="w1",
        commit_interval_s=0.0,
        pipeline_factory=pipeline_factory,
        checkpoints=checkpoints,
        destinations=FakeDestinations(),
        lease=lease.valid,
        **options,
    )
    return copier, checkpoints


def test_partitions_wait_to_start_while_the_workers_lease_is_not_confirmed() -> None:
    # A worker frozen past its session wakes up with a copier that does not know yet: starting
    # a partition assigned before the freeze would write beside its new owner.
    lease = Lease(valid_for_s=60)
    copier, _checkpoints = lease_copier(lease)
    realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
    copier.assign([_task(0)])
    for _ in range(3):
        turn(copier)
    assert realtime.adds == [] and copier.stats()[_task(0)].state == "starting"
    lease.confirm()
    turn(copier)
    assert realtime.adds == [(_task(0), 0)]


def test_fetching_is_held_while_the_lease_is_not_confirmed_and_no_checkpoint_moves() -> None:
    # Copying on while no checkpoint can be committed only makes work for the next owner: a
    # worker whose session flaps would otherwise copy until it is judged cut off, and all of
    # it is copied again.
    lease = Lease(valid_for_s=60)
    lease.confirm()
    copier, checkpoints = lease_copier(lease)
    realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
    catchup: FakePipeline = copier._catchup  # type: ignore[assignment]
    task = _task(0)
    copier.assign([task])
    turn(copier)
    assert realtime.adds == [(task, 0)] and not realtime.held and not catchup.held
    state = realtime.states[task]
    lease.revoke()
    realtime.send(state, 0, 1)
    realtime.ack(state, 0, 1)
    turn(copier)
    assert realtime.held and catchup.held
    assert checkpoints.history(task)[-1:] == [0], "a checkpoint committed without a confirmed lease"
    lease.confirm()
    turn(copier)
    assert not realtime.held and not catchup.held
    assert checkpoints.history(task)[-1] == 2


def test_every_turn_tells_every_pipeline_whether_to_hold() -> None:
    # The backlog process takes the word as the sign that its worker still runs, and holds on its
    # own when it stops hearing it (strait.worker.batch.child): a word only on a change would
    # leave a running worker's backlog held.
    lease = Lease(valid_for_s=60)
    lease.confirm()
    copier, _checkpoints = lease_copier(lease)
    pipelines: list[FakePipeline] = [copier._realtime, copier._catchup]  # type: ignore[list-item]
    for _ in range(5):
        turn(copier)
    assert all(p.hold_calls == 5 and not p.held for p in pipelines), [p.hold_calls for p in pipelines]


def test_a_lease_expires_and_is_revoked() -> None:
    lease = Lease(valid_for_s=0.05)
    assert not lease.valid()
    lease.confirm()
    assert lease.valid()
    time.sleep(0.06)
    assert not lease.valid()
    lease.confirm()
    lease.revoke()
    assert not lease.valid()


class SettlingPipeline(FakePipeline):
    """An exactly-once pipeline's abandon: done once the open transaction was aborted."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settling: list[threading.Event] = []

    def abandon(self, state: PartitionState) -> threading.Event | None:
        self.release(state)
        self.settling.append(threading.Event())
        return self.settling[-1]


def test_an_abandoned_partition_is_held_until_its_pipeline_settled_it_and_then_starts_again() -> None:
    lease = Lease(valid_for_s=60)
    lease.confirm()
    copier, checkpoints = lease_copier(lease, SettlingPipeline, catchup_lag_threshold=None)
    pipeline: SettlingPipeline = copier._realtime  # type: ignore[assignment]
    task = _task()
    copier.assign([task])
    for _ in range(3):
        turn(copier)
    assert pipeline.adds == [(task, 0)]
    copier.abandon()
    turn(copier)
    assert len(pipeline.settling) == 1
    copier.assign([task])  # the same worker gets it back before the abort settled
    for _ in range(3):
        turn(copier)
    assert copier.assigned() == {task} and pipeline.adds == [(task, 0)], "restarted before it was settled"
    checkpoints.committed[task] = 0  # the checkpoint the settled transaction left
    pipeline.settling[0].set()
    for _ in range(3):
        turn(copier)
    assert pipeline.adds == [(task, 0), (task, 0)] and len(pipeline.settling) == 1


def _given_back_while_revoking() -> tuple[Copier, FakePipeline, PartitionTask, PartitionState]:
    """A copier whose partition, with a record in flight, is being revoked and was assigned again
    meanwhile: it starts again once the revoke ends."""
    lease = Lease(valid_for_s=60)
    lease.confirm()
    copier, _checkpoints = lease_copier(lease, catchup_lag_threshold=None)
    pipeline: FakePipeline = copier._realtime  # type: ignore[assignment]
    task = _task()
    copier.assign([task])
    for _ in range(3):
        turn(copier)
    state = pipeline.states[task]
    pipeline.send(state, 0)  # in flight: the revoke waits for its answer
    copier.revoke([task], timeout_s=0)
    turn(copier)
    copier.assign([task])
    return copier, pipeline, task, state


def test_an_abandon_forgets_a_partition_assigned_again_while_it_was_being_revoked() -> None:
    # A worker cut off from coordination forgets its assignment; a partition that was handed
    # back to it before the cut-off must not start again once its old copy settles, or it
    # copies beside the owner the controller gives it to next, unknown to the worker's agent.
    copier, pipeline, task, state = _given_back_while_revoking()
    copier.abandon()
    pipeline.ack(state, 0)
    for _ in range(3):
        turn(copier)
    assert copier.assigned() == set() and pipeline.adds == [(task, 0)], "restarted after the abandon"


def test_a_revoke_of_a_partition_waiting_to_start_again_cancels_that_start() -> None:
    # Given back while its old copy was still being handed over, then taken away again before
    # that ended: the agent no longer counts it as its own, so it must not start afterwards.
    copier, pipeline, task, state = _given_back_while_revoking()
    copier.revoke([task], timeout_s=0)
    pipeline.ack(state, 0)
    for _ in range(3):
        turn(copier)
    assert copier.assigned() == set() and pipeline.adds == [(task, 0)], "started after its revoke"
