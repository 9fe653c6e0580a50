"""The worker's copier against real clusters: every record arrives once, in order, intact.

Records carry a per-partition sequence number in the value and a header, so each check counts
loss, duplicates and order per partition in the destination.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from strait import clients
from strait.sandbox import Sandbox
from strait.worker.copier import Copier
from strait.worker.task import PartitionTask

pytestmark = pytest.mark.integration

ROUTE = "src-dst"
# Record timestamps differ from produce time (so preserving them is visible) but stay within
# retention: records older than retention.ms would be deleted from both clusters.
BASE_TS = int(time.time() * 1000) - 3_600_000


@dataclass(frozen=True)
class Copied:
    """One destination record, reduced to what the checks compare."""

    seq: int
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: int


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_topic(props: dict[str, str], topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = clients.admin(props)  # must outlive the future
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(timeout=30)


def _record(partition: int, seq: int, pad: int = 0) -> dict[str, Any]:
    return {
        "value": f"{partition}:{seq}:".encode() + b"x" * pad,
        "key": None if seq % 10 == 0 else f"key-{seq % 17}".encode(),
        "headers": [("seq", str(seq).encode()), ("dup", b"a"), ("dup", b"b")],
        "timestamp": BASE_TS + seq,
    }


def _produce(
    props: dict[str, str], topic: str, partitions: int, per_partition: int, *, first: int = 0, pad: int = 0
) -> None:
    producer = clients.producer(props, **{"enable.idempotence": True, "linger.ms": 20})
    for seq in range(first, first + per_partition):
        for partition in range(partitions):
            while True:
                try:
                    producer.produce(topic, partition=partition, **_record(partition, seq, pad))
                    break
                except BufferError:
                    producer.poll(0.1)
        if seq % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


class Feeder:
    """Produces sequenced records to every partition of a topic in the background."""

    def __init__(self, props: dict[str, str], topic: str, partitions: int, per_second: int) -> None:
        self.props, self.topic, self.partitions, self.per_second = props, topic, partitions, per_second
        self.sent = 0  # per partition
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.sent

    def _run(self) -> None:
        producer = clients.producer(self.props, **{"enable.idempotence": True, "linger.ms": 5})
        tick = 0.05
        per_tick = max(1, int(self.per_second * tick))
        while not self._stop.is_set():
            for _ in range(per_tick):
                for partition in range(self.partitions):
                    producer.produce(self.topic, partition=partition, **_record(partition, self.sent))
                self.sent += 1
            producer.poll(0)
            time.sleep(tick)
        assert producer.flush(60) == 0


def _end_offsets(props: dict[str, str], topic: str, partitions: int) -> list[int]:
    consumer = clients.consumer(props, **{"group.id": _name("probe")})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def _read(props: dict[str, str], topic: str, partitions: int) -> dict[int, list[Copied]]:
    """Every record of the topic up to its current end offsets, per partition."""
    ends = _end_offsets(props, topic, partitions)
    consumer = clients.consumer(props, **{"group.id": _name("verify"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: dict[int, list[Copied]] = {p: [] for p in range(partitions)}
    positions = [0] * partitions
    deadline = time.monotonic() + 60
    try:
        while any(positions[p] < ends[p] for p in range(partitions)) and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                assert msg.error() is None, msg.error()
                partition = msg.partition()
                part, seq, _ = msg.value().split(b":", 2)
                assert int(part) == partition, "record landed in another partition number"
                timestamp_type, timestamp = msg.timestamp()
                headers = tuple((k, v) for k, v in (msg.headers() or []))
                records[partition].append(Copied(int(seq), msg.key(), headers, timestamp, timestamp_type))
                positions[partition] = msg.offset() + 1
    finally:
        consumer.close()
    return records


def _assert_exact_copy(records: dict[int, list[Copied]], per_partition: int) -> None:
    """Every partition holds sequences 0..n-1 exactly once and in order, with key/headers/timestamp."""
    for partition, copied in records.items():
        seqs = [c.seq for c in copied]
        missing = set(range(per_partition)) - set(seqs)
        duplicates = len(seqs) - len(set(seqs))
        assert not missing, f"partition {partition}: {len(missing)} records lost, e.g. {sorted(missing)[:5]}"
        assert duplicates == 0, f"partition {partition}: {duplicates} duplicates"
        assert seqs == list(range(per_partition)), f"partition {partition}: out of order"
        for c in copied:
            expected = _record(partition, c.seq)
            assert c.key == expected["key"]
            assert c.headers == tuple(expected["headers"])
            assert (c.timestamp_type, c.timestamp) == (TIMESTAMP_CREATE_TIME, expected["timestamp"])


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


def _caught_up(copier: Copier, tasks: list[PartitionTask], ends: dict[PartitionTask, int]) -> Callable[[], bool]:
    def check() -> bool:
        stats = copier.stats()
        return all(t in stats and stats[t].checkpoint == ends[t] and stats[t].committed == ends[t] for t in tasks)

    return check


def _committed(props: dict[str, str], group: str, topic: str, partitions: int) -> list[int]:
    consumer = clients.consumer(props, **{"group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)]
    finally:
        consumer.close()


@pytest.fixture
def make_copier(sandbox: Sandbox) -> Iterator[Callable[..., Copier]]:
    """Start copiers on the sandbox's src → dst route; all are stopped after the test."""
    made: list[Copier] = []

    def make(group_id: str, worker_id: str = "w1", **kwargs: Any) -> Copier:
        copier = Copier(
            route=ROUTE,
            source=sandbox.clusters["src"].props(),
            destination=sandbox.clusters["dst"].props(),
            group_id=group_id,
            worker_id=worker_id,
            commit_interval_s=0.5,
            **kwargs,
        )
        copier.start()
        made.append(copier)
        return copier

    yield make
    for copier in made:
        copier.stop(drain=False, timeout_s=5)


