"""Exactly-once routes against real clusters: records and checkpoints commit together.

The destination is read with ``read_committed``, as an exactly-once consumer would: every
source record must be there exactly once, in order, including across a fenced (zombie) owner
whose partitions a second worker took over. The offset map is written in the same transactions:
it maps every committed copy and no aborted one, so failover stays exact across the fence.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.config import RouteConfig, parse_config
from strait.demo import Fleet, Generator, create_topic, wait_until
from strait.fencing import PIPELINES, fence, transactional_id
from strait.metrics.stages import RouteObserver
from strait.offsetmap import failover
from strait.offsetmap.store import read_map
from strait.sandbox import Sandbox
from strait.worker import transactional
from strait.worker.copier import Copier
from strait.worker.exactly_once import exactly_once_parts
from strait.worker.task import PartitionTask
from strait.worker.transactional_checkpoints import destination_group
from tests.integration.faults import copy_modes, fleets, owners

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(props: dict[str, str], topic: str, partitions: int) -> None:
    admin = clients.admin(props)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def _produce(props: dict[str, str], topic: str, partitions: int, first: int, count: int) -> None:
    # Idempotent: a retried first batch (a topic created moments ago) must not land after the
    # next one, or the source itself would be out of order.
    producer = clients.producer(props, **{"enable.idempotence": True, "linger.ms": 5})
    for seq in range(first, first + count):
        for partition in range(partitions):
            while True:
                try:
                    value = f"{partition}:{seq}".encode()
                    producer.produce(topic, value, partition=partition, headers=[("seq", value)])
                    break
                except BufferError:
                    producer.poll(0.1)
    assert producer.flush(60) == 0


def _read_committed(props: dict[str, str], topic: str, partitions: int, idle_s: float = 4.0) -> dict[int, list[int]]:
    consumer = clients.consumer(
        props, **{"group.id": _name("verify"), "isolation.level": "read_committed", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seqs: dict[int, list[int]] = {p: [] for p in range(partitions)}
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            for msg in consumer.consume(5000, 0.5):
                if msg.error() is None:
                    part, seq = (msg.value() or b"").split(b":")[:2]
                    seqs[int(part)].append(int(seq))
                    last = time.monotonic()
    finally:
        consumer.close()
    return seqs


@pytest.fixture
def make_copier(sandbox: Sandbox) -> Iterator[Callable[..., Copier]]:
    made: list[Copier] = []

    def make(route: str, worker_id: str, observer: RouteObserver | None = None, **options: Any) -> Copier:
        src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
        config = RouteConfig(name=route, source="src", destination="dst", delivery="exactly-once", **options)
        copier = Copier(
            route=route,
            source=src,
            destination=dst,
            group_id=f"strait-{route}",
            worker_id=worker_id,
            commit_interval_s=0.5,
            observer=observer,
            **exactly_once_parts(config, source=src, destination=dst, worker_id=worker_id),
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


def _describe(seqs: dict[int, list[int]], count: int) -> str:
    """Where each partition's read-back differs from 0..count-1: missing, repeated, first misplaced."""
    out = []
    for p, got in sorted(seqs.items()):
        if got == list(range(count)):
            continue
        missing = sorted(set(range(count)) - set(got))
        repeated = len(got) - len(set(got))
        first = next((i for i, (a, b) in enumerate(zip(got, range(count), strict=False)) if a != b), None)
        around = got[max(0, (first or 0) - 3) : (first or 0) + 8]
        out.append(
            f"p{p}: {len(got)} read, missing {missing[:10]}, {repeated} repeated, first wrong at {first}: {around}"
        )
    return "; ".join(out)


