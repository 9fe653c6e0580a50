"""The copier with ``copy: batch``: lagging partitions start in the batch pipeline and caught-up
ones in the realtime batch pipeline (or, with ``realtime_copy: record``, the realtime record
pipeline), they move between the two as their lag changes, a partition
handed to record mode moves to a record pipeline at its checkpoint for good, and stats and
`strait status` say which mode and why."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from strait.cli.status import render
from strait.config import RouteConfig
from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    TopicSpec,
    WorkerRecord,
    WorkerState,
)
from strait.metrics.observatory import Observatory, ObservatorySettings
from strait.worker import moves, starts
from strait.worker.agent import copy_mode
from strait.worker.copier import Copier
from strait.worker.origin import OriginRule
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask
from tests.unit.test_metrics import SnapshotStore
from tests.unit.test_worker_copier import FakeCheckpoints, FakeDestinations, FakePipeline, _task, _wait_for


class FakeBatchPipeline(FakePipeline):
    def __init__(self, *, name: str, **options: Any) -> None:
        super().__init__(name=name, **options)
        self.options = options

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        super().add(state, offset, move=move)
        state.mode = "batch"


def make(
    copy: Any, reason: str = "", threshold: int | None = 1000, realtime_copy: Any = "record", **options: Any
) -> Copier:
    return Copier(
        route="a-b",
        source={"bootstrap.servers": "127.0.0.1:1"},
        destination={"bootstrap.servers": "127.0.0.1:1"},
        group_id="strait-a-b",
        worker_id="w1",
        commit_interval_s=0.02,
        catchup_lag_threshold=threshold,
        pipeline_factory=FakePipeline,
        batch_factory=FakeBatchPipeline,
        checkpoints=FakeCheckpoints(),
        destinations=FakeDestinations(),
        copy=copy,
        copy_reason=reason,
        realtime_copy=realtime_copy,
        **options,
    )


@pytest.fixture
def batch_copier(monkeypatch: pytest.MonkeyPatch) -> Iterator[Copier]:
    monkeypatch.setattr(starts, "START_RETRY_S", 0.05)
    copier = make("batch")
    copier.start()
    yield copier
    copier.stop(drain=False, timeout_s=1)


def lagging(copier: Copier, *tasks: PartitionTask, end: int = 5000) -> None:
    """Give the partitions a backlog (the fake source's end offset) before they start."""
    checkpoints: FakeCheckpoints = copier._checkpoints  # type: ignore[assignment]
    for task in tasks:
        checkpoints.ranges[task] = (0, end)


def test_lagging_partitions_start_in_batch_mode_and_caught_up_ones_record_by_record(batch_copier: Copier) -> None:
    behind, current = _task(0), _task(1)
    lagging(batch_copier, behind)
    batch_copier.assign([behind, current])
    batch: FakeBatchPipeline = batch_copier._batch  # type: ignore[assignment]
    realtime: FakePipeline = batch_copier._realtime  # type: ignore[assignment]
    _wait_for(lambda: behind in batch.states and current in realtime.states)
    stats = batch_copier.stats()
    assert stats[behind].pipeline == "batch" and stats[behind].mode == "batch"
    assert stats[behind].mode_reason == "lagging: more than 1,000 records behind"
    assert stats[current].pipeline == "realtime" and stats[current].mode == "record"
    assert stats[current].mode_reason == "caught up: batch mode once more than 1,000 records behind"
    assert realtime.adds == [(current, 0)] and batch.adds == [(behind, 0)]


def test_caught_up_partitions_copy_whole_batches_in_the_realtime_batch_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(starts, "START_RETRY_S", 0.05)
    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.0)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.02)
    copier = make("batch", realtime_copy="batch")
    copier.start()
    try:
        behind, current = _task(0), _task(1)
        lagging(copier, behind, end=1500)
        copier.assign([behind, current])
        batch: FakeBatchPipeline = copier._batch  # type: ignore[assignment]
        realtime_batch: FakeBatchPipeline = copier._moves.realtime_batch  # type: ignore[assignment]
        assert realtime_batch.name == "realtime-batch" and not copier._realtime.states  # type: ignore[attr-defined]
        _wait_for(lambda: behind in batch.states and current in realtime_batch.states)
        stats = copier.stats()
        assert stats[current].pipeline == "realtime-batch" and stats[current].mode == "batch"
        assert stats[current].mode_reason == moves.caught_up_batch_reason()
        # The backlog drained: it joins the other caught-up partition, at its checkpoint.
        state = batch.states[behind]
        batch.send(state, 1399)
        batch.ack(state, 1399)
        _wait_for(lambda: realtime_batch.adds == [(current, 0), (behind, 1400)])
        stats = copier.stats()
        assert stats[behind].pipeline == "realtime-batch" and stats[behind].mode == "batch"
    finally:
        copier.stop(drain=False, timeout_s=1)


