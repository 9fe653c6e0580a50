"""The backlog process's reports and how the worker applies them: the acknowledged position only
moves forward, counts add up across reports and pipelines, the offset map's runs arrive once,
the stage figures reach the route's observer, and a release or a dead child ends as the copier
expects. The last test runs a real child process."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from strait.metrics.stages import RouteObserver
from strait.offsetmap.runs import Run, RunRecorder
from strait.worker.batch.relay import (
    Progress,
    RecordingObserver,
    RelayedTracker,
    Report,
    RunDeltas,
    apply,
    progress,
    replay,
)
from strait.worker.batch.remote import BacklogProcess
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask

TASK = PartitionTask("r", "t", 0, "t")


def report(**fields: object) -> Progress:
    base = Progress(
        slot=0,
        position=0,
        next_offset=0,
        in_flight=0,
        source_end=None,
        records=0,
        bytes=0,
        last_progress=None,
        rewinds=0,
        mode="batch",
        mode_reason="",
        error=None,
        waiting=None,
        fetching=True,
        batches_fetched=0,
        batch_records_fetched=0,
        batch_bytes_fetched=0,
        batches_merged_fetched=0,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def worker_state(offset: int = 100) -> PartitionState:
    state = PartitionState(TASK)
    state.tracker = RelayedTracker(offset)
    state.mode, state.mode_reason = "batch", "lagging: more than 10,000 records behind"
    return state


def test_the_checkpoint_follows_the_acknowledged_position_and_never_moves_back() -> None:
    state = worker_state(100)
    first = report(position=150, next_offset=300, in_flight=150, source_end=1000)
    apply(first, state, None)
    assert (state.checkpoint, state.lag, state.tracker and state.tracker.in_flight) == (150, 700, 150)
    late = report(position=120, next_offset=250, in_flight=0, source_end=900)  # never sent that way
    apply(late, state, first)
    assert state.checkpoint == 150 and state.source_end == 1000 and state.tracker is not None
    assert state.tracker.next_offset == 300


def test_counts_add_up_on_top_of_the_partitions_earlier_pipelines() -> None:
    state = worker_state()
    state.records, state.bytes, state.rewinds = 1000, 50_000, 1  # copied in record mode before
    one = report(records=10, bytes=500, batches_fetched=2, batch_records_fetched=10, batch_bytes_fetched=500)
    two = report(
        records=30, bytes=1500, rewinds=1, batches_fetched=5, batch_records_fetched=30, batch_bytes_fetched=1500
    )
    apply(one, state, None)
    apply(two, state, one)
    assert (state.records, state.bytes, state.rewinds) == (1030, 51_500, 2)
    assert (state.batches_fetched, state.batch_records_fetched, state.batch_bytes_fetched) == (5, 30, 1500)


def test_the_copier_keeps_the_reason_unless_the_child_handed_the_partition_to_record_mode() -> None:
    state = worker_state()
    apply(report(mode="batch", mode_reason=""), state, None)
    assert state.mode_reason == "lagging: more than 10,000 records behind"
    apply(report(mode="record", mode_reason="codec_mismatch: lz4 -> zstd", fetching=False), state, None)
    assert (state.mode, state.mode_reason, state.fetching) == ("record", "codec_mismatch: lz4 -> zstd", False)


def test_an_error_stays_and_waiting_follows_the_child() -> None:
    state = worker_state()
    apply(report(waiting="denied: topic t"), state, None)
    assert state.waiting == "denied: topic t"
    apply(report(error="source t/0 does not exist (deleted?)", fetching=False), state, None)
    apply(report(error="something later"), state, None)
    assert state.error == "source t/0 does not exist (deleted?)" and state.waiting is None
    apply(report(released=True), state, None)
    assert not state.fetching


notes = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=50), st.booleans()),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(notes)
def test_run_deltas_rebuild_the_childs_runs_in_the_worker(steps: list[tuple[int, int, bool]]) -> None:
    """Whatever the child notes and whenever it reports, the worker's recorder ends with the
    child's runs."""
    child, worker, everything = RunRecorder(), RunRecorder(), RunRecorder()
    deltas = RunDeltas()
    source = destination = 0
    for jump, count, take in steps:
        source += jump  # a source gap (compaction, markers) starts a new run
        for recorder in (child, everything):
            recorder.note_many(source, destination, count)
        source, destination = source + count, destination + count
        if take:
            for run in deltas.new(child.take()):
                worker.note_many(run.source, run.destination, run.count)
    for run in deltas.new(child.take()):
        worker.note_many(run.source, run.destination, run.count)
    assert worker.take() == everything.take()


