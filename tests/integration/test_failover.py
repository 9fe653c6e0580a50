"""Exact consumer failover through the offset map, on real clusters.

A source group consumes part of a topic and commits; after `failover` a consumer of the same
group on the destination must receive, as its first record of each partition, exactly the
record after its last committed source offset: none skipped, none repeated. Also when the copy
itself holds duplicates (a checkpoint moved back, as after a kill -9), and when the source has
offset gaps (transaction markers, an aborted transaction).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.config import StraitConfig, load_config, parse_config
from strait.demo import Generator, create_topic, wait_until
from strait.offsetmap import failover
from strait.offsetmap.store import MapWriter, read_map
from strait.sandbox import Sandbox
from strait.worker.copier import Copier
from strait.worker.task import PartitionTask
from tests.integration.test_replication import FleetFactory, both_stores, make_fleet
from tests.integration.verify import copied_counts, verify

pytestmark = pytest.mark.integration

__all__ = ["make_fleet"]  # the fixture, shared with test_replication


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
                try:
                    producer.abort_transaction(30)
                except KafkaException as exc:
                    # Under load the broker can refuse this abort (INVALID_TXN_STATE, fatal). A
                    # new producer of the same id aborts the open transaction just the same;
                    # any other error fails the test.
                    if not exc.args[0].fatal():
                        raise
                    producer = clients.producer(props, **settings)
                    producer.init_transactions(30)
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


def _wait_mapped(props: dict[str, Any], route: str, topic: str, committed: dict[int, int]) -> None:
    """Until the route's offset map covers every committed offset: the map is published after
    the checkpoint it follows, so a plan made right after the copy could see it short."""

    def covered() -> bool:
        upto = _mapped_up_to(props, route, topic, max(committed) + 1)
        return all((upto[p] or 0) >= offset for p, offset in committed.items())

    _wait(covered, 60, f"the offset map to cover {committed}")


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
    _wait_mapped(dst, route, topic, committed)
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
    _wait_mapped(dst, route, topic, committed)
    planned = {p.partition: p for p in failover.plan(config, route, group)}
    assert all(p.exact for p in planned.values())
    failover.apply(config, route, group, list(planned.values()))
    got = _first_records(dst, group, topic, 2)
    # The source values say which record follows the committed offset (gaps hold no record).
    reader = clients.consumer(src, **{"group.id": _name("peek"), "isolation.level": "read_committed"})
    expected = {}
    for p, offset in committed.items():
        reader.assign([TopicPartition(topic, p, offset)])
        messages: list[Any] = []
        deadline = time.monotonic() + 60
        while not messages:
            assert time.monotonic() < deadline, f"the source gave no record at {p}:{offset}"
            messages = reader.consume(1, 1)
        expected[p] = (messages[0].value() or b"").decode()
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


def _records(props: dict[str, Any], topic: str, partition: int) -> list[tuple[int, str]]:
    """(offset, value) of every record the partition holds now."""
    consumer = clients.consumer(props, **{"group.id": _name("peek"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    found: list[tuple[int, str]] = []
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        deadline = time.monotonic() + 90
        while end and (not found or found[-1][0] < end - 1):
            assert time.monotonic() < deadline, f"read only up to {found[-1:]} of {end}"
            found += [
                (m.offset() or 0, (m.value() or b"").decode()) for m in consumer.consume(500, 0.5) if m.error() is None
            ]
    finally:
        consumer.close()
    return found


def _offsets(props: dict[str, Any], topic: str, partition: int) -> list[int]:
    """The offsets of every record the partition holds now."""
    return [offset for offset, _ in _records(props, topic, partition)]


def test_a_compacted_topic_fails_over_exactly_across_its_gaps(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, group = _name("foc"), _name("fo-compact"), _name("app")
    compact = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    admin = clients.admin(src)
    admin.create_topics([NewTopic(topic, 2, 1, config=compact)])[topic].result(timeout=30)
    # The copy goes to a topic that is not compacted itself: what the destination reads first
    # must depend on the translation only.
    _create(dst, topic, 2)
    producer = clients.producer(src, **{"enable.idempotence": True, "linger.ms": 5})

    def produce(first: int, count: int, keys: int | None) -> None:
        for n in range(first, first + count):
            for p in range(2):
                key = f"k{n % keys}" if keys else f"u{n}"
                producer.produce(topic, f"{p}:{n}".encode(), key=key.encode(), partition=p)
        assert producer.flush(60) == 0

    # 0..599 over 50 keys, then unique keys (the first append after segment.ms rolls the segment,
    # so 0..599 become cleanable: compaction keeps 550..599 of them).
    produce(0, 600, 50)
    # The group read 200 records and 599 before compaction: offset 200 will be gone, 599 kept.
    committer = clients.consumer(src, **{"group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 200), TopicPartition(topic, 1, 599)], asynchronous=False)
    committer.close()
    time.sleep(0.5)
    produce(600, 10, None)
    _wait(lambda: _offsets(src, topic, 0)[0] >= 550 and _offsets(src, topic, 1)[0] >= 550, 180, "compaction")
    produce(610, 300, 20)  # more history: gaps inside the copy later too
    ends = [_offsets(src, topic, p)[-1] + 1 for p in range(2)]
    tasks = [PartitionTask(route, topic, p, topic) for p in range(2)]
    _copy_all(make_copier(route, "w1"), tasks, ends)
    # Runs are published after the checkpoint commit, asynchronously (the first publish creates
    # the map topic): right after the copy's checkpoints reach the end there may be no map yet.
    _wait(lambda: _mapped_up_to(dst, route, topic, 2) == ends, 30, f"the offset map up to {ends}")
    config = _config(sandbox, route)
    planned = {p.partition: p for p in failover.plan(config, route, group)}
    assert all(p.exact for p in planned.values()), planned
    assert "source gap" in planned[0].reason, planned[0]
    failover.apply(config, route, group, list(planned.values()))
    got = _first_records(dst, group, topic, 2)
    reader = clients.consumer(src, **{"group.id": _name("peek"), "auto.offset.reset": "earliest"})
    expected = {}
    for p, offset in ((0, 200), (1, 599)):
        reader.assign([TopicPartition(topic, p, offset)])
        expected[p] = (reader.consume(1, 10)[0].value() or b"").decode()
    reader.close()
    # What a source consumer resuming at the committed offsets reads first: 0:550 and 1:599.
    assert expected == {0: "0:550", 1: "1:599"}
    assert got == expected, planned


def _mapped_up_to(props: dict[str, Any], route: str, topic: str, partitions: int) -> list[int | None]:
    """Per partition, the source offset after the last run the route's offset map holds."""
    found = read_map(props, route)
    return [
        max((r.source_end for r in found[(topic, p)].runs), default=None) if (topic, p) in found else None
        for p in range(partitions)
    ]


