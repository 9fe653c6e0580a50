"""Two routes A→B and B→A over the same topic name: every record exists once in each cluster,
record by record (copies carry the origin header) and in whole batches (copies are told by
their producer ids), across a restart of the copiers."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.sandbox import Sandbox
from strait.worker.batch import registry
from strait.worker.copier import Copier, CopyMode
from strait.worker.origin import HEADER, OriginRule
from strait.worker.task import PartitionTask

pytestmark = pytest.mark.integration

READ_MAX_S = 60.0


def _produce(props: dict[str, Any], topic: str, label: str, count: int) -> None:
    producer = clients.producer(props, **{"enable.idempotence": True})
    for n in range(count):
        producer.produce(topic, f"{label}:{n}".encode(), partition=n % 2)
    assert producer.flush(60) == 0


def _read(props: dict[str, Any], topic: str, idle_s: float = 4.0) -> list[tuple[str, str | None]]:
    """The topic's records, read until none came for ``idle_s``, or for READ_MAX_S at most (a
    loop never goes quiet: what was read by then fails the counts)."""
    consumer = clients.consumer(props, **{"group.id": f"aa-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen: list[tuple[str, str | None]] = []
    last = started = time.monotonic()
    try:
        while time.monotonic() - last < idle_s and time.monotonic() - started < READ_MAX_S:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    origin = dict(message.headers() or []).get(HEADER)
                    seen.append(((message.value() or b"").decode(), origin.decode() if origin else None))
                    last = time.monotonic()
    finally:
        consumer.close()
    return seen


def _sentinels_copied(source: dict[str, Any], destination: dict[str, Any], topic: str, label: str) -> set[str]:
    """Write one record to each partition of ``topic`` on ``source`` and wait until both are in
    ``destination``: the route from ``source`` has then passed every record written before them,
    so anything it would copy of those is in ``destination`` too. Returns the sentinels' values."""
    values = {f"{label}:{p}" for p in range(2)}
    producer = clients.producer(source, **{"enable.idempotence": True})
    for p in range(2):
        producer.produce(topic, f"{label}:{p}".encode(), partition=p)
    assert producer.flush(60) == 0
    deadline = time.monotonic() + 120
    while not values <= {v for v, _ in _read(destination, topic, 2.0)}:
        assert time.monotonic() < deadline, f"the sentinels {sorted(values)} were not copied"
    return values


@pytest.fixture
def topic(sandbox: Sandbox) -> Iterator[str]:
    name = f"aa-{uuid.uuid4().hex[:8]}"
    for cluster in ("src", "dst"):
        admin = clients.admin(sandbox.clusters[cluster].props())
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
    yield name


def _copiers(a: dict[str, Any], b: dict[str, Any], topic: str, copy: CopyMode, worker: str) -> list[Copier]:
    copiers = []
    for route, source, destination, names in (("a-to-b", a, b, ("src", "dst")), ("b-to-a", b, a, ("dst", "src"))):
        copier = Copier(
            route=route,
            source=source,
            destination=destination,
            group_id=f"strait-{route}-{topic}",
            worker_id=worker,
            commit_interval_s=0.3,
            origin=OriginRule(*names),
            copy=copy,
            # Batch mode: the records written before the start lag, so the backlog's pipeline
            # (a process of its own) copies them first, then the realtime batch pipeline.
            catchup_lag_threshold=100 if copy == "batch" else 10_000,
        )
        copier.start()
        copier.assign([PartitionTask(route, topic, p, topic) for p in range(2)])
        copiers.append(copier)
    return copiers


def _wait_for(a: dict[str, Any], b: dict[str, Any], topic: str, count: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        got_a, got_b = _read(a, topic, 2.0), _read(b, topic, 2.0)
        # More than were written: copies went back (each record is written to one cluster once).
        assert len(got_a) <= count and len(got_b) <= count, f"a has {len(got_a)}, b has {len(got_b)} of {count}"
        if len(got_a) >= count and len(got_b) >= count:
            return
        assert time.monotonic() < deadline, f"a has {len(got_a)}, b has {len(got_b)} of {count}"


def _modes(copiers: list[Copier]) -> set[str]:
    return {stats.mode for copier in copiers for stats in copier.stats().values()}


def _registered_by(props: dict[str, Any]) -> set[str]:
    """The clients that published producer ids in a cluster's registry."""
    consumer = clients.consumer(props, **{"group.id": f"aa-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    _, end = consumer.get_watermark_offsets(TopicPartition(registry.TOPIC, 0), timeout=30)
    consumer.assign([TopicPartition(registry.TOPIC, 0, 0)])
    by: set[str] = set()
    try:
        position = 0
        deadline = time.monotonic() + 60
        while position < end and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    position = (message.offset() or 0) + 1
                    by.add(json.loads(message.value() or b"{}")["by"])
    finally:
        consumer.close()
    return by


@pytest.mark.parametrize("copy", ["record", "batch"])
def test_two_way_replication_copies_each_record_once_and_never_loops(
    sandbox: Sandbox, topic: str, copy: CopyMode
) -> None:
    a, b = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    _produce(a, topic, "a", 300)
    _produce(b, topic, "b", 200)
    copiers = _copiers(a, b, topic, copy, "w1")
    try:
        _wait_for(a, b, topic, 500)
        assert _modes(copiers) == {copy}
        if copy == "batch":
            # A restart: the copiers stop (checkpoints committed) and new ones, under new
            # producer ids, take over while both sides keep writing.
            for copier in copiers:
                copier.stop(drain=True, timeout_s=30)
            copiers = []
            _produce(a, topic, "a2", 100)
            _produce(b, topic, "b2", 100)
            copiers = _copiers(a, b, topic, copy, "w2")
            _wait_for(a, b, topic, 700)
            assert _modes(copiers) == {"batch"}
        # Each route has passed every copy the other wrote: a copy sent back would be here now.
        sentinels = _sentinels_copied(a, b, topic, "end-a") | _sentinels_copied(b, a, topic, "end-b")
        got_a = [(v, o) for v, o in _read(a, topic) if v not in sentinels]
        got_b = [(v, o) for v, o in _read(b, topic) if v not in sentinels]
    finally:
        for copier in copiers:
            copier.stop(drain=False, timeout_s=5)
    expected = 500 if copy == "record" else 700
    for cluster, got in (("a", got_a), ("b", got_b)):
        values = [v for v, _ in got]
        assert len(values) == expected and len(set(values)) == expected, f"cluster {cluster}: {len(values)} records"
    if copy == "batch":
        # Whole batches pass unchanged: no header; the copies are told by their producer ids,
        # published before use by the pipelines of both incarnations.
        assert {o for _, o in got_a + got_b} == {None}
        for props, route in ((b, "a-to-b"), (a, "b-to-a")):
            by = _registered_by(props)
            assert any(f"-{route}-w1-" in c for c in by) and any(f"-{route}-w2-" in c for c in by), by
        return
    # Copies name where the record was first written; originals name nothing.
    assert {o for v, o in got_b if v.startswith("a:")} == {"src"} and {o for v, o in got_b if v.startswith("b:")} == {
        None
    }
    assert {o for v, o in got_a if v.startswith("b:")} == {"dst"} and {o for v, o in got_a if v.startswith("a:")} == {
        None
    }