def test_a_two_way_routes_caught_up_partitions_copy_whole_batches_whatever_realtime_copy_says() -> None:
    """Its record pipelines could not tell the opposite route's whole-batch copies from user
    records (strait.worker.batch.provenance); its batch pipelines get the origin rule."""
    origin = OriginRule("a", "b")
    copier = make("batch", realtime_copy="record", origin=origin)
    copier.start()
    try:
        current = _task(1)
        copier.assign([current])
        realtime_batch: FakeBatchPipeline = copier._moves.realtime_batch  # type: ignore[assignment]
        _wait_for(lambda: current in realtime_batch.states)
        assert copier.stats()[current].mode == "batch" and not copier._realtime.states  # type: ignore[attr-defined]
        batch: FakeBatchPipeline = copier._batch  # type: ignore[assignment]
        assert realtime_batch.options["origin"] is origin and batch.options["origin"] is origin
        assert copier._moves._keep_batches
    finally:
        copier.stop(drain=False, timeout_s=1)


def test_without_a_threshold_every_partition_starts_in_batch_mode() -> None:
    copier = make("batch", threshold=None)
    copier.start()
    try:
        task = _task(0)
        copier.assign([task])
        batch: FakeBatchPipeline = copier._batch  # type: ignore[assignment]
        _wait_for(lambda: task in batch.states)
        stats = copier.stats()[task]
        assert stats.pipeline == "batch" and stats.mode == "batch" and stats.mode_reason == ""
    finally:
        copier.stop(drain=False, timeout_s=1)


def test_a_partition_moves_to_record_mode_once_caught_up_and_back_when_it_lags_again(
    batch_copier: Copier, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.0)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.02)
    task = _task(0)
    lagging(batch_copier, task, end=1500)
    batch_copier.assign([task])
    batch: FakeBatchPipeline = batch_copier._batch  # type: ignore[assignment]
    realtime: FakePipeline = batch_copier._realtime  # type: ignore[assignment]
    _wait_for(lambda: task in batch.states)
    state = batch.states[task]
    # 1,300 records copied (batches ending at 999 and 1299): 200 behind, under a quarter of 1,000.
    batch.send(state, 999, 1299)
    batch.ack(state, 999)
    assert batch_copier.stats()[task].pipeline == "batch"  # not while a batch is in flight
    batch.ack(state, 1299)
    _wait_for(lambda: realtime.adds == [(task, 1300)])
    stats = batch_copier.stats()[task]
    assert stats.pipeline == "realtime" and stats.mode == "record" and stats.mode_reason.startswith("caught up")
    state.source_end = 3000  # a burst: 1,700 behind
    _wait_for(lambda: batch.adds == [(task, 0), (task, 1300)])
    stats = batch_copier.stats()[task]
    assert stats.pipeline == "batch" and stats.mode == "batch" and stats.mode_reason.startswith("lagging")


