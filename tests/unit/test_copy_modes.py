"""Which pipeline copies each partition of a ``copy: batch`` route (strait.worker.moves): batch
mode while it lags, record mode once caught up, record mode for good once its batches cannot
pass unchanged. Pure: the moves are driven by hand over fake pipelines, over generated histories
of lag, acknowledgements, fallbacks and time, and every step is checked against the rules."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

from strait.worker import moves
from strait.worker.checkpoint import AckTracker
from strait.worker.entries import Entry
from strait.worker.moves import Moves, caught_up_reason, lagging_reason
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask

THRESHOLD = 1000
FALLBACK = "codec_mismatch: source batches are lz4, destination zstd"


class Pipe:
    """A pipeline that copies nothing by itself: the test sends and acknowledges through it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.adds: list[int] = []
        self.releasing: list[tuple[PartitionState, threading.Event]] = []
        self.held = False

    def start(self) -> None:
        pass

    def stop(self, timeout_s: float) -> None:
        pass

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        state.tracker = AckTracker(offset)
        state.pipeline = self.name
        if self.name in ("batch", "realtime-batch"):
            state.mode = "batch"
        self.adds.append(offset)

    def release(self, state: PartitionState) -> threading.Event:
        done = threading.Event()
        self.releasing.append((state, done))
        self.settle()
        return done

    def abandon(self, state: PartitionState) -> threading.Event | None:
        self.release(state)
        return None

    def hold(self, on: bool) -> None:
        self.held = on

    def settle(self) -> None:
        for state, done in self.releasing:
            if state.tracker is None or state.tracker.in_flight == 0:
                done.set()


def _setup(threshold: int | None = THRESHOLD) -> tuple[Moves, dict[str, Pipe]]:
    pipes = {name: Pipe(name) for name in ("realtime", "catchup", "batch")}
    return (
        Moves(
            realtime=pipes["realtime"],  # type: ignore[arg-type]
            catchup=pipes["catchup"],  # type: ignore[arg-type]
            batch=pipes["batch"],  # type: ignore[arg-type]
            threshold=threshold,
        ),
        pipes,
    )


def _start(placement: Moves, end: int, now: float = 0.0) -> Entry:
    entry = Entry(state=PartitionState(PartitionTask("r", "t", 0, "t")))
    pipeline = placement.first(entry.state, 0, end)
    entry.state.source_end = end
    entry.phase, entry.pipeline, entry.since = "running", pipeline, now
    pipeline.add(entry.state, 0)
    return entry


def test_a_backlog_starts_in_batch_mode_and_a_trickle_in_record_mode() -> None:
    placement, pipes = _setup()
    backlog, trickle = _start(placement, THRESHOLD + 1), _start(placement, THRESHOLD)
    assert backlog.pipeline is pipes["batch"] and backlog.state.mode == "batch"
    assert backlog.state.mode_reason == lagging_reason(THRESHOLD) == "lagging: more than 1,000 records behind"
    assert trickle.pipeline is pipes["realtime"] and trickle.state.mode == "record"
    assert trickle.state.mode_reason == caught_up_reason(THRESHOLD)


def test_without_a_threshold_every_partition_of_a_batch_route_is_copied_in_batch_mode() -> None:
    placement, pipes = _setup(None)
    entry = _start(placement, 5)
    assert entry.pipeline is pipes["batch"] and entry.state.mode == "batch" and entry.state.mode_reason == ""
    entry.state.source_end = 10**9
    placement.classify([entry], 100.0)
    assert entry.phase == "running" and entry.pipeline is pipes["batch"]


def _copy(entry: Entry, rng: random.Random) -> None:
    """The current pipeline sends a few records and answers some of what is in flight."""
    state = entry.state
    tracker = state.tracker
    assert tracker is not None
    if entry.phase == "running" and state.source_end is not None:
        for _ in range(rng.randrange(4)):
            if tracker.next_offset < state.source_end:
                tracker.sent(tracker.next_offset + rng.randrange(3), source_gap=True)
    for offset in tracker.in_flight_offsets():  # answer some of what is in flight
        roll = rng.random()
        if roll < 0.03:
            tracker.failed(offset)  # pins the checkpoint: acknowledged records after it go again
        elif roll < 0.6:
            tracker.acked(offset)
    if tracker.blocked and not tracker.in_flight and entry.phase == "running":
        tracker.rewind()  # as a pipeline does after a failure


