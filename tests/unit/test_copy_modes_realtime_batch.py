"""A ``copy: batch`` route with a realtime batch pipeline (strait.worker.moves): caught-up
partitions copy whole batches there, lagging ones in the batch pipeline, and only those whose
batches cannot pass unchanged (for good) or were found too small (for a while) go record by
record. Pure, over generated histories, as test_copy_modes."""

from __future__ import annotations

import random

import pytest

from strait.worker import moves
from strait.worker.checkpoint import AckTracker
from strait.worker.entries import Entry
from strait.worker.moves import Moves, caught_up_batch_reason, caught_up_reason, lagging_reason, sparse_reason
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask
from tests.unit.test_copy_modes import (
    FALLBACK,
    THRESHOLD,
    Pipe,
    SharingPipe,
    _copy,
    _copy_to,
    _fetch_batches,
    _start,
    moves_made,
)


def _setup(auto: bool = False) -> tuple[Moves, dict[str, Pipe]]:
    """Moves over the four pipelines: ``realtime_copy: batch``, or ``auto``."""
    pipes = {name: Pipe(name) for name in ("realtime", "catchup", "realtime-batch")}
    pipes["batch"] = SharingPipe("batch")
    placement = Moves(
        realtime=pipes["realtime"],  # type: ignore[arg-type]
        catchup=pipes["catchup"],  # type: ignore[arg-type]
        batch=pipes["batch"],  # type: ignore[arg-type]
        threshold=THRESHOLD,
        realtime_batch=pipes["realtime-batch"],  # type: ignore[arg-type]
        auto=auto,
    )
    return placement, pipes


def _settle(placement: Moves, pipes: dict[str, Pipe], entry: Entry, now: float) -> None:
    for pipe in pipes.values():
        pipe.settle()
    placement.advance(entry, now)
    assert entry.phase == "running"


def test_a_caught_up_partition_starts_in_the_realtime_batch_pipeline() -> None:
    placement, pipes = _setup()
    trickle, backlog = _start(placement, THRESHOLD), _start(placement, THRESHOLD + 1)
    assert trickle.pipeline is pipes["realtime-batch"] and trickle.state.mode == "batch"
    assert trickle.state.mode_reason == caught_up_batch_reason()
    assert backlog.pipeline is pipes["batch"]
    assert placement.pipelines() == [pipes[n] for n in ("realtime", "catchup", "realtime-batch", "batch")]
    assert placement.arrival(pipes["realtime-batch"], 0, 10) == 10  # old records: arriving
    # Realtime partitions in either realtime pipeline make the batch pipeline share.
    placement.classify([trickle, backlog], 10.0)
    assert pipes["batch"].told == [True]  # type: ignore[attr-defined]


def test_without_a_threshold_or_a_batch_pipeline_there_is_no_realtime_batch_pipeline() -> None:
    pipes = {name: Pipe(name) for name in ("realtime", "catchup", "batch", "realtime-batch")}
    for batch, threshold in [(pipes["batch"], None), (None, THRESHOLD)]:
        placement = Moves(
            realtime=pipes["realtime"],  # type: ignore[arg-type]
            catchup=pipes["catchup"],  # type: ignore[arg-type]
            batch=batch,  # type: ignore[arg-type]
            threshold=threshold,
            realtime_batch=pipes["realtime-batch"],  # type: ignore[arg-type]
        )
        assert placement.realtime_batch is None
        assert pipes["realtime-batch"] not in placement.pipelines()


def test_compressed_small_batches_go_record_by_record_for_a_while_then_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    placement, pipes = _setup()
    entry = _start(placement, 5)
    state = entry.state
    # Small batches that merge (uncompressed) pay in batch mode: it stays.
    _fetch_batches(state, 1000, 4)
    state.batches_merged_fetched = 1000
    placement.classify([entry], 10.0)
    assert entry.phase == "running" and entry.pipeline is pipes["realtime-batch"]
    # Small compressed ones do not.
    state.batches_merged_fetched = 0
    placement.classify([entry], 11.0)
    assert entry.phase == "moving" and entry.target is pipes["realtime"]
    _settle(placement, pipes, entry, 11.0)
    assert state.mode == "record" and state.mode_reason == sparse_reason()
    placement.classify([entry], 11.0 + moves.SPARSE_HOLD_S - 1)
    assert entry.phase == "running" and entry.pipeline is pipes["realtime"]
    now = 11.0 + moves.SPARSE_HOLD_S
    placement.classify([entry], now)
    assert entry.phase == "moving" and entry.target is pipes["realtime-batch"]
    _settle(placement, pipes, entry, now)
    assert state.mode == "batch" and state.mode_reason == caught_up_batch_reason()
    assert state.batches_fetched == state.batches_merged_fetched == 0  # judged afresh


