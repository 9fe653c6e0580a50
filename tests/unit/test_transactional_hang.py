"""A transaction call that never returns (librdkafka #5456/#5511) must not hold partitions forever."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from strait.worker import transactional
from strait.worker.deadline import CallHung, DeadlineRunner
from strait.worker.pipeline import PartitionState, PipelineSettings
from strait.worker.task import PartitionTask
from strait.worker.transactional import TransactionalPipeline
from tests.unit.test_record_pipeline import TOPIC, FakeConsumer, FakeProducer


def test_the_runner_returns_results_and_raises_the_calls_errors() -> None:
    runner = DeadlineRunner("t")
    assert runner.call(lambda a, b: a + b, 1, 2, deadline_s=5) == 3
    with pytest.raises(ZeroDivisionError):
        runner.call(lambda: 1 / 0, deadline_s=5)
    runner.close()


def test_the_runner_gives_up_at_the_deadline_and_serves_the_next_call_on_a_fresh_thread() -> None:
    runner = DeadlineRunner("t")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(CallHung):
        runner.call(release.wait, deadline_s=0.2)
    assert time.monotonic() - started < 2 and runner.abandoned == 1
    assert runner.call(lambda: "next", deadline_s=5) == "next"
    release.set()
    runner.close()


class TxnProducer(FakeProducer):
    """The fake producer with a transactional API; send_offsets_to_transaction can hang."""

    def __init__(self, hang: threading.Event | None = None) -> None:
        super().__init__()
        self.hang = hang
        self.calls: list[str] = []

    def init_transactions(self, *_: Any) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, *_: Any) -> None:
        self.calls.append("send_offsets")
        if self.hang is not None:
            self.hang.wait()

    def commit_transaction(self, *_: Any) -> None:
        self.calls.append("commit")
        self.ack()

    def abort_transaction(self, *_: Any) -> None:
        self.calls.append("abort")
        self.pending.clear()

    def flush(self, timeout: float = 0) -> int:
        self.ack()
        return 0


def test_a_hung_send_offsets_replaces_the_producer_and_resumes_from_the_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    hang = threading.Event()
    stuck = TxnProducer(hang)
    healthy = TxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = TransactionalPipeline(
        transactional_id=lambda name: f"strait.r.w1.{name}",
        checkpoint_group="strait.r",
        name="realtime",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        settings=PipelineSettings(batch_size=1000),
        consumer=consumer,
        producer=stuck,
    )
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: healthy)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    try:
        for _ in range(5):
            pipeline._step()
        assert "send_offsets" in stuck.calls and pipeline._producer is healthy
        assert state.checkpoint == 0 and state.error is None, "nothing of the stuck transaction may count"
        # The partition is not held by the stuck call: a hand-over completes.
        done = pipeline.release(state)
        for _ in range(5):
            pipeline._step()
        assert done.is_set()
    finally:
        hang.set()
    assert healthy.calls[0] == "init"


def test_after_a_hang_every_record_is_committed_once_by_the_new_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    hang = threading.Event()
    stuck, healthy = TxnProducer(hang), TxnProducer()
    pipeline = TransactionalPipeline(
        transactional_id=lambda name: f"strait.r.w1.{name}",
        checkpoint_group="strait.r",
        name="realtime",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        consumer=FakeConsumer({0: list(range(5))}),
        producer=stuck,
    )
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: healthy)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    try:
        for _ in range(20):
            pipeline._step()
            time.sleep(0.01)
    finally:
        hang.set()
    assert healthy.destination.get(0) == [0, 1, 2, 3, 4]
    assert state.checkpoint == 5 and state.durable == 5
