"""Exactly-once routes in batch copy mode: which pipelines the worker builds for them, with which
transactional ids and lease, and which routes stay record by record (no network: the pipelines
are built, never started)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from strait.config import StraitConfig, parse_config
from strait.fencing import PIPELINES, transactional_id, worker_transactional_ids
from strait.worker.agent import EXACTLY_ONCE_OFFSET_MAP, copier_factory, copy_mode
from strait.worker.batch.remote import BacklogProcess
from strait.worker.batch.transactional import TransactionalBatchPipeline
from strait.worker.copier import BATCH, CATCHUP, REALTIME, REALTIME_BATCH, Copier
from strait.worker.exactly_once import exactly_once_parts
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


def test_an_exactly_once_route_without_an_offset_map_copies_whole_batches() -> None:
    route = _config(offset_map=False).routes[0]
    assert copy_mode(route) == ("batch", "")


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({}, EXACTLY_ONCE_OFFSET_MAP),  # the offset map is on by default
        ({"offset_map": True, "copy": "batch"}, EXACTLY_ONCE_OFFSET_MAP),
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


def test_an_exactly_once_route_with_an_offset_map_has_no_batch_pipeline(build: Any) -> None:
    copier = build()
    moves = copier._moves
    assert moves.batch is None and moves.realtime_batch is None
    assert isinstance(moves.realtime, TransactionalPipeline)
    assert copier._copy_reason == EXACTLY_ONCE_OFFSET_MAP


def test_batch_pipelines_with_an_offset_map_are_refused() -> None:
    route = _config().routes[0]
    with pytest.raises(ValueError, match="offset map"):
        exactly_once_parts(route, source=NOWHERE, destination=NOWHERE, worker_id="w1", batches=True)
