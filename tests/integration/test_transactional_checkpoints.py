"""Exactly-once checkpoints against real clusters: committed in destination transactions, read
back only once stable, source group as fallback and as a best-effort mirror."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.fencing import fence, transactional_id
from strait.sandbox import Sandbox
from strait.worker.task import PartitionTask
from strait.worker.transactional_checkpoints import (
    DestinationCheckpoints,
    destination_group,
    group_metadata,
    transaction_offsets,
)

pytestmark = pytest.mark.integration

RECORDS = 10  # per source partition


@dataclass
class Route:
    name: str
    src: dict[str, str]
    dst: dict[str, str]
    tasks: list[PartitionTask]

    @property
    def source_group(self) -> str:
        return f"strait-{self.name}"

    def store(self, stable_wait_s: float = 15.0) -> DestinationCheckpoints:
        return DestinationCheckpoints(
            route=self.name,
            source=self.src,
            destination=self.dst,
            source_group_id=self.source_group,
            client_id=f"strait-{self.name}-test",
            stable_wait_s=stable_wait_s,
        )

    def transaction(self, tid: str | None = None) -> TxnWriter:
        return TxnWriter(self, tid or transactional_id(self.name, "w1", "realtime"))


class TxnWriter:
    """A transactional producer on the destination, as an exactly-once pipeline uses it."""

    def __init__(self, route: Route, tid: str) -> None:
        self.route = route
        self.producer = clients.producer(route.dst, **{"transactional.id": tid})
        self.producer.init_transactions(30)
        self.metadata = group_metadata(route.dst, destination_group(route.name))

    def open(self, offsets: dict[PartitionTask, int]) -> None:
        self.producer.begin_transaction()
        for task in offsets:
            self.producer.produce(task.destination_topic, b"r", partition=task.partition)
        self.producer.send_offsets_to_transaction(transaction_offsets(offsets), self.metadata, 30)
        assert self.producer.flush(30) == 0

    def commit(self, offsets: dict[PartitionTask, int]) -> None:
        self.open(offsets)
        self.producer.commit_transaction(30)


def _create(props: dict[str, str], topic: str, partitions: int) -> None:
    admin = clients.admin(props)  # must outlive the future
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


@pytest.fixture
def route(sandbox: Sandbox) -> Iterator[Route]:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    name = f"eos-{uuid.uuid4().hex[:8]}"
    topic, copy = f"{name}-orders", f"{name}-orders-copy"  # the destination topic has another name
    _create(src, topic, 2)
    _create(dst, copy, 2)
    producer = clients.producer(src)
    for partition in (0, 1):
        for i in range(RECORDS):
            producer.produce(topic, f"{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    yield Route(name, src, dst, [PartitionTask(name, topic, p, copy, "earliest") for p in (0, 1)])


def _starts(store: DestinationCheckpoints, tasks: list[PartitionTask]) -> list[tuple[int, int, int | None]]:
    offsets = store.start_offsets(tasks)
    return [tuple(offsets[t])[:3] for t in tasks]  # type: ignore[misc]  # (start, end, checkpoint)


def _source_group_offsets(route: Route) -> list[int]:
    # A consumer's committed(), not AdminClient.list_consumer_group_offsets (crashes, librdkafka#5040).
    reader = clients.consumer(route.src, **{"group.id": route.source_group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in reader.committed([TopicPartition(t.topic, t.partition) for t in route.tasks], 15)]
    finally:
        reader.close()


def test_without_checkpoints_start_applies(route: Route) -> None:
    store = route.store()
    t0, t1 = route.tasks
    latest = PartitionTask(t1.route, t1.topic, t1.partition, t1.destination_topic, "latest")
    assert _starts(store, [t0, latest]) == [(0, RECORDS, None), (RECORDS, RECORDS, None)]
    store.close()


def test_source_group_is_the_fallback_and_destination_group_wins(route: Route) -> None:
    t0, t1 = route.tasks
    legacy = clients.consumer(route.src, **{"group.id": route.source_group, "enable.auto.commit": False})
    legacy.commit(offsets=[TopicPartition(t0.topic, 0, 4)], asynchronous=False)  # at-least-once checkpoint
    legacy.close()
    store = route.store()
    assert _starts(store, route.tasks) == [(4, RECORDS, 4), (0, RECORDS, None)]

    route.transaction().commit({t0: 7, t1: 3})
    assert _starts(store, route.tasks) == [(7, RECORDS, 7), (3, RECORDS, 3)]
    # A checkpoint beyond the source's end (records the source lost) resumes at the end.
    route.transaction().commit({t0: 50})
    assert _starts(store, [t0]) == [(RECORDS, RECORDS, 50)]
    store.close()


def test_pending_and_aborted_transactions_do_not_count(route: Route) -> None:
    t0, t1 = route.tasks
    writer = route.transaction()
    writer.commit({t0: 2, t1: 2})
    writer.open({t0: 9})  # pending: the destination group holds 9 for t0 until the commit
    impatient = route.store(stable_wait_s=1.0)
    with pytest.raises(KafkaException) as info:
        impatient.start_offsets(route.tasks)
    assert info.value.args[0].code() == KafkaError.UNSTABLE_OFFSET_COMMIT
    assert _starts(impatient, [t1]) == [(2, RECORDS, 2)]  # partitions without pending offsets answer
    impatient.close()

    patient = route.store(stable_wait_s=15.0)
    timer = threading.Timer(1.0, lambda: writer.producer.commit_transaction(30))
    timer.start()
    started = time.monotonic()
    assert _starts(patient, route.tasks) == [(9, RECORDS, 9), (2, RECORDS, 2)]
    assert 0.8 < time.monotonic() - started < 10
    timer.join()

    writer.open({t0: 10, t1: 10})
    writer.producer.abort_transaction(30)
    assert _starts(patient, route.tasks) == [(9, RECORDS, 9), (2, RECORDS, 2)]
    patient.close()


def test_a_fenced_zombie_pending_checkpoint_is_discarded_at_once(route: Route) -> None:
    t0, _ = route.tasks
    tid = transactional_id(route.name, "w-zombie", "catchup")
    zombie = route.transaction(tid)
    zombie.commit({t0: 5})
    zombie.open({t0: 8})  # frozen in the middle of a transaction
    fence(route.dst, [tid], timeout_s=30)
    store = route.store(stable_wait_s=1.0)
    assert _starts(store, [t0]) == [(5, RECORDS, 5)]
    store.close()


def test_commit_only_mirrors_to_the_source_group(route: Route) -> None:
    t0, t1 = route.tasks
    store = route.store()
    assert store.commit({t0: 6, t1: 1}) == set()
    deadline = time.monotonic() + 15
    while _source_group_offsets(route) != [6, 1]:
        assert time.monotonic() < deadline, _source_group_offsets(route)
        store.commit({})  # serves the mirror's answer
        time.sleep(0.2)
    # The destination group, the truth for this route, was not touched by commit().
    assert _starts(store, route.tasks) == [(6, RECORDS, 6), (1, RECORDS, 1)]  # fallback: no destination checkpoint
    route.transaction().commit({t0: 2})
    assert _starts(store, [t0]) == [(2, RECORDS, 2)]

    # A failed mirror is counted, never raised.
    ghost = PartitionTask(route.name, f"{route.name}-no-such-topic", 0, f"{route.name}-no-such-copy")
    assert store.commit({ghost: 3}) == set()
    store.close()  # waits for the mirror's answer
    assert store.mirror_failures == 1


def test_two_tasks_sharing_a_destination_partition_are_refused(route: Route) -> None:
    t0, _ = route.tasks
    twin = PartitionTask(route.name, f"{t0.topic}-twin", 0, t0.destination_topic)
    with pytest.raises(ValueError, match="collide"):
        transaction_offsets({t0: 1, twin: 1})
    store = route.store()
    with pytest.raises(ValueError, match="collide"):
        store.start_offsets([t0, twin])
    store.close()