def test_a_report_of_a_partition_carries_its_state() -> None:
    state = PartitionState(TASK)
    state.tracker = RelayedTracker(5)
    state.records, state.source_end, state.mode = 7, 40, "batch"
    got = progress(3, state, [Run(5, 0, 7)], released=True)
    assert (got.slot, got.position, got.next_offset, got.records, got.source_end) == (3, 5, 5, 7, 40)
    assert got.runs == (Run(5, 0, 7),) and got.released


def test_the_childs_stage_figures_reach_the_routes_observer() -> None:
    recording, direct, replayed = RecordingObserver(), RouteObserver("r", clock=lambda: 100.0), None
    calls = [
        ("fetched", ("batch", 0.002), {}),
        ("queued", ("batch", 0.001), {"count": 40}),
        ("acked", ("batch", "t", 0, 0.004, 99_000), {"count": 40}),
        ("offset_gap", ("source",), {}),
    ]
    for name, args, kwargs in calls:
        getattr(recording, name)(*args, **kwargs)
        getattr(direct, name)(*args, **kwargs)
    payload = '{"name": "c-batch", "brokers": {}, "topics": {"t": {"partitions": {"0": {"leader": 1}}}}}'
    recording.client_stats("destination")(payload)
    direct.client_stats("destination")(payload)
    replayed = RouteObserver("r", clock=lambda: 100.0)
    replay(recording.take(), replayed)
    assert recording.take() == ()
    assert replayed.stages() == direct.stages() and replayed.stages()
    assert replayed.end_to_end() == direct.end_to_end()
    assert replayed.offset_gaps() == direct.offset_gaps() == {"source": 1}


def test_a_release_ends_with_the_childs_last_report_and_a_dead_child_ends_every_partition() -> None:
    backlog = BacklogProcess(name="batch", source={}, destination={}, group_id="g", client_id="c")
    try:
        moving, staying = PartitionState(TASK), PartitionState(PartitionTask("r", "t", 1, "t"))
        backlog.add(moving, 100)
        backlog.add(staying, 0)
        assert moving.pipeline == "batch" and isinstance(moving.tracker, RelayedTracker)
        released = backlog.release(moving)
        backlog._take(Report((report(slot=0, position=180, next_offset=200, in_flight=20),), (), 0))
        assert not released.is_set() and moving.checkpoint == 180
        backlog._take(Report((report(slot=0, position=200, next_offset=200, released=True),), (), 0))
        assert released.is_set() and moving.checkpoint == 200  # the last word first, then the event
        backlog._take(Report((report(slot=0, position=900),), (), 0))  # a slot no longer held: ignored
        assert moving.checkpoint == 200
        assert not backlog.crashed()
        backlog._end()  # the child went away unasked
        assert backlog.crashed()
        assert staying.error is not None and staying.error.startswith("pipeline batch crashed")
        assert backlog.release(staying).is_set()
        later = PartitionState(PartitionTask("r", "t", 2, "t"))
        backlog.add(later, 0)
        assert later.error == "pipeline batch is not running"
    finally:
        backlog.stop(0)


def test_a_killed_backlog_process_is_a_crashed_pipeline() -> None:
    """A real child: it reports a partition it was given, and its SIGKILL is seen as a crash."""
    backlog = BacklogProcess(
        name="batch",
        source={"bootstrap.servers": "127.0.0.1:1"},
        destination={"bootstrap.servers": "127.0.0.1:1"},
        group_id="g",
        client_id="c",
    )
    backlog.start()
    try:
        state = PartitionState(TASK)
        backlog.add(state, 0)
        deadline = time.monotonic() + 120
        waiting = threading.Event()
        while backlog._slots[0].last is None:
            assert time.monotonic() < deadline, "the child never reported"
            waiting.wait(0.01)
        assert backlog.pid is not None and backlog.pid != os.getpid()
        os.kill(backlog.pid, signal.SIGKILL)
        while not backlog.crashed():
            assert time.monotonic() < deadline, "the crash was not seen"
            waiting.wait(0.01)
        assert state.error is not None and state.error.startswith("pipeline batch crashed"), state.error
        assert backlog.release(state).is_set()
    finally:
        backlog.stop(0)