@pytest.mark.parametrize("seed", range(60))
def test_generated_histories_keep_the_rules(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    dwell = rng.choice([0.0, 5.0])
    monkeypatch.setattr(moves, "MIN_DWELL_S", dwell)
    placement, pipes = _setup()
    batch, realtime, catchup = pipes["batch"], pipes["realtime"], pipes["catchup"]
    now = 0.0
    entry = _start(placement, rng.choice([0, 50, THRESHOLD + 1, 10 * THRESHOLD]))
    fell_back = False
    released: AckTracker | None = None
    resumed_at: list[int] = []
    for _ in range(300):
        now += rng.choice([0.1, 1.0, 3.0])
        state = entry.state
        tracker = state.tracker
        assert tracker is not None
        # The source grows or the copy catches up; lag hovers across both thresholds.
        state.source_end = tracker.next_offset + rng.choice([0, 10, THRESHOLD // 4, THRESHOLD // 2, 2 * THRESHOLD])
        _copy(entry, rng)
        if entry.pipeline is batch and entry.phase == "running" and not fell_back and rng.random() < 0.02:
            state.mode, state.mode_reason = "record", FALLBACK  # the batch pipeline's fallback
        for pipe in pipes.values():
            pipe.settle()
        before, phase, lag = entry.pipeline, entry.phase, state.lag
        placement.classify([entry], now)
        placement.to_record_mode([entry])
        if phase == "running" and entry.phase == "moving":
            assert lag is not None
            to = entry.target
            if state.mode == "record" and before is batch:
                assert to is realtime  # a fallback moves at once, whatever the lag
            else:
                assert now - entry.since >= dwell
                if to in (batch, catchup):
                    assert lag > THRESHOLD and before is realtime
                else:
                    assert lag <= THRESHOLD // 4 and before in (batch, catchup)
            released = state.tracker
        if entry.phase == "moving":
            adds = sum(len(p.adds) for p in pipes.values())
            placement.advance(entry, now)
            if entry.phase == "running":
                # Resumed exactly where the old pipeline's acknowledged records end, once none of
                # them was in flight: nothing skipped, nothing copied twice.
                assert sum(len(p.adds) for p in pipes.values()) == adds + 1
                assert released is not None and released.in_flight == 0
                assert state.tracker is not None and state.tracker.position == released.position
                resumed_at.append(state.tracker.position)
                fell_back = fell_back or state.mode_reason == FALLBACK
        if entry.phase == "running":
            if fell_back:
                assert entry.batch_fallback and entry.pipeline is not batch
                assert state.mode == "record" and state.mode_reason == FALLBACK
            elif entry.pipeline is batch:
                assert state.mode == "batch" and state.mode_reason == lagging_reason(THRESHOLD)
            else:
                assert entry.pipeline is realtime, "a partition that may pass batches never uses record catch-up"
                assert state.mode == "record" and state.mode_reason == caught_up_reason(THRESHOLD)
    assert resumed_at == sorted(resumed_at), "a move never goes back in the source"


def moves_made(
    histories: Callable[[int, pytest.MonkeyPatch], None], monkeypatch: pytest.MonkeyPatch
) -> set[tuple[str, str]]:
    """Every (from, to) pipeline move the generated histories of 60 seeds made."""
    seen: set[tuple[str, str]] = set()
    original = Moves._move

    def spy(entry: Entry, target: Pipe) -> None:  # type: ignore[override]
        assert entry.pipeline is not None
        seen.add((entry.pipeline.name, target.name))
        original(entry, target)  # type: ignore[arg-type]

    monkeypatch.setattr(Moves, "_move", staticmethod(spy))
    for seed in range(60):
        histories(seed, monkeypatch)
    return seen


def test_generated_histories_cover_every_kind_of_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """The histories above do reach each move (the test could not pass by never moving)."""
    seen = moves_made(test_generated_histories_keep_the_rules, monkeypatch)
    assert {("batch", "realtime"), ("realtime", "batch"), ("realtime", "catchup"), ("catchup", "realtime")} <= seen


def _fetch_batches(state: PartitionState, batches: int, records_per_batch: int, bytes_per_record: int = 100) -> None:
    """What the batch pipeline counts as it takes a fetch (strait.worker.batch.partition)."""
    state.batches_fetched += batches
    state.batch_records_fetched += batches * records_per_batch
    state.batch_bytes_fetched += batches * records_per_batch * bytes_per_record


def _settle_move(placement: Moves, pipes: dict[str, Pipe], entry: Entry, now: float) -> None:
    for pipe in pipes.values():
        pipe.settle()
    placement.advance(entry, now)
    assert entry.phase == "running"


def test_a_lagging_partition_with_small_source_batches_is_copied_record_by_record_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    placement, pipes = _setup()
    entry = _start(placement, 100 * THRESHOLD)
    state = entry.state
    assert entry.pipeline is pipes["batch"]
    # Too few batches seen to judge: stays, whatever their size.
    _fetch_batches(state, moves.SPARSE_JUDGED_BATCHES - 1, 4)
    placement.classify([entry], 10.0)
    assert entry.phase == "running" and entry.pipeline is pipes["batch"]
    _fetch_batches(state, 1, 4)
    placement.classify([entry], 11.0)
    assert entry.phase == "moving" and entry.target is pipes["catchup"]
    _settle_move(placement, pipes, entry, 11.0)
    assert state.mode == "record" and state.mode_reason == moves.sparse_reason()
    # Still lagging: no way back to batch mode during the hold.
    for now in (20.0, 100.0, 11.0 + moves.SPARSE_HOLD_S - 1):
        placement.classify([entry], now)
        assert entry.phase == "running" and entry.pipeline is pipes["catchup"]
    # After the hold, batch mode is tried again with fresh counts.
    now = 11.0 + moves.SPARSE_HOLD_S
    placement.classify([entry], now)
    assert entry.phase == "moving" and entry.target is pipes["batch"]
    _settle_move(placement, pipes, entry, now)
    assert state.mode == "batch" and state.mode_reason == lagging_reason(THRESHOLD)
    assert state.batches_fetched == state.batch_records_fetched == state.batch_bytes_fetched == 0


def test_a_sparse_partition_that_catches_up_goes_to_realtime_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    placement, pipes = _setup()
    entry = _start(placement, 100 * THRESHOLD)
    _fetch_batches(entry.state, 1000, 3)
    placement.classify([entry], 10.0)
    _settle_move(placement, pipes, entry, 10.0)
    assert entry.pipeline is pipes["catchup"]
    tracker = entry.state.tracker
    assert tracker is not None
    entry.state.source_end = tracker.next_offset + THRESHOLD // 4  # caught up
    placement.classify([entry], 20.0)
    assert entry.target is pipes["realtime"]
    _settle_move(placement, pipes, entry, 20.0)
    assert entry.state.mode == "record" and entry.state.mode_reason == caught_up_reason(THRESHOLD)
    # And lagging again within the hold: the record catch-up pipeline, not batch mode.
    entry.state.source_end = tracker.next_offset + 2 * THRESHOLD
    placement.classify([entry], 30.0)
    assert entry.target is pipes["catchup"]


@pytest.mark.parametrize("seed", range(40))
def test_batch_mode_is_left_for_small_batches_only(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated densities: a partition leaves batch mode for its batch size exactly when the
    averages are under both limits, once enough batches were seen."""
    rng = random.Random(seed)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    placement, pipes = _setup()
    entry = _start(placement, 100 * THRESHOLD)
    state = entry.state
    records = rng.choice([1, 4, 30, 63, 64, 65, 500])
    size = rng.choice([10, 100, 600, 1024, 4096])
    batches = rng.choice([50, 199, 200, 1000])
    _fetch_batches(state, batches, records, size)
    placement.classify([entry], 10.0)
    small = records < moves.SPARSE_RECORDS_PER_BATCH and records * size < moves.SPARSE_BATCH_BYTES
    expect_move = batches >= moves.SPARSE_JUDGED_BATCHES and small
    assert (entry.phase == "moving") is expect_move, (records, size, batches)
    if expect_move:
        assert entry.target is pipes["catchup"]


class SharingPipe(Pipe):
    """A batch pipe that notes what the moves told it about realtime partitions."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.told: list[bool] = []
        self.settled: list[bool] = []
        self.arriving: list[bool] = []
        self.arriving_topics: list[frozenset[str]] = []
        self.leaving: list[bool] = []

    def share(
        self,
        realtime: bool,
        *,
        settled: bool = False,
        arriving: frozenset[str] = frozenset(),
        leaving: bool = False,
    ) -> None:
        self.told.append(realtime)
        self.settled.append(settled)
        self.arriving.append(bool(arriving))
        self.arriving_topics.append(arriving)
        self.leaving.append(leaving)


def test_the_batch_pipeline_is_told_while_realtime_partitions_share_the_worker() -> None:
    placement, pipes = _setup()
    batch = SharingPipe("batch")
    placement.batch = batch  # type: ignore[assignment]
    backlog = _start(placement, THRESHOLD + 1)
    placement.classify([backlog], 10.0)
    assert batch.told == [False]  # a backlog alone drains unpaced
    trickle = _start(placement, 5)
    placement.classify([backlog, trickle], 10.5)
    assert batch.told == [False]  # once per CLASSIFY_INTERVAL_S
    placement.classify([backlog, trickle], 11.0)
    assert batch.told == [False, True]
    assert batch.settled[-1] is False  # the trickle has records not yet acknowledged
    assert trickle.state.tracker is not None
    trickle.state.source_end = trickle.state.tracker.position  # every record it knows of acknowledged
    placement.classify([backlog, trickle], 11.5)
    placement.classify([backlog, trickle], 12.0)
    assert batch.told[-1] is True and batch.settled[-1] is True
    trickle.state.error = "stopped"
    placement.classify([backlog, trickle], 13.0)
    assert batch.told == [False, True, True, False]
    assert trickle.pipeline is pipes["realtime"] and backlog.pipeline is batch


def _backlog(placement: Moves, partition: int, end: int) -> Entry:
    entry = Entry(state=PartitionState(PartitionTask("r", "backlog", partition, "backlog")))
    pipeline = placement.first(entry.state, 0, end)
    entry.state.source_end = end
    entry.phase, entry.pipeline = "running", pipeline
    pipeline.add(entry.state, 0)
    return entry


def _copy_to(entry: Entry, offset: int) -> None:
    """Sent and acknowledged up to ``offset`` (excluded)."""
    tracker = entry.state.tracker
    assert tracker is not None
    for next_offset in range(tracker.next_offset, offset):
        tracker.sent(next_offset)
        tracker.acked(next_offset)


def test_the_pace_is_told_while_a_caught_up_backlog_finishes_in_the_realtime_pipeline() -> None:
    """Its last records are as old as the backlog: the windows that may hold their
    acknowledgements (up to the one in which the partition settled) are flagged, no others."""
    placement, pipes = _setup()
    batch = SharingPipe("batch")
    placement.batch = batch  # type: ignore[assignment]
    end = 4 * THRESHOLD
    entries = [_start(placement, 5), _backlog(placement, 0, end), _backlog(placement, 1, end)]
    backlog = entries[1]
    assert backlog.pipeline is batch and entries[2].pipeline is batch
    placement.classify(entries, 10.0)
    assert batch.arriving == [False]
    _copy_to(backlog, end - THRESHOLD // 8)
    placement.classify(entries, 11.0)  # lag under a quarter of the threshold: moves
    assert backlog.phase == "moving"
    placement.advance(backlog, 11.5)
    assert backlog.pipeline is pipes["realtime"]
    placement.classify(entries, 12.0)
    placement.classify(entries, 13.0)
    assert batch.arriving == [False, False, True, True]  # its old records still to copy
    # (Named by destination topic, so the pace judges the window by the other topics' records.)
    assert batch.arriving_topics[-1] == frozenset({backlog.state.task.destination_topic})
    assert batch.arriving_topics[0] == frozenset()
    _copy_to(backlog, end)  # settled now, acknowledged within the last window
    placement.classify(entries, 14.0)
    placement.classify(entries, 15.0)
    assert batch.arriving[-2:] == [True, False]
    assert batch.told[-1] is True  # still sharing with the other backlog partition


def test_the_pace_is_told_while_a_realtime_partition_falls_behind_by_a_backlog() -> None:
    """A backlog appearing at once in a caught-up partition (a large transaction committed, a
    producer's outage over) is partly copied by the realtime pipeline before the partition moves
    out: the windows until the one in which it left are flagged, none before or after."""
    placement, _ = _setup()
    batch = SharingPipe("batch")
    placement.batch = batch  # type: ignore[assignment]
    live = _start(placement, 5)
    entries = [live, _backlog(placement, 0, 4 * THRESHOLD)]
    placement.classify(entries, 10.0)
    assert batch.leaving == [False]
    live.state.source_end = 5 + 2 * THRESHOLD  # the backlog appears
    placement.classify(entries, 11.0)
    assert batch.leaving[-1] is True
    assert live.phase == "moving" and live.target is batch
    placement.classify(entries, 12.0)
    assert batch.leaving[-1] is True  # the realtime pipeline holds it until released
    placement.advance(live, 12.5)
    assert live.pipeline is batch
    placement.classify(entries, 13.0)
    assert batch.leaving[-1] is True  # the window in which it left: realtime records behind it
    placement.classify(entries, 14.0)
    assert batch.leaving[-1] is False


def _arrive(placement: Moves, pipes: dict[str, Pipe], end: int) -> tuple[list[Entry], Entry, SharingPipe]:
    batch = SharingPipe("batch")
    placement.batch = batch  # type: ignore[assignment]
    entries = [_start(placement, 5), _backlog(placement, 0, end), _backlog(placement, 1, end)]
    backlog = entries[1]
    _copy_to(backlog, end - 10)
    placement.classify(entries, 10.0)
    placement.advance(backlog, 10.5)
    assert backlog.pipeline is pipes["realtime"] and backlog.arriving_end == end
    return entries, backlog, batch


def test_a_busy_partition_stops_arriving_once_its_old_records_are_acknowledged() -> None:
    """A partition that keeps receiving records is rarely settled: what ends its arrival is
    the source's end at the time it arrived, not the end now."""
    placement, pipes = _setup()
    end = 4 * THRESHOLD
    entries, backlog, batch = _arrive(placement, pipes, end)
    placement.classify(entries, 11.0)
    assert batch.arriving[-1] is True
    backlog.state.source_end = end + 50  # new records keep coming
    _copy_to(backlog, end + 20)  # past the end at arrival, never settled
    placement.classify(entries, 12.0)
    placement.classify(entries, 13.0)
    assert batch.arriving[-2:] == [True, False]  # the window that held the last old record, then none
    assert backlog.arriving_end is None


def test_a_partition_arriving_from_a_backlog_is_not_waited_for_forever() -> None:
    placement, pipes = _setup()
    end = 4 * THRESHOLD
    entries, _backlog_entry, batch = _arrive(placement, pipes, end)
    for second in range(11, 11 + int(moves.ARRIVING_S) + 2):  # its acknowledgements never come
        placement.classify(entries, float(second))
    assert batch.arriving[1] is True and batch.arriving[-1] is False


def test_a_partition_starting_behind_the_source_end_in_the_realtime_pipeline_is_arriving() -> None:
    placement, pipes = _setup()
    realtime = pipes["realtime"]
    assert placement.arrival(realtime, 100, 100 + THRESHOLD // 2) == 100 + THRESHOLD // 2
    assert placement.arrival(realtime, 100, 100) is None  # nothing old to copy
    assert placement.arrival(pipes["catchup"], 100, 100 + 2 * THRESHOLD) is None  # not the realtime pipeline
