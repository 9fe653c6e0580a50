"""Transactional ids (stable, unique) and fence()'s error handling, with a fake producer."""

from __future__ import annotations

import itertools
import threading
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from strait import clients
from strait.fencing import (
    PIPELINES,
    FenceError,
    fence,
    parse_transactional_id,
    transactional_id,
    worker_transactional_ids,
)
from strait.worker.copier import BATCH, CATCHUP, REALTIME, REALTIME_BATCH


def test_id_is_readable_and_stable() -> None:
    assert transactional_id("src-dst", "w1", "realtime") == "strait.src-dst.w1.realtime"
    assert transactional_id("src-dst", "w1", "realtime") == transactional_id("src-dst", "w1", "realtime")


def test_dots_cannot_make_two_ids_equal() -> None:
    parts = ["a", "a.b", "b", "b.c", "c", "a%2Eb", "%", "%2E", "."]
    triples = list(itertools.product(parts, parts, ["realtime", "catchup", "x.y"]))
    ids = [transactional_id(*t) for t in triples]
    assert len(set(ids)) == len(ids)
    for triple, tid in zip(triples, ids, strict=True):
        assert parse_transactional_id(tid) == triple


def test_parse_rejects_foreign_ids() -> None:
    assert parse_transactional_id("strait.r.w") is None
    assert parse_transactional_id("other.r.w.realtime") is None
    assert parse_transactional_id("strait..w.realtime") is None


def test_empty_parts_are_refused() -> None:
    with pytest.raises(ValueError, match="worker_id"):
        transactional_id("r", "", "realtime")


def test_worker_ids_cover_every_pipeline_of_each_route() -> None:
    assert worker_transactional_ids(["r1", "r2"], "host.example") == [
        "strait.r1.host%2Eexample.realtime",
        "strait.r1.host%2Eexample.catchup",
        "strait.r1.host%2Eexample.batch",
        "strait.r1.host%2Eexample.realtime-batch",
        "strait.r2.host%2Eexample.realtime",
        "strait.r2.host%2Eexample.catchup",
        "strait.r2.host%2Eexample.batch",
        "strait.r2.host%2Eexample.realtime-batch",
    ]


def test_every_pipeline_a_copier_makes_is_fenced() -> None:
    assert set(PIPELINES) == {REALTIME, CATCHUP, BATCH, REALTIME_BATCH}


class _FakeProducer:
    """Records init_transactions calls; fails for ids listed in ``failing``."""

    calls: ClassVar[list[tuple[str, float]]] = []
    failing: ClassVar[dict[str, KafkaError]] = {}
    together: ClassVar[threading.Barrier | None] = None
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, props: dict[str, Any]) -> None:
        self.tid = str(props["transactional.id"])
        self.props = props

    def init_transactions(self, timeout: float) -> None:
        if self.together is not None:
            self.together.wait()
        with self.lock:
            self.calls.append((self.tid, timeout))
        error = self.failing.get(self.tid)
        if error is not None:
            raise KafkaException(error)

    def flush(self, timeout: float) -> int:
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[_FakeProducer]:
    _FakeProducer.calls = []
    _FakeProducer.failing = {}
    _FakeProducer.together = None
    monkeypatch.setattr(clients, "producer", lambda props, **overrides: _FakeProducer({**props, **overrides}))
    return _FakeProducer


def test_fence_inits_every_id_once(fake: type[_FakeProducer]) -> None:
    fence({"bootstrap.servers": "x"}, ["b", "a", "b"], timeout_s=5)
    assert sorted(tid for tid, _ in fake.calls) == ["a", "b"]
    assert all(0 < timeout <= 5 for _, timeout in fake.calls)


def test_fence_runs_ids_side_by_side(fake: type[_FakeProducer]) -> None:
    # Each init waits until all four are inside one: fenced one after another, the first would
    # wait alone and break the barrier, and the fence would fail.
    fake.together = threading.Barrier(4, timeout=30)
    fence({}, [f"id{i}" for i in range(4)], timeout_s=60)
    assert sorted(tid for tid, _ in fake.calls) == [f"id{i}" for i in range(4)]


def test_fence_tries_every_id_and_names_the_failures(fake: type[_FakeProducer]) -> None:
    fake.failing = {"b": KafkaError(KafkaError._TIMED_OUT, "coordinator unreachable")}
    with pytest.raises(FenceError) as info:
        fence({}, ["a", "b", "c"], timeout_s=5)
    assert sorted(tid for tid, _ in fake.calls) == ["a", "b", "c"]
    assert list(info.value.failures) == ["b"]
    assert "_TIMED_OUT" in info.value.failures["b"]


def test_fence_of_nothing_does_nothing(fake: type[_FakeProducer]) -> None:
    fence({}, [], timeout_s=1)
    assert fake.calls == []
