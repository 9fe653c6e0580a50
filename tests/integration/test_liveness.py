"""Liveness on real clusters: a fault at the moment that once stalled a pipeline, and the
pipeline copying to the end afterwards."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.demo import wait_until
from strait.sandbox import Sandbox, SandboxSpec
from strait.worker import sending
from strait.worker.fetch import RecordPipeline
from strait.worker.pipeline import PartitionState, PipelineSettings
from strait.worker.task import PartitionTask
from strait.worker.watchdog import Bounds, FreshEnds, PartitionSample, Watchdog

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def clusters(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Sandbox:
    # Its own clusters: the destination broker is frozen here.
    return sandbox_factory(SandboxSpec(clusters=("src", "dst"), brokers=1, log_dirs=1, zookeeper=False))


@pytest.fixture
def topic(clusters: Sandbox) -> Iterator[str]:
    name = f"live-{uuid.uuid4().hex[:8]}"
    for cluster in ("src", "dst"):
        admin = clients.admin(clusters.clusters[cluster].props())
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    yield name


def _produce(props: dict[str, str], topic: str, start: int, count: int) -> int:
    producer = clients.producer(props)
    for seq in range(start, start + count):
        producer.produce(topic, value=str(seq).encode(), partition=0)
    assert producer.flush(30) == 0
    return start + count


def test_a_partition_released_while_its_rewind_waits_copies_again_when_taken_back(
    clusters: Sandbox, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deliveries fail (destination frozen), the partition pauses for its rewind, and it is
    released and taken back before the rewind is due, as a session loss during a broker outage
    does. librdkafka keeps the pause across the unassign: the partition taken back must fetch."""
    monkeypatch.setattr(sending, "REWIND_BACKOFF_S", 600.0)  # hold the moment: the rewind waits
    src, dst = clusters.clusters["src"].props(), clusters.clusters["dst"].props()
    pipeline = RecordPipeline(
        name="realtime",
        source=src,
        destination=dst,
        group_id=f"g-{topic}",
        client_id="w1",
        settings=PipelineSettings(delivery_timeout_ms=3000),
    )
    pipeline.start()
    try:
        first = PartitionState(PartitionTask("main", topic, 0, topic))
        pipeline.add(first, 0)
        end = _produce(src, topic, 0, 100)
        assert wait_until(lambda: first.checkpoint == end, 60), first.checkpoint
        clusters.pause_broker("dst", 1)
        try:
            end = _produce(src, topic, end, 100)
            assert wait_until(lambda: first.rewind_at is not None, 60), "no delivery failed"
            released = pipeline.release(first)
            assert released.wait(30)
        finally:
            clusters.resume_broker("dst", 1)
        assert first.rewinds == 0  # released while the rewind still waited
        second = PartitionState(PartitionTask("main", topic, 0, topic))
        start = first.checkpoint or 0
        pipeline.add(second, start)
        end = _produce(src, topic, end, 100)
        assert wait_until(lambda: second.checkpoint == end, 90, interval_s=0.2), (
            f"taken back at {start}, checkpoint {second.checkpoint} of {end}"
        )
    finally:
        pipeline.stop(timeout_s=5)


class Freezable:
    """A real consumer whose fetches can be frozen (a client that stops answering) or whose
    partition can be paused behind the pipeline's back (a client that silently stops fetching)."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.frozen = threading.Event()
        self.thawed = threading.Event()

    def consume(self, num: int, timeout: float) -> list[Any]:
        if self.frozen.is_set():
            self.thawed.wait(120)
        return self._consumer.consume(num, timeout)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def _pipeline(clusters: Sandbox, topic: str) -> tuple[RecordPipeline, Freezable]:
    src, dst = clusters.clusters["src"].props(), clusters.clusters["dst"].props()
    group = f"g-{topic}"
    consumer = Freezable(clients.consumer(src, **{"group.id": group, "enable.auto.commit": False}))
    pipeline = RecordPipeline(
        name="realtime", source=src, destination=dst, group_id=group, client_id="w1", consumer=consumer
    )
    return pipeline, consumer


def test_the_watchdog_dumps_the_stacks_of_a_loop_frozen_in_a_fetch_then_ends_the_worker(
    clusters: Sandbox, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline, consumer = _pipeline(clusters, topic)
    exits: list[str] = []
    exited = threading.Event()

    def exit(reason: str) -> None:
        exits.append(reason)
        exited.set()

    dog = Watchdog(
        Bounds(turn_s=2.0, progress_s=3600, interval_s=0.2),
        partitions=dict,
        fresh_ends=lambda tasks: {},
        restart=lambda tasks: None,
        exit=exit,
    )
    pipeline.start()
    dog.start()
    state = PartitionState(PartitionTask("main", topic, 0, topic))
    try:
        pipeline.add(state, 0)
        end = _produce(clusters.clusters["src"].props(), topic, 0, 50)
        assert wait_until(lambda: state.checkpoint == end, 60), state.checkpoint
        with caplog.at_level(logging.ERROR, logger="strait.worker.watchdog"):
            consumer.frozen.set()
            assert exited.wait(120), "the watchdog never ended the worker"
        assert dog.actions[("loop_overdue", "stack_dump")] == 1 and dog.actions[("loop_overdue", "exit")] >= 1
        assert "realtime" in exits[0]
        dumps = [r.getMessage() for r in caplog.records if "stacks of every thread" in r.getMessage()]
        assert dumps and "in consume" in dumps[0], "the dump shows where the loop is frozen"
    finally:
        dog.stop()
        consumer.thawed.set()
        pipeline.stop(timeout_s=5)


def test_the_watchdog_restarts_a_partition_its_client_silently_stopped_fetching(clusters: Sandbox, topic: str) -> None:
    """The fresh end offset shows the lag: the consumer's cached watermark stops with the partition."""
    pipeline, consumer = _pipeline(clusters, topic)
    task = PartitionTask("main", topic, 0, topic)
    state = PartitionState(task)
    restarted = threading.Event()
    dog = Watchdog(
        Bounds(turn_s=3600, progress_s=3.0, interval_s=0.2),
        partitions=lambda: {task: PartitionSample(state.checkpoint, True)},
        fresh_ends=FreshEnds({"main": clusters.clusters["src"].props()}),
        restart=lambda tasks: restarted.set() if tasks == {task} else None,
        exit=lambda reason: None,
    )
    pipeline.start()
    dog.start()
    try:
        pipeline.add(state, 0)
        src = clusters.clusters["src"].props()
        end = _produce(src, topic, 0, 50)
        assert wait_until(lambda: state.checkpoint == end, 60), state.checkpoint
        paused = threading.Event()

        def pause() -> None:  # behind the pipeline's back, on its thread
            consumer.pause([TopicPartition(topic, 0)])
            paused.set()

        pipeline._commands.put(pause)
        assert paused.wait(30)
        _produce(src, topic, end, 50)
        assert restarted.wait(120), "the stalled partition was not restarted"
        assert state.checkpoint == end  # it really had stopped
        assert dog.actions[("partition_stalled", "restart_partition")] == 1
        assert dog.actions[("partition_stalled", "exit")] == 0
    finally:
        dog.stop()
        pipeline.stop(timeout_s=5)
