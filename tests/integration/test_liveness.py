"""Liveness on real clusters: a fault at the moment that once stalled a pipeline, and the
pipeline copying to the end afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.demo import wait_until
from strait.sandbox import Sandbox, SandboxSpec
from strait.worker import sending
from strait.worker.fetch import RecordPipeline
from strait.worker.pipeline import PartitionState, PipelineSettings
from strait.worker.task import PartitionTask

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
