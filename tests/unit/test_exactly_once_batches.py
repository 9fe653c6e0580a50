"""Exactly-once routes in batch copy mode: which pipelines the worker builds for them, with which
transactional ids and lease, and which routes stay record by record (no network: the pipelines
are built, never started)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from strait.config import StraitConfig, parse_config
from strait.fencing import PIPELINES, transactional_id, worker_transactional_ids
from strait.worker.agent import copier_factory, copy_mode
from strait.worker.batch.remote import BacklogProcess
from strait.worker.batch.transactional import TransactionalBatchPipeline
from strait.worker.copier import BATCH, CATCHUP, REALTIME, REALTIME_BATCH, Copier
from strait.worker.lease import Lease
from strait.worker.transactional import TransactionalPipeline

# Nothing listens there: the clients are made, never used.
NOWHERE = {"bootstrap.servers": "127.0.0.1:9"}


def _config(**route: Any) -> StraitConfig:
    options = {"name": "r", "source": "src", "destination": "dst", "delivery": "exactly-once", **route}
    return parse_config({"clusters": {"src": NOWHERE, "dst": NOWHERE}, "routes": [options]}, environ={})


@pytest.fixture
def build() -> Iterator[Any]:
    made: list[Copier] = []

    def make(lease: Lease | None = None, **route: Any) -> Copier:
        config = _config(**route)
        copier = copier_factory(config, "w.1", lease=lease)(config.routes[0])
        assert isinstance(copier, Copier)
        made.append(copier)
        return copier

    yield make
    for copier in made:
        copier.stop(drain=False, timeout_s=0)


@pytest.mark.parametrize("offset_map", [True, False])
def test_an_exactly_once_route_copies_whole_batches_with_or_without_an_offset_map(offset_map: bool) -> None:
    route = _config(offset_map=offset_map).routes[0]
    assert copy_mode(route) == ("batch", "")


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"copy": "record"}, "route option copy: record"),
        ({"offset_map": False, "copy": "record"}, "route option copy: record"),
        ({"offset_map": False, "active_active": True}, "active-active exactly-once route"),
    ],
)
def test_exactly_once_routes_that_stay_record_by_record(options: dict[str, Any], reason: str) -> None:
    mode, why = copy_mode(_config(**options).routes[0])
    assert mode == "record" and why.startswith(reason)


def test_the_batch_pipelines_are_transactional_with_ids_of_their_own(build: Any) -> None:
    lease = Lease(10.0)
    copier = build(lease=lease, offset_map=False, realtime_copy="batch")
    moves = copier._moves
    assert isinstance(moves.realtime, TransactionalPipeline) and isinstance(moves.catchup, TransactionalPipeline)
    # In this process, not the at-least-once backlog process.
    assert isinstance(moves.batch, TransactionalBatchPipeline) and not isinstance(moves.batch, BacklogProcess)
    assert isinstance(moves.realtime_batch, TransactionalBatchPipeline)
    ids = {
        REALTIME: moves.realtime._transactional_id,
        CATCHUP: moves.catchup._transactional_id,
        BATCH: moves.batch._transactional_id,
        REALTIME_BATCH: moves.realtime_batch._transactional_id,
    }
    assert ids == {name: transactional_id("r", "w.1", name) for name in ids}
    # The controller fences every one of them.
    assert set(ids.values()) == set(worker_transactional_ids(["r"], "w.1"))
    assert set(PIPELINES) == set(ids)
    for pipeline in (moves.batch, moves.realtime_batch):
        assert pipeline._lease == lease.valid
        assert pipeline._group == "strait.r"
    lease.revoke()
    assert not moves.batch._lease()


def test_the_route_options_reach_the_batch_pipelines(build: Any) -> None:
    copier = build(offset_map=False, transaction_interval_ms=250, transaction_max_bytes=1 << 20)
    batch = copier._moves.batch
    assert isinstance(batch, TransactionalBatchPipeline)
    assert batch._interval_s == 0.25 and batch._max_bytes == 1 << 20


def test_the_batch_pipelines_write_the_offset_map_when_the_route_keeps_one(build: Any) -> None:
    with_map = build()._moves
    assert isinstance(with_map.batch, TransactionalBatchPipeline)
    assert isinstance(with_map.realtime_batch, TransactionalBatchPipeline)
    for pipeline in (with_map.batch, with_map.realtime_batch, with_map.realtime):
        assert pipeline._map is not None and pipeline._map.topic == "__strait_offsets.r"
    without = build(offset_map=False)._moves
    for pipeline in (without.batch, without.realtime_batch, without.realtime):
        assert pipeline._map is None