@pytest.mark.parametrize("seed", range(60))
def test_generated_histories_keep_the_rules(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    dwell = rng.choice([0.0, 5.0])
    monkeypatch.setattr(moves, "MIN_DWELL_S", dwell)
    placement, pipes = _setup()
    batch, realtime, realtime_batch, catchup = (pipes[n] for n in ("batch", "realtime", "realtime-batch", "catchup"))
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
        state.source_end = tracker.next_offset + rng.choice([0, 10, THRESHOLD // 4, THRESHOLD // 2, 2 * THRESHOLD])
        _copy(entry, rng)
        in_batch_mode = entry.pipeline in (batch, realtime_batch)
        if in_batch_mode and entry.phase == "running" and not fell_back and rng.random() < 0.02:
            state.mode, state.mode_reason = "record", FALLBACK  # a batch pipeline's fallback
        if in_batch_mode and rng.random() < 0.01:
            _fetch_batches(state, moves.SPARSE_JUDGED_BATCHES, 3)  # small compressed batches
        for pipe in pipes.values():
            pipe.settle()
        before, phase, lag = entry.pipeline, entry.phase, state.lag
        placement.classify([entry], now)
        placement.to_record_mode([entry])
        if phase == "running" and entry.phase == "moving":
            assert lag is not None
            to = entry.target
            if state.mode == "record" and before in (batch, realtime_batch) and state.mode_reason == FALLBACK:
                assert to is realtime  # a fallback moves at once, whatever the lag
            else:
                assert now - entry.since >= dwell
                if to in (batch, catchup):
                    # (Found sparse while lagging: the record catch-up pipeline.)
                    assert lag > THRESHOLD or (to is catchup and now < entry.sparse_until)
                elif to is realtime_batch:
                    assert lag <= THRESHOLD // 4 and now >= entry.sparse_until and not entry.batch_fallback
                else:
                    assert to is realtime and (lag <= THRESHOLD // 4 or now < entry.sparse_until)
            released = state.tracker
        if entry.phase == "moving":
            adds = sum(len(p.adds) for p in pipes.values())
            placement.advance(entry, now)
            if entry.phase == "running":
                assert sum(len(p.adds) for p in pipes.values()) == adds + 1
                assert released is not None and released.in_flight == 0
                assert state.tracker is not None and state.tracker.position == released.position
                resumed_at.append(state.tracker.position)
                fell_back = fell_back or state.mode_reason == FALLBACK
        if entry.phase == "running":
            if fell_back:
                assert entry.batch_fallback and entry.pipeline in (realtime, catchup)
                assert state.mode == "record" and state.mode_reason == FALLBACK
            elif entry.pipeline is batch:
                assert state.mode == "batch" and state.mode_reason == lagging_reason(THRESHOLD)
            elif entry.pipeline is realtime_batch:
                assert state.mode == "batch" and state.mode_reason == caught_up_batch_reason()
            else:
                # Record by record only for small batches (said when found), and after the hold
                # only until the lag allows a move back.
                assert state.mode == "record"
                assert state.mode_reason in (sparse_reason(), caught_up_reason(THRESHOLD))
                assert entry.sparse_until > 0
    assert resumed_at == sorted(resumed_at), "a move never goes back in the source"


def test_generated_histories_cover_every_kind_of_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """The histories above do reach each move (the test could not pass by never moving)."""
    seen = moves_made(test_generated_histories_keep_the_rules, monkeypatch)
    wanted = {
        ("realtime-batch", "batch"),
        ("batch", "realtime-batch"),
        ("realtime-batch", "realtime"),  # a fallback, or small compressed batches
        ("realtime", "realtime-batch"),  # after the hold
    }
    assert wanted <= seen, wanted - seen


def _partition(placement: Moves, partition: int, end: int) -> Entry:
    entry = Entry(state=PartitionState(PartitionTask("r", "t", partition, "t")))
    pipeline = placement.first(entry.state, 0, end)
    entry.state.source_end = end
    entry.phase, entry.pipeline = "running", pipeline
    pipeline.add(entry.state, 0)
    return entry


def _each_second(placement: Moves, pipes: dict[str, Pipe], entries: list[Entry], seconds: range, rate: int) -> None:
    """``rate`` records/s acknowledged over the partitions, classified once a second, moves settled."""
    for second in seconds:
        for entry in entries:
            entry.state.records += rate // len(entries)
        placement.classify(entries, float(second))
        for entry in entries:
            if entry.phase == "moving":
                _settle(placement, pipes, entry, float(second))


def test_auto_copies_whole_batches_only_while_the_realtime_partitions_are_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.0)
    placement, pipes = _setup(auto=True)
    entries = [_partition(placement, p, 5) for p in range(4)]
    assert all(e.pipeline is pipes["realtime"] and e.state.mode == "record" for e in entries)
    _each_second(placement, pipes, entries, range(1, 10), 1_000)  # quiet: stays record by record
    assert all(e.pipeline is pipes["realtime"] for e in entries) and placement.rate == pytest.approx(1_000)
    _each_second(placement, pipes, entries, range(10, 20), 10_000)  # busy: whole batches
    assert all(e.pipeline is pipes["realtime-batch"] and e.state.mode == "batch" for e in entries)
    assert entries[0].state.mode_reason == caught_up_batch_reason()
    _each_second(placement, pipes, entries, range(20, 22), 3_000)  # between the two limits: stays
    assert all(e.pipeline is pipes["realtime-batch"] for e in entries)
    _each_second(placement, pipes, entries, range(22, 40), 500)  # quiet again
    assert all(e.pipeline is pipes["realtime"] and e.state.mode == "record" for e in entries)
    assert entries[0].state.mode_reason == caught_up_reason(THRESHOLD)
    # A partition caught up now starts record by record (the pipelines' state is not busy).
    assert _start(placement, 5).pipeline is pipes["realtime"]


def test_auto_does_not_count_a_backlog_arriving_in_the_realtime_pipelines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.0)
    placement, pipes = _setup(auto=True)
    trickle = _partition(placement, 0, 5)
    backlog = _partition(placement, 1, 10 * THRESHOLD)
    assert backlog.pipeline is pipes["batch"]
    _each_second(placement, pipes, [trickle], range(1, 4), 100)
    _copy_to(backlog, 10 * THRESHOLD)  # drained in the batch pipeline, now caught up
    backlog.state.records = 10_000_000
    _each_second(placement, pipes, [trickle, backlog], range(4, 8), 100)
    assert backlog.pipeline is pipes["realtime"]  # joined the realtime pipeline
    assert placement.rate is not None and placement.rate < moves.AUTO_RECORD_BELOW


def test_a_two_way_routes_partitions_stay_in_batch_pipelines_whatever_their_batch_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Record pipelines cannot tell the opposite route's whole-batch copies from user records
    (strait.worker.batch.provenance): small batches move a two-way route's partition nowhere."""
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.0)
    for keep, moved_to in ((False, "catchup"), (True, None)):
        pipes = {name: Pipe(name) for name in ("realtime", "catchup", "realtime-batch")}
        pipes["batch"] = SharingPipe("batch")
        placement = Moves(
            realtime=pipes["realtime"],  # type: ignore[arg-type]
            catchup=pipes["catchup"],  # type: ignore[arg-type]
            batch=pipes["batch"],  # type: ignore[arg-type]
            threshold=THRESHOLD,
            realtime_batch=pipes["realtime-batch"],  # type: ignore[arg-type]
            keep_batches=keep,
        )
        backlog, trickle = _start(placement, 100 * THRESHOLD), _start(placement, THRESHOLD)
        assert backlog.pipeline is pipes["batch"] and trickle.pipeline is pipes["realtime-batch"]
        _fetch_batches(backlog.state, moves.SPARSE_JUDGED_BATCHES, 4)
        placement.classify([backlog, trickle], 10.0)
        target = None if backlog.phase == "running" else backlog.target
        assert target is (None if moved_to is None else pipes[moved_to])
        assert trickle.phase == "running" and trickle.pipeline is pipes["realtime-batch"]
