"""Exact consumer failover through the offset map, on real clusters.

A source group consumes part of a topic and commits; after `failover` a consumer of the same
group on the destination must receive, as its first record of each partition, exactly the
record after its last committed source offset: none skipped, none repeated. Also when the copy
itself holds duplicates (a checkpoint moved back, as after a kill -9), and when the source has
offset gaps (transaction markers, an aborted transaction).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.config import StraitConfig, parse_config
from strait.offsetmap import failover
from strait.offsetmap.store import MapWriter, read_map
from strait.sandbox import Sandbox
from strait.worker.copier import Copier
from strait.worker.task import PartitionTask

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _config(sandbox: Sandbox, route: str) -> StraitConfig:
    return parse_config(
        {
            "zookeeper": {"connect": sandbox.zookeeper},
            "clusters": {"src": sandbox.clusters["src"].props(), "dst": sandbox.clusters["dst"].props()},
            "routes": [{"name": route, "source": "src", "destination": "dst"}],
        },
        environ={},
    )


def _create(props: dict[str, Any], topic: str, partitions: int) -> None:
    admin = clients.admin(props)  # kept referenced until the topic exists
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def _produce(
    props: dict[str, Any], topic: str, partitions: int, first: int, count: int, txn: str | None = None
) -> None:
    """Values `<partition>:<seq>`; with ``txn`` each batch of 100 is one transaction (its commit
    marker leaves an offset gap), and one batch in five is aborted (never read)."""
    settings: dict[str, Any] = {"enable.idempotence": True, "linger.ms": 5}
    if txn:
        settings["transactional.id"] = txn
    producer = clients.producer(props, **settings)
    if txn:
        producer.init_transactions(30)
    seq = first
    done_aborting: set[int] = set()
    while seq < first + count:
        batch = range(seq, min(seq + 100, first + count))
        aborted = txn is not None and (seq // 100) % 5 == 4 and seq not in done_aborting
        done_aborting.add(seq)
        if txn:
            producer.begin_transaction()
        for partition in range(partitions):
            for n in batch:
                producer.produce(topic, f"{partition}:{'x' if aborted else n}".encode(), partition=partition)
        if txn:
            if aborted:
                producer.abort_transaction(30)
                continue  # the same seqs again, committed this time
            producer.commit_transaction(30)
        seq = batch.stop
    assert producer.flush(60) == 0


@pytest.fixture
def make_copier(sandbox: Sandbox) -> Iterator[Callable[..., Copier]]:
    made: list[Copier] = []

    def make(route: str, worker_id: str) -> Copier:
        src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
        copier = Copier(
            route=route,
            source=src,
            destination=dst,
            group_id=f"strait-{route}",
            worker_id=worker_id,
            commit_interval_s=0.3,
            offset_map=MapWriter(dst, route, client_id=f"strait-{route}-{worker_id}"),
        )
        copier.start()
        made.append(copier)
        return copier

    yield make
    for copier in made:
        copier.stop(drain=False, timeout_s=5)


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _copy_all(copier: Copier, tasks: list[PartitionTask], ends: list[int]) -> None:
    copier.assign(tasks)
    stats = copier.stats
    _wait(lambda: [stats()[t].checkpoint if t in stats() else None for t in tasks] == ends, 90, f"checkpoints {ends}")


def _consume_and_commit(props: dict[str, Any], group: str, topic: str, wanted: dict[int, int]) -> dict[int, int]:
    """The group reads `wanted[p]` records of each partition on the source and commits; returns
    the committed offsets (the next record to read)."""
    consumer = clients.consumer(
        props, **{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
    read = {p: 0 for p in wanted}
    next_offset: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while any(read[p] < wanted[p] for p in wanted):
        assert time.monotonic() < deadline, f"source group read only {read}"
        for message in consumer.consume(500, 0.5):
            p = message.partition()
            if message.error() is None and read[p] < wanted[p]:
                read[p] += 1
                next_offset[p] = message.offset() + 1
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_offset.items()], asynchronous=False)
    consumer.close()
    return next_offset


def _first_records(props: dict[str, Any], group: str, topic: str, partitions: int) -> dict[int, str]:
    """What a consumer of the group on the destination reads first in each partition."""
    consumer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.subscribe([topic])
    first: dict[int, str] = {}
    deadline = time.monotonic() + 60
    try:
        while len(first) < partitions:
            assert time.monotonic() < deadline, f"the destination group read only {first}"
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, f"no committed offset to start from: {message.error()}"
                first.setdefault(message.partition(), (message.value() or b"").decode())
    finally:
        consumer.close()
    return first


def test_a_group_fails_over_to_exactly_the_record_after_its_last_commit(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, group = _name("fo"), _name("fo-topic"), _name("app")
    _create(src, topic, 3)
    _produce(src, topic, 3, 0, 2000)
    tasks = [PartitionTask(route, topic, p, topic) for p in range(3)]
    _copy_all(make_copier(route, "w1"), tasks, [2000] * 3)
    committed = _consume_and_commit(src, group, topic, {0: 1234, 1: 1, 2: 1999})
    config = _config(sandbox, route)
    _wait(lambda: len(read_map(dst, route)) == 3, 30, "the offset map of every partition")
    planned = failover.plan(config, route, group)
    assert {p.partition: p.source_committed for p in planned} == committed
    assert all(p.exact and p.not_replicated == 0 for p in planned)
    assert failover.apply(config, route, group, planned) == 3
    first = _first_records(dst, group, topic, 3)
    assert first == {p: f"{p}:{committed[p]}" for p in range(3)}


def test_duplicates_in_the_copy_and_source_gaps_do_not_shift_the_translation(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, group = _name("fod"), _name("fo-dup"), _name("app")
    _create(src, topic, 2)
    _produce(src, topic, 2, 0, 1000, txn=_name("gaps"))  # markers and an aborted batch: gaps
    end = clients.consumer(src, **{"group.id": "x"}).get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    tasks = [PartitionTask(route, topic, p, topic) for p in range(2)]
    first = make_copier(route, "w1")
    _copy_all(first, tasks, [end] * 2)
    assert not first.revoke(tasks, timeout_s=30)
    # The checkpoint of partition 0 goes back (what a kill -9 before a commit leaves): the next
    # owner copies a stretch again, so the destination holds it twice.
    rewind = clients.consumer(src, **{"group.id": f"strait-{route}", "enable.auto.commit": False})
    rewind.commit(offsets=[TopicPartition(topic, 0, 300)], asynchronous=False)
    rewind.close()
    _copy_all(make_copier(route, "w2"), tasks, [end] * 2)
    # Committed inside the duplicated stretch (p0), and right after a transaction marker (p1).
    committed = _consume_and_commit(src, group, topic, {0: 450, 1: 200})
    config = _config(sandbox, route)
    planned = {p.partition: p for p in failover.plan(config, route, group)}
    assert all(p.exact for p in planned.values())
    failover.apply(config, route, group, list(planned.values()))
    got = _first_records(dst, group, topic, 2)
    # The source values say which record follows the committed offset (gaps hold no record).
    reader = clients.consumer(src, **{"group.id": _name("peek"), "isolation.level": "read_committed"})
    expected = {}
    for p, offset in committed.items():
        reader.assign([TopicPartition(topic, p, offset)])
        message = reader.consume(1, 10)[0]
        expected[p] = (message.value() or b"").decode()
    reader.close()
    assert got == expected, planned


def test_failover_refuses_while_the_group_has_members_on_the_destination(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, group = _name("foa"), _name("fo-active"), _name("app")
    _create(src, topic, 1)
    _produce(src, topic, 1, 0, 100)
    _copy_all(make_copier(route, "w1"), [PartitionTask(route, topic, 0, topic)], [100])
    _consume_and_commit(src, group, topic, {0: 10})
    member = clients.consumer(dst, **{"group.id": group, "auto.offset.reset": "earliest"})
    member.subscribe([topic])
    try:
        _wait(lambda: bool(member.consume(1, 0.5)) or bool(member.assignment()), 30, "the member to join")
        config = _config(sandbox, route)
        planned = failover.plan(config, route, group)
        with pytest.raises(failover.GroupActive, match="active member"):
            failover.apply(config, route, group, planned)
    finally:
        member.close()
    # The CLI says the same, with a non-zero exit (the member has left now, so a dry run works).
    result = subprocess.run(
        [sys.executable, "-m", "strait.cli.main", "failover", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "--dry-run" in result.stdout