def test_record_mode_moves_the_partition_at_its_checkpoint(batch_copier: Copier) -> None:
    task = _task(0)
    lagging(batch_copier, task)
    batch_copier.assign([task])
    batch: FakeBatchPipeline = batch_copier._batch  # type: ignore[assignment]
    realtime: FakePipeline = batch_copier._realtime  # type: ignore[assignment]
    _wait_for(lambda: task in batch.states)
    state = batch.states[task]
    batch.send(state, 3, 7, 11)  # three batches, ending at offsets 3, 7 and 11
    batch.ack(state, 3, 7)
    # The pipeline found a batch that cannot pass; the batch ending at 11 is still in flight.
    state.mode, state.mode_reason = "record", "codec_mismatch: source batches are lz4, destination zstd"
    _wait_for(lambda: batch_copier.stats()[task].state == "moving")
    assert realtime.adds == []  # not while a batch is in flight
    batch.fail(state, 11)
    _wait_for(lambda: realtime.adds == [(task, 8)])
    stats = batch_copier.stats()[task]
    assert stats.pipeline == "realtime" and stats.mode == "record"
    assert stats.mode_reason.startswith("codec_mismatch")


def test_a_partition_whose_batches_cannot_pass_never_goes_back_to_batch_mode(
    batch_copier: Copier, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.0)
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.02)
    task = _task(0)
    lagging(batch_copier, task)
    batch_copier.assign([task])
    batch: FakeBatchPipeline = batch_copier._batch  # type: ignore[assignment]
    realtime: FakePipeline = batch_copier._realtime  # type: ignore[assignment]
    catchup: FakePipeline = batch_copier._catchup  # type: ignore[assignment]
    _wait_for(lambda: task in batch.states)
    state = batch.states[task]
    state.mode, state.mode_reason = "record", "compacted_gap: offsets 4..9 missing"
    _wait_for(lambda: realtime.adds == [(task, 0)])
    # Still 5,000 behind: the record catch-up pipeline takes it, not the batch pipeline.
    _wait_for(lambda: catchup.adds == [(task, 0)])
    stats = batch_copier.stats()[task]
    assert stats.pipeline == "catchup" and stats.mode == "record"
    assert stats.mode_reason == "compacted_gap: offsets 4..9 missing"
    catchup.send(state, 4990, 4999)
    catchup.ack(state, 4990, 4999)
    _wait_for(lambda: realtime.adds == [(task, 0), (task, 5000)])
    state.source_end = 50_000
    _wait_for(lambda: catchup.adds == [(task, 0), (task, 5000)])
    assert batch.adds == [(task, 0)]
    assert batch_copier.stats()[task].mode_reason == "compacted_gap: offsets 4..9 missing"


def test_record_routes_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    copier = make("record", "route option copy: record")
    copier.start()
    try:
        task = _task(0)
        copier.assign([task])
        _wait_for(lambda: task in copier.stats() and copier.stats()[task].pipeline == "realtime")
        stats = copier.stats()[task]
        assert stats.mode == "record" and stats.mode_reason == "route option copy: record"
        assert copier._batch is None
    finally:
        copier.stop(drain=False, timeout_s=1)


def route(**options: Any) -> RouteConfig:
    return RouteConfig.model_validate({"name": "r", "source": "a", "destination": "b", **options})


def test_batch_is_the_default_where_the_route_allows_it() -> None:
    assert route().copy_mode == "batch"
    assert copy_mode(route()) == ("batch", "")
    assert copy_mode(route(copy="batch")) == ("batch", "")
    assert copy_mode(route(delivery="at-least-once", offset_map=False, naming={"prefix": "a."})) == ("batch", "")
    # Two-way routes too: copies are told by their producer ids (strait.worker.batch.provenance).
    assert copy_mode(route(active_active=True)) == ("batch", "")
    # Exactly-once routes, with the offset map (the default) or without, in transactions.
    assert copy_mode(route(delivery="exactly-once")) == ("batch", "")
    assert copy_mode(route(delivery="exactly-once", offset_map=False)) == ("batch", "")


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"copy": "record"}, "route option copy: record"),
        ({"active_active": True, "delivery": "exactly-once"}, "active-active exactly-once route"),
        ({"active_active": True, "copy": "record"}, "route option copy: record"),
        # What the route asked for comes first: nothing fell back.
        ({"delivery": "exactly-once", "copy": "record"}, "route option copy: record"),
    ],
)
def test_record_mode_where_the_route_asks_for_it_or_cannot_take_batches(options: dict[str, Any], reason: str) -> None:
    mode, why = copy_mode(route(**options))
    assert mode == "record" and why.startswith(reason)