def _duplicated(props: dict[str, Any], topic: str, partitions: list[int]) -> set[int]:
    """Partitions of the copy that hold some record more than once."""
    return {p for p in partitions if max(Counter(v for _, v in _records(props, topic, p)).values(), default=0) > 1}


@both_stores
def test_failover_after_a_worker_kill_9_lands_exactly_despite_duplicates_in_the_copy(
    sandbox: Sandbox, make_fleet: FleetFactory
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, group, partitions = _name("fo-kill"), _name("app"), 4
    create_topic(src, topic, partitions)
    fleet = make_fleet()  # route "main", offset map on (the default)
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 60)
    generator = Generator(src, rate_per_partition=200).start()
    generator.add(topic, partitions)
    prefix = f"main/{topic}/"
    killed: list[str] = []
    try:
        fleet.api().add_topic(topic)
        assert wait_until(lambda: all(n > 0 for n in copied_counts(dst, topic, partitions).values()), 90)
        # A worker killed with records copied past its last checkpoint leaves duplicates: its
        # successor copies them again. Killed at a quiet moment it may leave none, so kill the
        # owner of partition 0 (a fresh worker takes its place) until the copy holds some.
        for attempt in range(4):
            time.sleep(1)
            owners = {
                int(k[len(prefix) :]): w
                for k, w in fleet.api().call("GET", "/assignment").items()
                if k.startswith(prefix) and w
            }
            victim = owners[0]
            mine = [p for p, w in owners.items() if w == victim]
            fleet.signal(victim, signal.SIGKILL)
            killed.append(victim)
            fleet.start_worker(f"w{attempt + 3}")
            baseline = copied_counts(dst, topic, partitions)

            def recopied(mine: list[int] = mine, baseline: dict[int, int] = baseline) -> bool:
                return all(copied_counts(dst, topic, partitions)[p] > baseline[p] + 200 for p in mine)

            assert wait_until(recopied, 120), f"the partitions of killed {victim} did not flow again"
            if _duplicated(dst, topic, mine):
                break
    finally:
        generator.stop()
    print(f"\nkilled {killed}")
    report = verify(dst, topic, generator.produced(topic), timeout_s=120)
    print(f"\nkill -9, then failover: {report}")
    assert report.lost == 0 and report.duplicates > 0, report
    resent = _duplicated(dst, topic, list(range(partitions)))
    assert resent, "no kill left a duplicate in the copy"
    # Commit, on the source, offsets inside the duplicated stretches (and mid-way elsewhere).
    committed: dict[int, int] = {}
    for p in range(partitions):
        at_source = {value: offset for offset, value in _records(src, topic, p)}
        copies = Counter(value for _, value in _records(dst, topic, p))
        twice = [v for v, n in copies.items() if n > 1]
        chosen = sorted(at_source[v] for v in twice)
        committed[p] = chosen[len(chosen) // 2] if chosen else len(at_source) // 2
    committer = clients.consumer(src, **{"group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    committer.close()
    config = load_config(fleet.config_path)
    planned = failover.plan(config, "main", group)
    assert all(p.exact and p.not_replicated == 0 for p in planned), planned
    failover.apply(config, "main", group, planned)
    got = _first_records(dst, group, topic, partitions)
    expected = {p: dict(_records(src, topic, p))[offset] for p, offset in committed.items()}
    assert got == expected, planned