def _foreign_headers(props: dict[str, str], topic: str, partitions: int) -> list[Any]:
    """Headers of committed copies that differ from their source record's (``_produce``'s)."""
    consumer = clients.consumer(
        props,
        **{
            "group.id": _name("headers"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        },
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    open_partitions, foreign = set(range(partitions)), []
    deadline = time.monotonic() + 90
    try:
        while open_partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_partitions.discard(message.partition())
                elif message.headers() != [("seq", message.value())]:
                    foreign.append(message.headers())
    finally:
        consumer.close()
    return foreign


def _copies(props: dict[str, str], topic: str, partition: int, isolation: str) -> dict[int, str]:
    """Destination offset -> value of every record a reader at ``isolation`` finds in the partition."""
    consumer = clients.consumer(
        props,
        **{
            "group.id": _name("peek"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        },
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    found: dict[int, str] = {}
    deadline = time.monotonic() + 90
    try:
        while True:
            assert time.monotonic() < deadline, f"{topic}/{partition} not read to its end"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is None:
                    found[message.offset() or 0] = (message.value() or b"").decode()
                elif error.code() == KafkaError._PARTITION_EOF:
                    return found
    finally:
        consumer.close()


def assert_map_is_exact(src: dict[str, str], dst: dict[str, str], route: str, topic: str, partitions: int) -> int:
    """The route's offset map, read as failover reads it, maps every committed copy to the
    source record it copies, and no aborted copy. Returns how many aborted copies the
    destination holds."""
    offset_map = read_map(dst, route)
    aborted_copies = 0
    for p in range(partitions):
        committed = _copies(dst, topic, p, "read_committed")
        originals = _copies(src, topic, p, "read_committed")
        aborted = set(_copies(dst, topic, p, "read_uncommitted")) - set(committed)
        aborted_copies += len(aborted)
        entry = offset_map.get((topic, p))
        assert entry is not None, f"partition {p} has no run"
        mapped = {run.destination + i: run.source + i for run in entry.runs for i in range(run.count)}
        assert not aborted & set(mapped), f"partition {p}: runs map {len(aborted & set(mapped))} aborted copies"
        assert set(mapped) == set(committed), (
            f"partition {p}: {len(set(committed) - set(mapped))} committed copies unmapped, "
            f"{len(set(mapped) - set(committed))} mapped offsets hold no committed copy"
        )
        wrong = [d for d, source in mapped.items() if committed[d] != originals.get(source)]
        assert not wrong, f"partition {p}: {len(wrong)} runs name the wrong source offset, e.g. {wrong[:3]}"
    return aborted_copies


def _checkpoints(copier: Copier, tasks: list[PartitionTask]) -> list[Any]:
    stats = copier.stats()
    return [stats[t].checkpoint if t in stats else None for t in tasks]


def test_exactly_once_copy_commits_records_and_checkpoints_together(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, partitions, count = _name("eos"), _name("eos-copy"), 3, 3000
    _create(src, topic, partitions)
    _produce(src, topic, partitions, 0, count)
    observer = RouteObserver(route)
    copier = make_copier(route, "w1", observer=observer)
    tasks = [PartitionTask(route, topic, p, topic) for p in range(partitions)]
    copier.assign(tasks)
    _wait(lambda: _checkpoints(copier, tasks) == [count] * partitions, 90, "checkpoints at the end")
    seqs = _read_committed(dst, topic, partitions)
    assert all(seqs[p] == list(range(count)) for p in range(partitions)), _describe(seqs, count)
    # Copies carry exactly the source's headers: Strait adds none.
    assert _foreign_headers(dst, topic, partitions) == []
    # The map's runs went into the same transactions: every committed copy mapped, none aborted,
    # and what they cost counted on the route's observer (what /metrics exposes).
    assert_map_is_exact(src, dst, route, topic, partitions)
    cost = observer.offset_map
    assert cost.runs >= partitions and cost.bytes > 0 and cost.lost == 0, (cost.runs, cost.bytes, cost.lost)
    # The checkpoints live in the destination group, committed by the same transactions.
    consumer = clients.consumer(dst, **{"group.id": destination_group(route), "isolation.level": "read_committed"})
    committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
    consumer.close()
    assert [tp.offset for tp in committed] == [count] * partitions


def test_a_fenced_owner_writes_nothing_more_and_its_successor_copies_exactly_once(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, partitions = _name("eosz"), _name("eos-zombie"), 2
    _create(src, topic, partitions)
    _produce(src, topic, partitions, 0, 2000)
    # Transactions of 30 s, even when caught up: the fence below lands while one holds
    # acknowledged copies.
    zombie = make_copier(route, "w1", transaction_interval_ms=30_000, transaction_linger_ms=30_000)
    tasks = [PartitionTask(route, topic, p, topic) for p in range(partitions)]
    zombie.assign(tasks)
    stats = zombie.stats
    _wait(lambda: all(t in stats() and stats()[t].records > 0 for t in tasks), 60, "the first owner copying")
    # What the controller does when a worker's session ends: fence its transactional ids.
    fence(dst, [transactional_id(route, "w1", p) for p in PIPELINES], timeout_s=30)
    _produce(src, topic, partitions, 2000, 2000)  # more records: the zombie must copy none of them
    _wait(lambda: all(s.state.startswith("failed:fenced") for s in zombie.stats().values()), 30, "the zombie fenced")
    frozen = {t: s.records for t, s in zombie.stats().items()}
    successor = make_copier(route, "w2")
    successor.assign(tasks)
    _wait(lambda: _checkpoints(successor, tasks) == [4000] * partitions, 90, "the successor at the end")
    assert {t: s.records for t, s in zombie.stats().items()} == frozen, "the fenced owner kept writing"
    seqs = _read_committed(dst, topic, partitions)
    for p in range(partitions):
        assert seqs[p] == list(range(4000)), _describe({p: seqs[p]}, 4000)
    # The fence aborted the zombie's open transaction: its copies are on the destination, unread.
    aborted = assert_map_is_exact(src, dst, route, topic, partitions)
    print(f"\nfenced mid-transaction: {aborted} aborted copies on the destination, none in the offset map")
    assert aborted > 0, "the fence aborted no copy: the map was not put to the test"
    # A group that consumed on the source fails over to exactly the next record.
    group = _name("app")
    committed = {0: 1000, 1: 3000}
    committer = clients.consumer(src, **{"group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    committer.close()
    config = parse_config(
        {
            "clusters": {"src": src, "dst": dst},
            "routes": [{"name": route, "source": "src", "destination": "dst", "delivery": "exactly-once"}],
        },
        environ={},
    )
    planned = failover.plan(config, route, group)
    assert all(p.exact and p.not_replicated == 0 for p in planned), planned
    failover.apply(config, route, group, planned)
    reader = clients.consumer(dst, **{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "error"})
    reader.assign([TopicPartition(topic, p) for p in range(partitions)])  # from the group's offsets
    first: dict[int, str] = {}
    deadline = time.monotonic() + 60
    try:
        while len(first) < partitions:
            assert time.monotonic() < deadline, f"the destination group read only {first}"
            for message in reader.consume(100, 0.5):
                assert message.error() is None, message.error()
                first.setdefault(message.partition() or 0, (message.value() or b"").decode())
    finally:
        reader.close()
    assert first == {p: f"{p}:{o}" for p, o in committed.items()}, planned


@pytest.mark.timeout(600)
@pytest.mark.parametrize("realtime_copy", ["auto", "batch"])
def test_a_frozen_worker_past_its_session_is_fenced_and_nothing_is_copied_twice(
    sandbox: Sandbox, tmp_path: Path, realtime_copy: str
) -> None:
    """w1 is frozen (SIGSTOP) past its session with transactions open, the leader fences it and
    gives its partitions to w2, then w1 wakes up. A read_committed reader of the destination
    sees every record exactly once, and the copy catches up. With ``realtime_copy: batch`` the
    caught-up partitions are copied in whole batches (the transactional batch pipeline is
    frozen mid-transaction); with ``auto``, at this rate, record by record."""
    _assert_copied_once(*_lost_worker_run(sandbox, tmp_path, realtime_copy, "freeze"))


@pytest.mark.timeout(600)
def test_a_worker_killed_mid_transaction_in_batch_mode_copies_nothing_twice(sandbox: Sandbox, tmp_path: Path) -> None:
    """w1 is killed (-9) while its transactional batch pipelines have transactions open; once
    its session ends the leader fences its transactional ids (aborting those transactions) and
    gives its partitions to w2, and w1 comes back as a new process. Every record is read once,
    in order, and the offset map maps exactly the committed copies."""
    _assert_copied_once(*_lost_worker_run(sandbox, tmp_path, "batch", "kill"))


def _assert_copied_once(produced: dict[int, int], seqs: dict[int, list[int]], caught_up: bool) -> None:
    assert caught_up, {p: (produced[p], len(v)) for p, v in seqs.items()}
    for p, copied in seqs.items():
        lost = produced[p] - len(set(copied))
        duplicates = len(copied) - len(set(copied))
        assert (lost, duplicates) == (0, 0), f"partition {p}: {lost} lost, {duplicates} duplicates"
        assert copied == list(range(produced[p])), f"partition {p}: out of order"


def _lost_worker_run(
    sandbox: Sandbox, workdir: Path, realtime_copy: str, fault: str
) -> tuple[dict[int, int], dict[int, list[int]], bool]:
    """One run of the lost-worker scenario (w1 frozen past its session, or killed and started
    again): records produced and read (read_committed) per partition, and whether the
    destination caught up within the wait. Once caught up, the offset map must map exactly the
    committed copies."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, partitions = _name("eos-frozen"), 4
    create_topic(src, topic, partitions)
    with fleets(sandbox, workdir) as make:
        fleet = make(session_timeout_s=3.0, route={"delivery": "exactly-once", "realtime_copy": realtime_copy})
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        fleet.start_worker("w2")
        assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 60)
        generator = Generator(src, rate_per_partition=50)
        generator.add(topic, partitions)
        generator.start()
        try:
            fleet.api().add_topic(topic)
            assert wait_until(lambda: set(owners(fleet, topic).values()) == {"w1", "w2"}, 60)
            expected = "batch" if realtime_copy == "batch" else "record"
            assert wait_until(lambda: {m.split(" ")[0] for m in copy_modes(fleet, topic).values()} == {expected}, 60), (
                copy_modes(fleet, topic)
            )
            time.sleep(3)
            if fault == "kill":
                fleet.signal("w1", signal.SIGKILL)
                fleet.wait_exit("w1")
                assert wait_until(lambda: "w1" not in set(owners(fleet, topic).values()), 60, interval_s=0.2)
                time.sleep(3)  # w2 copies past where w1 died
                fleet.start_worker("w1")
                pid = fleet.processes["w1"].pid
                assert wait_until(lambda: _active_as(fleet, "w1", pid), 60)
            else:
                fleet.signal("w1", signal.SIGSTOP)
                try:
                    assert wait_until(lambda: "w1" not in set(owners(fleet, topic).values()), 60, interval_s=0.2)
                    time.sleep(3)  # w2 copies past where w1 froze
                finally:
                    fleet.signal("w1", signal.SIGCONT)
                assert wait_until(lambda: "w1" in fleet.workers_in_state("active"), 60)
            time.sleep(3)
        finally:
            generator.stop()
        produced = generator.produced(topic)
        caught_up = wait_until(
            lambda: all(len(v) >= produced[p] for p, v in _read_committed(dst, topic, partitions, 1.0).items()),
            180,  # a starved machine: the fenced worker rejoins and its successor catches up slowly
            interval_s=2.0,
        )
        seqs = _read_committed(dst, topic, partitions)
        if caught_up:
            # The frozen worker's open transactions were aborted by its fence: no run maps them.
            aborted = assert_map_is_exact(src, dst, "main", topic, partitions)
            print(f"\nw1 lost ({fault}): {aborted} aborted copies on the destination, none in the offset map")
    return produced, seqs, caught_up


def _active_as(fleet: Fleet, name: str, pid: int) -> bool:
    """The worker's new process registered: the dead one's record reads active until its session ends."""
    return any(
        w["id"] == name and w.get("pid") == pid and w["state"] == "active" for w in fleet.api().call("GET", "/workers")
    )


class _AnswerLost:
    """A transactional producer whose first commit reaches the destination but whose answer
    never comes back: the call blocks until ``release`` is set, as when the transaction
    coordinator's broker dies between writing the commit and answering it."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self.committed = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def commit_transaction(self, *args: Any) -> None:
        if self.committed.is_set():
            self._producer.commit_transaction(*args)
            return
        self._producer.commit_transaction(*args)
        self.committed.set()
        self.release.wait(120)


def test_a_commit_whose_answer_is_lost_copies_nothing_twice(
    sandbox: Sandbox, make_copier: Callable[..., Copier], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The destination committed a transaction whose answer the worker never got. Its
    partitions must resume where the destination says (the transaction's own offsets), not at
    the checkpoint the worker last saw committed: that would copy the whole transaction again."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic, partitions = _name("eosl"), _name("eos-lost"), 2
    _create(src, topic, partitions)
    _produce(src, topic, partitions, 0, 1000)
    # The hung commit is given up after 3 s instead of the production deadline.
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 3.0)
    # Transactions of 2 s, even when caught up: the one whose answer is lost holds a good share
    # of the records below.
    copier = make_copier(route, "w1", transaction_interval_ms=2000, transaction_linger_ms=2000)
    tasks = [PartitionTask(route, topic, p, topic) for p in range(partitions)]
    copier.assign(tasks)
    _wait(lambda: _checkpoints(copier, tasks) == [1000] * partitions, 90, "the first records copied")
    pipeline: Any = copier._realtime  # caught up: every partition is copied there
    lost = _AnswerLost(pipeline._producer)
    pipeline._producer = lost
    try:
        _produce(src, topic, partitions, 1000, 1000)
        assert lost.committed.wait(60), "no transaction was committed"
        _produce(src, topic, partitions, 2000, 1000)

        def restarted_and_done() -> bool:
            # What the worker's agent does with a partition its pipeline stopped (an unknown
            # outcome settled, see transaction_recovery): start it again from its checkpoint.
            stopped = [t for t, s in copier.stats().items() if s.state.startswith("failed:")]
            if stopped:
                assert not copier.revoke(stopped, timeout_s=30)
                copier.assign(stopped)
            return _checkpoints(copier, tasks) == [3000] * partitions

        _wait(restarted_and_done, 120, "the copy at the end")
    finally:
        lost.release.set()
    seqs = _read_committed(dst, topic, partitions)
    for p in range(partitions):
        assert seqs[p] == list(range(3000)), _describe({p: seqs[p]}, 3000)


def test_a_topic_removed_added_again_and_grown_under_load_is_copied_once(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    """The worker's side of a topic removed and added again through the API while records keep
    arriving (its partitions revoked, and assigned again before the revoke finished, starting
    from "earliest" where no checkpoint exists), and of partitions the source grows meanwhile:
    a read_committed reader sees every record once, in order."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route, topic = _name("eosr"), _name("eos-readd")
    _create(src, topic, 2)
    copier = make_copier(route, "w1")
    first = {0: 0, 1: 0}  # the first sequence number produced to each partition
    sent = [0]
    grow, grown, stop = threading.Event(), threading.Event(), threading.Event()

    def load() -> None:
        while not stop.is_set():
            if grow.is_set() and not grown.is_set():
                admin = clients.admin(src)
                admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
                first.update({2: sent[0], 3: sent[0]})
                grown.set()
            _produce(src, topic, len(first), sent[0], 50)
            sent[0] += 50

    def tasks() -> list[PartitionTask]:
        return [PartitionTask(route, topic, p, topic, start="earliest") for p in sorted(first)]

    def copied() -> int:
        return sum(c or 0 for c in _checkpoints(copier, tasks()))

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        copier.assign(tasks())
        for round_ in range(4):
            # Barrier: the copy moved since the last round, so each revoke meets a live copy.
            before = copied()
            _wait(lambda before=before: copied() > before, 60, "the copy moving")
            copier.revoke(tasks(), timeout_s=0)  # removed: its revoke is still under way ...
            if round_ == 1:
                grow.set()
                assert grown.wait(60), "the source topic did not grow"
            copier.assign(tasks())  # ... when it is added again (grown, from round 1 on)
        before = copied()
        _wait(lambda: copied() > before, 60, "the copy moving after the last round")
    finally:
        stop.set()
        loader.join(60)
    total = sent[0]
    ends = [total - first[p] for p in sorted(first)]
    _wait(lambda: _checkpoints(copier, tasks()) == ends, 120, "the copy at the end")
    seqs = _read_committed(dst, topic, len(first))
    for p in sorted(first):
        assert seqs[p] == list(range(first[p], total)), _describe({p: seqs[p]}, total)