def test_copy_takes_record_or_batch_only() -> None:
    with pytest.raises(ValueError, match="copy"):
        route(copy="bytes")


def _fleet_view() -> dict[str, Any]:
    keys = [PartitionKey("bulk", "logs", p) for p in range(3)]
    keys += [PartitionKey("plain", "t", 0), PartitionKey("tx", "t", 0)]
    partitions = {
        str(keys[0]): {"bytes": 1, "mode": "batch", "mode_reason": ""},
        str(keys[1]): {"bytes": 1, "mode": "batch", "mode_reason": ""},
        str(keys[2]): {"bytes": 1, "mode": "record", "mode_reason": "compacted_gap: offsets 4..9 missing"},
        str(keys[3]): {"bytes": 1, "mode": "record", "mode_reason": "route option copy: record"},
        str(keys[4]): {"bytes": 1, "mode": "record", "mode_reason": "exactly-once route with an offset map"},
    }
    snapshot = ClusterSnapshot(
        topics={
            ("bulk", "logs"): TopicSpec("bulk", "logs", "logs", partitions=3),
            ("plain", "t"): TopicSpec("plain", "t", "t", partitions=1),
            ("tx", "t"): TopicSpec("tx", "t", "t", partitions=1),
        },
        removed=frozenset(),
        workers={"w1": WorkerRecord("w1", WorkerState.ACTIVE)},
        stats={"w1": {"updated": 99.0, "partitions": partitions}},
        assignment=Assignment(dict.fromkeys(keys, "w1"), version=1),
        leader=LeaderInfo("c1", "http://x"),
    )
    observatory = Observatory(
        store=SnapshotStore(snapshot),  # type: ignore[arg-type]
        offsets=lambda keys: {k: (0, 0) for k in keys},
        controller_id="c1",
        settings=ObservatorySettings(),
        clock=lambda: 100.0,
    )
    observatory.sample()
    return observatory.view()


def test_status_shows_each_copy_mode_and_why_record_by_record() -> None:
    view = _fleet_view()
    assert {"route": "bulk", "mode": "batch", "reason": "", "partitions": 2} in view["copy_modes"]
    console = Console(file=io.StringIO(), width=200)
    console.print(render(view))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Copy modes" in text and "compacted_gap: offsets 4..9 missing" in text
    # A route that fell back to record mode says why; one that chose record mode is left out.
    assert "exactly-once route with an offset map" in text
    assert "route option copy: record" not in text


@pytest.mark.parametrize("how", ["revoke", "abandon"])
def test_counters_go_on_when_the_partition_is_assigned_here_again(batch_copier: Copier, how: str) -> None:
    """A worker frozen past its session gives its partitions up (abandon or revoke) and takes
    them again: its per-partition counters, Prometheus counters, go on from where they were."""
    task = _task(0)
    batch: FakeBatchPipeline = batch_copier._batch  # type: ignore[assignment]
    lagging(batch_copier, task)
    batch_copier.assign([task])
    _wait_for(lambda: task in batch.states)
    first = batch.states[task]
    first.records, first.bytes, first.rewinds = 300, 3000, 1
    if how == "revoke":
        assert batch_copier.revoke([task], timeout_s=5) == set()
    else:
        batch_copier.abandon()
        _wait_for(lambda: task not in batch_copier.assigned())
    batch_copier.assign([task])
    _wait_for(lambda: task in batch.states and batch.states[task] is not first)
    batch.states[task].records += 100
    batch.states[task].bytes += 1000
    stats = batch_copier.stats()[task]
    assert (stats.records, stats.bytes, stats.rewinds) == (400, 4000, 1)
