"""A new partition's start offsets are read while its destination topic is made ready."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest

from strait.worker import starts
from strait.worker.copier import Copier
from strait.worker.source_checkpoints import EarlyStarts, StartOffsets
from strait.worker.startup import DESTINATION_READY, HANDED, OFFSETS_READ
from strait.worker.task import PartitionTask
from tests.unit.test_worker_copier import ROUTE, FakeCheckpoints, FakeDestinations, FakePipeline, _task, _wait_for


class EarlyCheckpoints(FakeCheckpoints):
    reads_early = True

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[PartitionTask]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def start_offsets(self, tasks: list[PartitionTask]) -> dict[PartitionTask, StartOffsets]:
        self.reads.append(list(tasks))
        self.gate.wait(5)
        if self.fail:
            raise RuntimeError("source away")
        return super().start_offsets(tasks)


class GatedDestinations(FakeDestinations):
    """Destinations that are ready only once the test opens them."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()

    def ready(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        return self.ensure_many(wanted) if self.open.is_set() else {}


def test_an_early_read_is_handed_out_once_then_read_again() -> None:
    store = EarlyCheckpoints()
    store.committed[_task(0)] = 42
    early = EarlyStarts(store)
    early.ask([_task(0), _task(1)])
    _wait_for(lambda: len(store.reads) == 1)
    found: dict[PartitionTask, StartOffsets] = {}
    for _ in range(500):
        found, pending, _ = early.take([_task(0)])
        if not pending:
            break
        threading.Event().wait(0.01)
    assert found[_task(0)].start == 42 and found[_task(0)].committed == 42
    assert early.take([_task(0)]) == ({}, set(), [_task(0)])  # used once: the caller reads now
    early.close()


def test_a_read_under_way_is_waited_for_and_a_failed_or_old_one_is_not_used() -> None:
    store = EarlyCheckpoints()
    store.gate.clear()
    clock = [0.0]
    early = EarlyStarts(store, max_age_s=10, clock=lambda: clock[0])
    early.ask([_task(0)])
    assert early.take([_task(0)]) == ({}, {_task(0)}, [])
    clock[0] = 11.0  # too old, still unanswered: read again now
    assert early.take([_task(0)]) == ({}, set(), [_task(0)])
    store.gate.set()
    store.fail = True
    early.ask([_task(1)])
    taken = early.take([_task(1)])
    for _ in range(500):
        if not taken[1]:
            break
        threading.Event().wait(0.01)
        taken = early.take([_task(1)])
    assert taken == ({}, set(), [_task(1)])  # failed: the caller reads it itself
    early.close()


@pytest.fixture
def parts() -> tuple[Copier, EarlyCheckpoints, GatedDestinations]:
    return (
        Copier(
            route=ROUTE,
            source={"bootstrap.servers": "127.0.0.1:1"},
            destination={"bootstrap.servers": "127.0.0.1:1"},
            group_id="strait-a-b",
            worker_id="w1",
            commit_interval_s=0.02,
            catchup_lag_threshold=None,
            pipeline_factory=FakePipeline,
            checkpoints=(store := EarlyCheckpoints()),
            destinations=(destinations := GatedDestinations()),
        ),
        store,
        destinations,
    )


def test_the_copier_reads_start_offsets_while_the_destination_is_made_ready(
    parts: tuple[Copier, EarlyCheckpoints, GatedDestinations], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(starts, "START_RETRY_S", 0.05)
    copier, store, destinations = parts
    resumed, latest = _task(0), _task(1, start="latest")
    store.committed[resumed] = 7
    store.ranges[latest] = (3, 90)
    copier.start()
    try:
        copier.assign([resumed, latest])
        _wait_for(lambda: store.reads == [[resumed, latest]])  # before any destination is ready
        realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
        assert realtime.adds == []
        destinations.open.set()
        _wait_for(lambda: len(realtime.adds) == 2)
        assert dict(realtime.adds) == {resumed: 7, latest: 90}
        assert len(store.reads) == 1  # the early read was used, not read again
        trace = realtime.states[resumed].trace
        assert trace is not None and list(trace.marks) == [DESTINATION_READY, OFFSETS_READ, HANDED]
        # The start resolved from "latest" is committed at once, as before.
        _wait_for(lambda: store.history(latest)[:1] == [90])
    finally:
        copier.stop(drain=False, timeout_s=1)


def test_a_partition_whose_early_read_failed_reads_again_when_it_starts(
    parts: tuple[Copier, EarlyCheckpoints, GatedDestinations],
) -> None:
    copier, store, destinations = parts
    store.fail = True
    copier.start()
    try:
        copier.assign([_task(0)])
        _wait_for(lambda: len(store.reads) == 1)
        store.fail = False
        destinations.open.set()
        realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
        _wait_for(lambda: realtime.adds == [(_task(0), 0)])
        assert len(store.reads) == 2
    finally:
        copier.stop(drain=False, timeout_s=1)
