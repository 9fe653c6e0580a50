"""The controller's offset probe around in-memory clients: a read that hangs or goes unanswered
ends, and the next round asks fresh clients (a hung read would leave healing blind)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from strait.config import StraitConfig
from strait.coordination.model import PartitionKey
from strait.metrics import probe as probe_module
from strait.metrics.probe import OffsetProbe

CONFIG = StraitConfig.model_validate(
    {
        "zookeeper": {"connect": "127.0.0.1:2181"},
        "clusters": {"a": {"bootstrap.servers": "127.0.0.1:9092"}, "b": {"bootstrap.servers": "127.0.0.1:9093"}},
        "routes": [{"name": "r", "source": "a", "destination": "b"}],
    }
)
KEYS = [PartitionKey("r", "t", 0), PartitionKey("r", "t", 1)]


class Reader:
    def __init__(self, hang: threading.Event | None = None) -> None:
        self.hang = hang

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.hang is not None:
            self.hang.wait()
        return [TopicPartition(tp.topic, tp.partition, 5) for tp in tps]

    def close(self) -> None:
        pass


class _Answer:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class Admin:
    """End offsets answered (``ends``), failed (a KafkaError code) or never answered (None)."""

    def __init__(self, ends: dict[int, int | None]) -> None:
        self.ends = ends

    def list_offsets(self, specs: dict[TopicPartition, Any], **_: Any) -> dict[TopicPartition, Future[Any]]:
        out: dict[TopicPartition, Future[Any]] = {}
        for tp in specs:
            future: Future[Any] = Future()
            end = self.ends[tp.partition]
            if end is None:
                pass  # never answered
            elif end < 0:
                future.set_exception(KafkaException(KafkaError(-end)))
            else:
                future.set_result(_Answer(end))
            out[tp] = future
        return out


def _probe(monkeypatch: pytest.MonkeyPatch, readers: list[Reader], admins: list[Admin]) -> OffsetProbe:
    """A probe whose clients come from ``readers`` and ``admins`` in turn (each use pops one)."""
    monkeypatch.setattr(probe_module.clients, "consumer", lambda *_, **__: readers.pop(0))
    monkeypatch.setattr(probe_module.clients, "admin", lambda *_, **__: admins.pop(0))
    return OffsetProbe(CONFIG)


def test_a_read_answers_checkpoint_and_end_per_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _probe(monkeypatch, [Reader()], [Admin({0: 9, 1: 5})])
    assert probe.read(KEYS) == {KEYS[0]: (5, 9), KEYS[1]: (5, 5)}
    assert probe.read(KEYS) == {KEYS[0]: (5, 9), KEYS[1]: (5, 5)}  # the same clients again


def test_a_read_that_never_returns_is_given_up_and_the_next_round_has_fresh_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probe_module, "HUNG_AFTER_S", 0.2)
    hang = threading.Event()
    probe = _probe(monkeypatch, [Reader(hang), Reader()], [Admin({0: 9, 1: 5}), Admin({0: 12, 1: 5})])
    try:
        assert probe.read(KEYS) == {}  # not judged this round, and no exception
        assert probe.abandoned == 1
        assert probe.read(KEYS) == {KEYS[0]: (5, 12), KEYS[1]: (5, 5)}
    finally:
        hang.set()
        probe.close()


def test_an_end_offset_never_answered_ends_the_round_and_drops_the_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_module, "TIMEOUT_S", 0.1)
    probe = _probe(monkeypatch, [Reader()], [Admin({0: None, 1: 5}), Admin({0: 9, 1: 5})])
    assert probe.read(KEYS) == {}
    assert probe.read(KEYS) == {KEYS[0]: (5, 9), KEYS[1]: (5, 5)}


def test_a_failed_end_offset_asks_a_new_admin_next_round_unless_the_topic_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone, stale = -KafkaError.UNKNOWN_TOPIC_OR_PART, -KafkaError.NOT_LEADER_FOR_PARTITION
    admins = [Admin({0: stale, 1: 5}), Admin({0: gone, 1: 6}), Admin({0: 0, 1: 0})]
    probe = _probe(monkeypatch, [Reader()], admins)
    assert probe.read(KEYS) == {KEYS[0]: (5, None), KEYS[1]: (5, 5)}  # unknown end: not judged
    assert probe.read(KEYS) == {KEYS[0]: (5, None), KEYS[1]: (5, 6)}  # a new admin answered
    assert probe.read(KEYS) == {KEYS[0]: (5, None), KEYS[1]: (5, 6)}  # a gone topic keeps its admin
    assert len(admins) == 1