def _tasks(topic: str, partitions: int, destination: str | None = None, start: str = "earliest") -> list[PartitionTask]:
    return [PartitionTask(ROUTE, topic, p, destination or topic, start) for p in range(partitions)]  # type: ignore[arg-type]


def test_copies_every_record_once_in_order_with_key_headers_timestamp(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, renamed, group = _name("copy"), _name("copy-renamed"), _name("group")
    per_partition, partitions = 2500, 4
    source_configs = {
        "retention.ms": "7200000",
        "cleanup.policy": "delete",
        "compression.type": "lz4",
        "max.message.bytes": "2000000",
        "min.insync.replicas": "1",
    }
    _create_topic(src, topic, partitions, source_configs)
    _produce(src, topic, partitions, per_partition)

    copier = make_copier(group)
    tasks = _tasks(topic, partitions, destination=renamed)
    copier.assign(tasks)
    assert copier.assigned() == set(tasks)
    _wait_for(_caught_up(copier, tasks, dict.fromkeys(tasks, per_partition)), 60, "checkpoints at the end")

    _assert_exact_copy(_read(dst, renamed, partitions), per_partition)
    # The checkpoint is a consumer-group offset on the source: standard tooling sees the lag.
    assert _committed(src, group, topic, partitions) == [per_partition] * partitions
    stats = copier.stats()
    assert all(s.state == "ok" and s.lag == 0 and s.records == per_partition for s in stats.values())

    # The destination was created like the source: partition count and the topic's own settings
    # (minus min.insync.replicas, which belongs to the source cluster's replication).
    admin = clients.admin(dst)
    assert len(admin.list_topics(renamed, timeout=10).topics[renamed].partitions) == partitions
    resource = ConfigResource("topic", renamed)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    for key in ("retention.ms", "cleanup.policy", "compression.type", "max.message.bytes"):
        assert configs[key].value == source_configs[key], key
    assert configs["min.insync.replicas"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_destination_grows_when_the_source_has_more_partitions(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, group = _name("grow"), _name("group")
    _create_topic(src, topic, 2)
    _create_topic(dst, topic, 1)
    _produce(src, topic, 2, 100)
    copier = make_copier(group)
    tasks = _tasks(topic, 2)
    copier.assign(tasks)
    _wait_for(_caught_up(copier, tasks, dict.fromkeys(tasks, 100)), 60, "two partitions copied")

    # The source grows while copying; the controller assigns the new partition in place.
    admin = clients.admin(src)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    _wait_for(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3, 30, "source grows")
    _produce(src, topic, 3, 100, first=100)
    new_task = _tasks(topic, 3)[2]
    copier.assign([new_task])
    ends = {**dict.fromkeys(tasks, 200), new_task: 100}
    _wait_for(_caught_up(copier, [*tasks, new_task], ends), 60, "grown partition copied")
    records = _read(dst, topic, 3)
    _assert_exact_copy({p: records[p] for p in (0, 1)}, 200)
    assert [c.seq for c in records[2]] == list(range(100, 200)), "new partition copied from its start"


def test_clean_hand_over_while_data_flows_loses_and_duplicates_nothing(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, other, group = _name("handover"), _name("added"), _name("group")
    partitions = 4
    _create_topic(src, topic, partitions)
    _create_topic(src, other, 2)
    _produce(src, other, 2, 300)
    first, second = make_copier(group, "w1"), make_copier(group, "w2")
    tasks = _tasks(topic, partitions)
    with Feeder(src, topic, partitions, per_second=1000) as feeder:
        first.assign(tasks)
        _wait_for(lambda: all(s.records > 200 for s in first.stats().values()), 30, "copying to start")

        # Adding a topic in place does not disturb the partitions already copying.
        before = {t: s.records for t, s in first.stats().items()}
        first.assign(_tasks(other, 2))
        time.sleep(1.0)
        after = first.stats()
        assert all(after[t].records > before[t] for t in tasks), "an existing partition stalled"

        for moving in (tasks[:2], tasks[2:]):
            started = time.monotonic()
            first.revoke(moving, timeout_s=30)
            revoke_s = time.monotonic() - started
            assert not (set(moving) & first.assigned())
            second.assign(moving)
            print(f"hand-over of {len(moving)} partitions: revoke returned in {revoke_s * 1000:.0f} ms")
            time.sleep(1.0)
        sent = feeder.stop()
    ends = dict.fromkeys(tasks, sent)
    _wait_for(_caught_up(second, tasks, ends), 60, "second copier at the end")
    _assert_exact_copy(_read(dst, topic, partitions), sent)
    _wait_for(_caught_up(first, _tasks(other, 2), dict.fromkeys(_tasks(other, 2), 300)), 30, "added topic")


def test_restart_resumes_from_the_checkpoint_and_latest_skips_the_past(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, fresh, group = _name("restart"), _name("latest"), _name("group")
    _create_topic(src, topic, 2)
    _create_topic(src, fresh, 1)
    _produce(src, topic, 2, 500)
    _produce(src, fresh, 1, 50)
    tasks = _tasks(topic, 2)
    copier = make_copier(group)
    copier.assign(tasks)
    latest = _tasks(fresh, 1, start="latest")
    copier.assign(latest)
    _wait_for(_caught_up(copier, tasks, dict.fromkeys(tasks, 500)), 60, "first half copied")
    _wait_for(lambda: copier.stats()[latest[0]].committed == 50, 30, "latest start committed")
    copier.stop(drain=True)
    assert copier.assigned() == set()

    _produce(src, topic, 2, 500, first=500)
    _produce(src, fresh, 1, 50, first=50)
    restarted = make_copier(group)
    restarted.assign([*tasks, *latest])
    _wait_for(_caught_up(restarted, tasks, dict.fromkeys(tasks, 1000)), 60, "second half copied")
    _wait_for(_caught_up(restarted, latest, {latest[0]: 100}), 30, "latest partition copied")
    _assert_exact_copy(_read(dst, topic, 2), 1000)
    assert [c.seq for c in _read(dst, fresh, 1)[0]] == list(range(50, 100))


def test_transactions_copy_committed_records_only_and_checkpoint_passes_markers(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, group = _name("txn"), _name("group")
    _create_topic(src, topic, 1)
    producer = clients.producer(src, **{"transactional.id": _name("txn-producer")})
    producer.init_transactions(30)
    committed_seqs: list[int] = []
    for batch in range(6):
        producer.begin_transaction()
        seqs = range(batch * 10, batch * 10 + 10)
        for seq in seqs:
            producer.produce(topic, partition=0, **_record(0, seq))
        producer.flush(30)  # aborted records too must reach the log, not be purged unsent
        if batch % 3 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed_seqs.extend(seqs)
    end = _end_offsets(src, topic, 1)[0]
    assert end == 66, "60 records and 6 markers occupy offsets"

    copier = make_copier(group)
    task = _tasks(topic, 1)[0]
    copier.assign([task])
    # The checkpoint reaches the end offset although the last offset is a commit marker.
    _wait_for(_caught_up(copier, [task], {task: end}), 60, "checkpoint past the last marker")
    assert copier.stats()[task].lag == 0
    assert [c.seq for c in _read(dst, topic, 1)[0]] == committed_seqs


def test_deleted_destination_topic_stops_only_its_partitions(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    doomed, healthy, group = _name("doomed"), _name("healthy"), _name("group")
    for topic in (doomed, healthy):
        _create_topic(src, topic, 2)
        _produce(src, topic, 2, 100)
    copier = make_copier(group)
    doomed_tasks, healthy_tasks = _tasks(doomed, 2), _tasks(healthy, 2)
    copier.assign([*doomed_tasks, *healthy_tasks])
    _wait_for(
        _caught_up(copier, doomed_tasks + healthy_tasks, {t: 100 for t in doomed_tasks + healthy_tasks}),
        60,
        "both topics copied",
    )

    admin = clients.admin(dst)
    admin.delete_topics([doomed])[doomed].result(timeout=30)
    started = time.monotonic()
    with Feeder(src, doomed, 2, per_second=50), Feeder(src, healthy, 2, per_second=50):
        _wait_for(lambda: all(copier.stats()[t].state.startswith("failed:") for t in doomed_tasks), 60, "failed state")
    print(f"deleted destination detected after {time.monotonic() - started:.1f} s")
    stats = copier.stats()
    for task in doomed_tasks:
        assert doomed in stats[task].state and "does not exist" in stats[task].state, stats[task].state
        assert stats[task].checkpoint is not None and stats[task].checkpoint >= 100
    ends = dict(zip(healthy_tasks, _end_offsets(src, healthy, 2), strict=True))
    _wait_for(_caught_up(copier, healthy_tasks, ends), 30, "healthy topic keeps copying")
    assert all(stats[t].state == "ok" for t in healthy_tasks)
    assert doomed not in clients.admin(dst).list_topics(timeout=10).topics, "the copier re-created it"


def _live_beside_a_backlog(sandbox: Sandbox, copier: Copier, backlog_records: int) -> tuple[int, int, bool]:
    """Copy a big backlog and a trickle at once. Returns how many trickle records were sent, how
    many of them arrived while the backlog was still behind, and whether the two partitions ever
    ran in separate pipelines (catch-up and realtime). Every trickle record is checked to arrive
    once, in order."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    backlog, live = _name("backlog"), _name("live")
    _create_topic(src, backlog, 1)
    _create_topic(src, live, 1)
    _produce(src, backlog, 1, backlog_records, pad=1000)
    backlog_task, live_task = _tasks(backlog, 1)[0], _tasks(live, 1)[0]
    copier.assign([live_task])
    _wait_for(
        lambda: copier.stats().get(live_task) is not None and copier.stats()[live_task].state == "ok",
        30,
        "live partition started",
    )
    copier.assign([backlog_task])

    consumer = clients.consumer(dst, **{"group.id": _name("live"), "enable.auto.commit": False})
    _wait_for(lambda: live in clients.admin(dst).list_topics(timeout=10).topics, 30, "live destination")
    consumer.assign([TopicPartition(live, 0, 0)])
    producer = clients.producer(src, **{"linger.ms": 0})
    sent = arrived_behind = 0
    split_seen = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stats = copier.stats()
        if stats[backlog_task].pipeline == "catchup" and stats[live_task].pipeline == "realtime":
            split_seen = True
        backlog_lag = stats[backlog_task].lag
        if backlog_lag == 0:
            break
        producer.produce(live, partition=0, **_record(0, sent))
        producer.poll(0)
        sent += 1
        arrived = [msg for msg in consumer.consume(100, 0.05) if msg.error() is None]
        if backlog_lag is not None:
            arrived_behind += len(arrived)
    consumer.close()
    assert producer.flush(10) == 0
    assert copier.stats()[backlog_task].lag == 0, f"backlog not copied within 120 s: {copier.stats()}"
    _wait_for(_caught_up(copier, [live_task], {live_task: sent}), 60, "the trickle copied")
    _assert_exact_copy(_read(dst, live, 1), sent)
    return sent, arrived_behind, split_seen


@pytest.mark.parametrize("isolated", [True, False], ids=["isolated", "shared-pipeline"])
def test_a_realtime_partition_keeps_arriving_while_a_lagging_one_catches_up(
    sandbox: Sandbox, make_copier: Callable[..., Copier], isolated: bool
) -> None:
    # How fast it arrives is measured by `strait bench` (isolation); here: that it arrives.
    copier = make_copier(_name("group"), catchup_lag_threshold=10_000 if isolated else None)
    sent, arrived_behind, split_seen = _live_beside_a_backlog(sandbox, copier, backlog_records=60_000)
    assert arrived_behind > 0, f"none of {sent} realtime records arrived while the backlog was copied"
    if isolated:
        assert split_seen, "the backlog partition never ran in the catch-up pipeline"


def test_destination_broker_restart_loses_and_duplicates_nothing(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, group = _name("dst-restart"), _name("group")
    partitions = 2
    _create_topic(src, topic, partitions)
    copier = make_copier(group)
    tasks = _tasks(topic, partitions)
    broker = sandbox.clusters["dst"].brokers[0].id
    with Feeder(src, topic, partitions, per_second=500) as feeder:
        copier.assign(tasks)
        _wait_for(lambda: all(s.records > 200 for s in copier.stats().values()), 30, "copying to start")
        sandbox.stop_broker("dst", broker)
        try:
            time.sleep(3)
        finally:
            sandbox.start_broker("dst", broker)
        time.sleep(2)
        sent = feeder.stop()
    _wait_for(_caught_up(copier, tasks, dict.fromkeys(tasks, sent)), 120, "copier catches up after the restart")
    _assert_exact_copy(_read(dst, topic, partitions), sent)
    assert all(s.state == "ok" for s in copier.stats().values())
