"""The copier with ``copy: batch`` against real clusters: whole record batches pass through the
batch pipeline bit for bit, checkpoints cover acknowledged batches, and partitions whose batches
cannot pass unchanged are copied record by record, with the reason in their stats."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strait.demo import create_topic
from strait.sandbox import Sandbox
from strait.worker.batch.answers import fetched_partitions
from strait.worker.batch.link import Links
from strait.worker.batch.records import split_batches
from strait.worker.copier import Copier, PartitionStats
from strait.worker.task import PartitionTask
from tests.integration import faults

pytestmark = pytest.mark.integration

ROUTE = "batch-route"
TIMEOUT_S = 240  # the machine can be very loaded: generous, never a timed assertion

Row = tuple[Any, ...]  # key, value, headers, (timestamp type, timestamp), offset


def uid() -> str:
    return uuid.uuid4().hex[:6]


def produce_mixed(props: Mapping[str, Any], topic: str, count: int, codec: str, seed: int) -> None:
    """Records of every shape: null and empty keys and values, several headers (one null),
    sizes from 0 to 3 KB, explicit timestamps out of order."""
    rng = random.Random(seed)
    producer = Producer(
        {**props, "compression.type": codec, "linger.ms": 20, "batch.size": 16384, "enable.idempotence": True}
    )
    # Backdated an hour, out of order; older than retention.ms (7 days) would be deleted at once.
    base_ts = int(time.time() * 1000) - 3_600_000
    for i in range(count):
        key = None if i % 17 == 0 else (b"" if i % 23 == 0 else f"key-{i}-{rng.random()}".encode())
        size = rng.choice([0, 10, 100, 1000, 3000])
        value = None if i % 29 == 0 else bytes(rng.getrandbits(8) for _ in range(size // 4)) + b"x" * (size - size // 4)
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("n", f"{i}".encode()), ("empty", b""), ("null", None), ("n", b"dup")] if i % 3 else None
        )
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=base_ts + rng.randint(-(10**6), 10**6))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def read_all(props: Mapping[str, Any], topic: str, partition: int = 0) -> list[Row]:
    consumer = Consumer(
        {
            **props,
            "group.id": f"verify-{uid()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        rows: list[Row] = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"no record from {topic} after {len(rows)}"
            error = msg.error()
            if error is not None:
                if error.code() == -191:  # _PARTITION_EOF: the end read before, nothing produced since
                    break
                raise AssertionError(error)
            rows.append((msg.key(), msg.value(), msg.headers(), msg.timestamp(), msg.offset()))
        return rows
    finally:
        consumer.close()


def payload(rows: list[Row]) -> list[tuple[Any, ...]]:
    return [(k, v, h, ts) for k, v, h, ts, _ in rows]


def raw_records(props: Mapping[str, Any], topic: str, max_bytes: int) -> bytes:
    """The record batches of partition 0 from offset 0 as the broker stores them (one Fetch)."""
    links = Links(props, props, client_id=f"test-raw-{uid()}")
    try:
        key = (topic, 0)
        leader = links.source.leaders(topic)[0]
        future = links.source.fetch(
            leader, {key: 0}, partition_max_bytes={key: max_bytes}, max_bytes=max_bytes, max_wait_ms=500
        )
        deadline = time.monotonic() + 60
        while not future.is_done and time.monotonic() < deadline:
            links.poll(0.1)
        assert future.is_done and future.succeeded(), f"fetch of {topic}-0: {future.exception}"
        fetched = fetched_partitions(future.value)[key]
        assert fetched.error_code == 0, fetched.error_code
        return fetched.records
    finally:
        links.close()


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def make_copier(sandbox: Sandbox) -> Iterator[Callable[..., Copier]]:
    made: list[Copier] = []

    def make(group: str, **options: Any) -> Copier:
        copier = Copier(
            route=ROUTE,
            source=sandbox.clusters["src"].props(),
            destination=sandbox.clusters["dst"].props(),
            group_id=group,
            worker_id=f"w-{uid()}",
            replication_factor=1,
            commit_interval_s=0.2,
            copy="batch",
            # Every partition in batch mode, lagging or not (these tests copy small logs).
            **{"catchup_lag_threshold": None, **options},
        )
        made.append(copier)
        copier.start()
        return copier

    yield make
    for copier in made:
        copier.stop(drain=False, timeout_s=5)


def committed(props: dict[str, Any], group: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({**props, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def stats_of(copier: Copier, task: PartitionTask) -> PartitionStats | None:
    return copier.stats().get(task)


def copied_through(copier: Copier, task: PartitionTask, end: int) -> bool:
    s = stats_of(copier, task)
    return s is not None and s.committed is not None and s.committed >= end


@contextlib.contextmanager
def modes_seen(
    copier: Copier, task: PartitionTask, every_s: float = 0.05
) -> Iterator[list[tuple[str | None, str, str]]]:
    """Every (pipeline, mode, mode_reason) the partition runs in while the block runs, in order."""
    seen: list[tuple[str | None, str, str]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            s = stats_of(copier, task)
            if s is not None and s.pipeline is not None and s.state == "ok":
                now = (s.pipeline, s.mode, s.mode_reason)
                if not seen or seen[-1] != now:
                    seen.append(now)
            time.sleep(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join(5)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_records_bit_identical_after_batch_copy(
    sandbox: Sandbox, make_copier: Callable[..., Copier], codec: str
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-{codec}-{uid()}"
    create_topic(src, topic, 2)
    for partition in range(2):
        produce_mixed({**src}, topic, 1500, codec, seed=partition)  # key-less records spread over both
    group = f"g-{uid()}"
    copier = make_copier(group)
    tasks = [PartitionTask(ROUTE, topic, p, topic) for p in range(2)]
    copier.assign(tasks)
    ends = {p: len(read_all(src, topic, p)) for p in range(2)}
    for task in tasks:
        wait_for(lambda t=task: copied_through(copier, t, ends[t.partition]), f"{task} copied")
        s = stats_of(copier, task)
        assert s is not None and s.mode == "batch" and s.mode_reason == "" and s.state == "ok"
        assert s.records == ends[task.partition] and s.lag == 0
    for partition in range(2):
        source_rows, copied_rows = read_all(src, topic, partition), read_all(dst, topic, partition)
        assert payload(copied_rows) == payload(source_rows)  # key, value, headers, timestamp, order
        assert [o for *_, o in copied_rows] == list(range(len(source_rows)))
        assert committed(src, group, topic, partition) == ends[partition]


def test_aborted_transactions_not_copied_and_checkpoint_passes_markers(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-txn-{uid()}"
    create_topic(src, topic, 1)
    producer = Producer({**src, "transactional.id": f"bp-{uid()}", "compression.type": "lz4"})
    producer.init_transactions(60)
    base_ts = int(time.time() * 1000) - 3_600_000
    expected = []
    for txn in range(6):
        producer.begin_transaction()
        for i in range(40):
            value = f"txn{txn}-{i}".encode()
            producer.produce(topic, key=b"k", value=value, timestamp=base_ts + txn * 100 + i)
            if txn % 2 == 0:
                expected.append(value)
        producer.flush(60)
        if txn % 2 == 0:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    end = 6 * 40 + 6  # records and one marker per transaction
    group = f"g-{uid()}"
    copier = make_copier(group)
    task = PartitionTask(ROUTE, topic, 0, topic)
    copier.assign([task])
    # The checkpoint passes the last commit marker: nothing is left to copy.
    wait_for(lambda: copied_through(copier, task, end), "checkpoint at the end of the source")
    copied = read_all(dst, topic)
    assert [v for _, v, *_ in copied] == expected
    assert payload(copied) == payload(read_all(src, topic))
    s = stats_of(copier, task)
    assert s is not None and s.mode == "batch" and s.records == len(expected)


def test_compacted_source_with_gaps_runs_in_record_mode(sandbox: Sandbox, make_copier: Callable[..., Copier]) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-compact-{uid()}"
    create_topic(
        src,
        topic,
        1,
        {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    producer = Producer({**src, "linger.ms": 5, "batch.size": 2000})
    for round_ in range(30):
        for key in range(10):
            producer.produce(topic, key=f"k{key}".encode(), value=f"r{round_}".encode())
        producer.flush(30)
        time.sleep(0.05)
    end = 300
    # Wait until the cleaner removed records (fewer left than offsets), so batches have gaps.
    wait_for(lambda: len(read_all(src, topic)) < end, "log compaction of the source")
    remaining = read_all(src, topic)
    group = f"g-{uid()}"
    copier = make_copier(group)
    task = PartitionTask(ROUTE, topic, 0, topic)
    copier.assign([task])
    wait_for(lambda: copied_through(copier, task, remaining[-1][-1] + 1), "compacted topic copied")
    s = stats_of(copier, task)
    assert s is not None and s.mode == "record"
    assert s.mode_reason.startswith(("compacted_gap", "inner_gap")), s.mode_reason
    assert payload(read_all(dst, topic))[: len(remaining)] == payload(remaining)


def test_destination_compression_mismatch_runs_in_record_mode(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-codec-{uid()}"
    create_topic(src, topic, 1)
    create_topic(dst, topic, 1, {"compression.type": "zstd"})
    produce_mixed(src, topic, 300, "lz4", seed=7)
    group = f"g-{uid()}"
    copier = make_copier(group)
    task = PartitionTask(ROUTE, topic, 0, topic)
    copier.assign([task])
    wait_for(lambda: copied_through(copier, task, 300), "copied in record mode")
    s = stats_of(copier, task)
    assert s is not None and s.mode == "record" and s.mode_reason.startswith("codec_mismatch"), s
    assert payload(read_all(dst, topic)) == payload(read_all(src, topic))


# kill -9 of batch workers under load: test_faults.py, test_repeated_kill_9_of_random_workers_loses_nothing[batch]


def test_batch_copy_between_secured_clusters(secure_sandbox: Sandbox) -> None:
    """SASL/SCRAM over TLS to mutual TLS, as the least-privileged user: batch mode, bit for bit."""
    src, dst = secure_sandbox.clusters["src"], secure_sandbox.clusters["dst"]
    topic = f"bp-secure-{uid()}"
    create_topic(src.admin_props(), topic, 1)
    produce_mixed(src.admin_props(), topic, 500, "gzip", seed=11)
    group = f"strait-{ROUTE}"  # the least-privileged user may use the route's own group only
    copier = Copier(
        route=ROUTE,
        source=src.props(),
        destination=dst.props(),
        group_id=group,
        worker_id=f"w-{uid()}",
        replication_factor=1,
        commit_interval_s=0.2,
        copy="batch",
        catchup_lag_threshold=None,  # batch mode for this small log too
    )
    copier.start()
    try:
        task = PartitionTask(ROUTE, topic, 0, topic)
        copier.assign([task])
        wait_for(lambda: copied_through(copier, task, 500), "secured batch copy")
        s = stats_of(copier, task)
        assert s is not None and s.mode == "batch", s
    finally:
        copier.stop(drain=False, timeout_s=5)
    assert payload(read_all(dst.admin_props(), topic)) == payload(read_all(src.admin_props(), topic))


def test_checkpoint_inside_a_batch_resumes_in_batch_mode(sandbox: Sandbox, make_copier: Callable[..., Copier]) -> None:
    """A checkpoint record mode left inside a batch (a route switched to batch): the rest of that
    batch is encoded again once, and every record from the checkpoint on arrives as it was."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-mid-{uid()}"
    create_topic(src, topic, 1)
    produce_mixed(src, topic, 600, "gzip", seed=5)
    source_rows = read_all(src, topic)
    batches = [b for b in split_batches(raw_records(src, topic, 16 * 1024 * 1024)).batches if b.record_count >= 2]
    checkpoint = batches[len(batches) // 2].base_offset + 1  # inside a batch, by construction
    group = f"g-{uid()}"
    committer = Consumer({**src, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, checkpoint)], asynchronous=False)
    committer.close()
    copier = make_copier(group)
    task = PartitionTask(ROUTE, topic, 0, topic)
    copier.assign([task])
    wait_for(lambda: copied_through(copier, task, len(source_rows)), "copy from a checkpoint inside a batch")
    s = stats_of(copier, task)
    assert s is not None and s.mode == "batch", s
    assert payload(read_all(dst, topic)) == payload(source_rows[checkpoint:])


def test_destination_broker_killed_mid_copy_loses_nothing(
    sandbox: Sandbox, make_copier: Callable[..., Copier], record_property: Callable[[str, object], None]
) -> None:
    """kill -9 of the destination's only broker while records flow, then a restart: batches in
    flight are sent again and every record arrives, new records in order, repeats only as
    re-sent ranges."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-dstkill-{uid()}"
    partitions = 2
    faults.create_topic(src, topic, partitions)
    group = f"g-{uid()}"
    copier = make_copier(group)
    tasks = [PartitionTask(ROUTE, topic, p, topic) for p in range(partitions)]
    with faults.load(src, {topic: partitions}, 200) as generator:
        copier.assign(tasks)
        faults.all_flowing(dst, topic, partitions, TIMEOUT_S)
        broker = sandbox.clusters["dst"].brokers[0].id
        sandbox.kill_broker("dst", broker)
        time.sleep(2)
        sandbox.start_broker("dst", broker, timeout_s=TIMEOUT_S)
        faults.flowing(dst, topic, list(range(partitions)), partitions, TIMEOUT_S)
    faults.caught_up(dst, topic, generator.produced(topic), TIMEOUT_S)
    stats = copier.stats()
    assert all(stats[t].mode == "batch" for t in tasks), stats
    outcome = faults.check("batch_destination_kill9", dst, topic, generator.produced(topic), record_property)
    print(f"rewinds {[stats[t].rewinds for t in tasks]}, duplicates {outcome.report.duplicates}")


def test_a_caught_up_partition_moves_to_record_mode_and_new_records_arrive_once(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    """The default split of a batch route: a backlog is copied in batch mode, the partition moves
    to record mode once caught up (at its checkpoint), and the records written after that arrive
    exactly once, in order, next to the backlog's."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-split-{uid()}"
    create_topic(src, topic, 1)
    produce_mixed(src, topic, 2000, "lz4", seed=3)
    backlog = len(read_all(src, topic))
    copier = make_copier(f"g-{uid()}", catchup_lag_threshold=500)
    task = PartitionTask(ROUTE, topic, 0, topic)
    with modes_seen(copier, task) as seen:
        copier.assign([task])
        wait_for(lambda: copied_through(copier, task, backlog), "the backlog copied")
        wait_for(lambda: bool(seen) and seen[-1][0] == "realtime", "the move to record mode once caught up")
        produce_mixed(src, topic, 300, "lz4", seed=4)
        source_rows = read_all(src, topic)
        wait_for(lambda: copied_through(copier, task, len(source_rows)), "the new records copied")
    assert seen[0] == ("batch", "batch", "lagging: more than 500 records behind"), seen
    assert seen[1:] == [("realtime", "record", "caught up: batch mode once more than 500 records behind")], seen
    copied_rows = read_all(dst, topic)
    assert payload(copied_rows) == payload(source_rows)  # each record once, in order
    assert [o for *_, o in copied_rows] == list(range(len(source_rows)))


def small_batches(props: dict[str, Any], topic: str, count: int, codec: str) -> None:
    """``count`` records in batches of 4, as a producer writes them at a low rate."""
    producer = Producer(
        {**props, "batch.num.messages": 4, "linger.ms": 0, "enable.idempotence": True, "compression.type": codec}
    )
    for i in range(count):
        producer.produce(topic, value=f"{i:08d}".encode() * 4)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def copy_small_backlog(
    sandbox: Sandbox, make_copier: Callable[..., Copier], monkeypatch: pytest.MonkeyPatch, codec: str
) -> tuple[str, list[Any], list[tuple[str | None, str, str]]]:
    """40,000 records in 4-record batches of ``codec``, copied by a batch route (threshold 500,
    judged soon): the topic, the source's records and every (pipeline, mode, reason) seen."""
    from strait.worker import moves

    monkeypatch.setattr(moves, "MIN_DWELL_S", 0.3)  # judged soon, long before the backlog ends
    monkeypatch.setattr(moves, "CLASSIFY_INTERVAL_S", 0.2)
    src = sandbox.clusters["src"].props()
    topic = f"bp-small-{codec}-{uid()}"
    create_topic(src, topic, 1)
    small_batches(src, topic, 40_000, codec)
    source_rows = read_all(src, topic)
    copier = make_copier(f"g-{uid()}", catchup_lag_threshold=500)
    task = PartitionTask(ROUTE, topic, 0, topic)
    with modes_seen(copier, task, every_s=0.02) as seen:
        copier.assign([task])
        wait_for(lambda: copied_through(copier, task, len(source_rows)), "the backlog copied")
    return topic, source_rows, seen


def test_a_backlog_of_small_compressed_batches_moves_to_record_mode_and_arrives_once(
    sandbox: Sandbox, make_copier: Callable[..., Copier], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lagging partition whose source batches hold 4 records, compressed (they cannot be merged
    without recompressing), starts in batch mode, is judged too sparse for it after 200 batches,
    and finishes its backlog in the record catch-up pipeline: every record once, in order."""
    from strait.worker import moves

    topic, source_rows, seen = copy_small_backlog(sandbox, make_copier, monkeypatch, "lz4")
    dst = sandbox.clusters["dst"].props()
    reasons: list[tuple[str | None, str]] = []
    for pipeline, _, reason in seen:
        if not reasons or reasons[-1] != (pipeline, reason):
            reasons.append((pipeline, reason))
    assert reasons[0] == ("batch", "lagging: more than 500 records behind"), reasons
    assert ("catchup", moves.sparse_reason()) in reasons, reasons
    assert all(pipeline != "batch" for pipeline, _ in reasons[reasons.index(("catchup", moves.sparse_reason())) :])
    copied_rows = read_all(dst, topic)
    assert payload(copied_rows) == payload(source_rows)  # each record once, in order
    assert [o for *_, o in copied_rows] == list(range(len(source_rows)))


def test_a_backlog_of_small_uncompressed_batches_drains_merged_in_batch_mode(
    sandbox: Sandbox, make_copier: Callable[..., Copier], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same backlog uncompressed stays in batch mode: a partition's small batches go out
    merged (strait.worker.batch.merging), every record once, in order, at its own offset, in far
    fewer destination batches than the source holds."""
    from strait.worker import moves

    topic, source_rows, seen = copy_small_backlog(sandbox, make_copier, monkeypatch, "none")
    dst = sandbox.clusters["dst"].props()
    assert seen[0] == ("batch", "batch", "lagging: more than 500 records behind"), seen
    # Never judged sparse (it may move to the realtime pipeline once caught up, as any does).
    assert all(pipeline != "catchup" and reason != moves.sparse_reason() for pipeline, _, reason in seen), seen
    copied_rows = read_all(dst, topic)
    assert payload(copied_rows) == payload(source_rows)  # each record once, in order
    assert [o for *_, o in copied_rows] == list(range(len(source_rows)))
    copied_batches = split_batches(raw_records(dst, topic, 32 * 1024 * 1024)).batches
    assert sum(b.record_count for b in copied_batches) == len(source_rows)
    assert len(copied_batches) < len(source_rows) // 4 // 10, len(copied_batches)  # merged


def test_realtime_copy_batch_copies_a_caught_up_partition_in_whole_batches(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    """``realtime_copy: batch``: a caught-up partition runs in the realtime batch pipeline from
    the start, a backlog in the batch pipeline, and once drained it joins the realtime batch
    pipeline at its checkpoint; records written meanwhile arrive once, in order."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-rtb-{uid()}"
    create_topic(src, topic, 2)
    produce_mixed(src, topic, 2000, "none", seed=5)  # spread over both partitions
    ends = {p: len(read_all(src, topic, p)) for p in range(2)}
    copier = make_copier(f"g-{uid()}", catchup_lag_threshold=500, realtime_copy="batch")
    tasks = [PartitionTask(ROUTE, topic, p, topic) for p in range(2)]
    with modes_seen(copier, tasks[0]) as seen:
        copier.assign(tasks)
        for task in tasks:
            wait_for(lambda t=task: copied_through(copier, t, ends[t.partition]), f"{task} backlog copied")
        wait_for(lambda: bool(seen) and seen[-1][0] == "realtime-batch", "the move once caught up")
        small_batches(src, topic, 3000, "none")
        rows = {p: read_all(src, topic, p) for p in range(2)}
        for task in tasks:
            wait_for(lambda t=task: copied_through(copier, t, len(rows[t.partition])), f"{task} new records copied")
    assert seen[0] == ("batch", "batch", "lagging: more than 500 records behind"), seen
    assert seen[1:] == [("realtime-batch", "batch", "caught up: realtime pipeline, small uncompressed batches merged")]
    for partition in range(2):
        copied_rows = read_all(dst, topic, partition)
        assert payload(copied_rows) == payload(rows[partition])  # each record once, in order
        assert [o for *_, o in copied_rows] == list(range(len(rows[partition])))


def produce_numbered(props: Mapping[str, Any], topic: str, count: int) -> None:
    """``count`` records whose values are their numbers (100 bytes each), in large batches."""
    producer = Producer({**props, "linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": count})
    for i in range(count):
        producer.produce(topic, value=f"{i:0100d}".encode())
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def numbers_in(props: Mapping[str, Any], topic: str) -> list[int]:
    """The numbers of every record in partition 0 of ``topic``, in offset order."""
    consumer = Consumer({**props, "group.id": f"verify-{uid()}", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        numbers: list[int] = []
        while True:
            messages = consumer.consume(10_000, timeout=10)
            assert messages, f"nothing from {topic} after {len(numbers)}"
            for msg in messages:
                error = msg.error()
                if error is not None:
                    if error.code() == -191:  # _PARTITION_EOF
                        return numbers
                    raise AssertionError(error)
                numbers.append(int(msg.value()))
    finally:
        consumer.close()


def test_a_backlog_drains_in_its_own_process_and_a_kill_of_it_loses_nothing(
    sandbox: Sandbox, make_copier: Callable[..., Copier]
) -> None:
    """The backlog's batch pipeline runs in a process of its own, whose stage figures reach the
    route's observer; SIGKILL of that process mid-backlog stops its partition in this copier
    (the pipeline crashed), and a copier resuming from the committed checkpoint copies every
    record: none lost."""
    import os
    import signal

    from strait.metrics.stages import RouteObserver
    from strait.worker.batch.remote import BacklogProcess

    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-kill-{uid()}"
    count = 400_000
    create_topic(src, topic, 1)
    produce_numbered(src, topic, count)
    group = f"g-{uid()}"
    observer = RouteObserver(ROUTE)
    copier = make_copier(group, observer=observer)
    backlog = copier._moves.batch
    assert isinstance(backlog, BacklogProcess)
    pid = backlog.pid
    assert pid is not None and pid != os.getpid()
    task = PartitionTask(ROUTE, topic, 0, topic)
    copier.assign([task])
    deadline = time.monotonic() + TIMEOUT_S
    while (s := stats_of(copier, task)) is None or not s.checkpoint:
        assert time.monotonic() < deadline, "no progress in the backlog process"
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    assert s.pipeline == "batch" and s.mode == "batch" and s.checkpoint < count, s
    wait_for(lambda: copier.crashed() == "batch", "the copier to see its backlog pipeline crashed")
    after = stats_of(copier, task)
    assert after is not None and after.state.startswith("failed:pipeline batch crashed"), after
    stages = {(pipeline, stage) for pipeline, stage, _ in observer.stages()}
    assert {("batch", "fetch_wait"), ("batch", "produce_ack")} <= stages, stages
    copier.stop(drain=False, timeout_s=5)
    resumed_from = committed(src, group, topic)
    assert resumed_from < count
    resumed = make_copier(group)
    resumed.assign([task])
    wait_for(lambda: copied_through(resumed, task, count), "the rest of the backlog copied")
    numbers = numbers_in(dst, topic)
    assert set(numbers) == set(range(count))  # every record; those after the checkpoint maybe twice
    print(f"killed at checkpoint {s.checkpoint}, resumed from {resumed_from}, {len(numbers) - count} duplicates")


def test_a_backlog_process_whose_worker_is_silent_holds_until_it_speaks(
    sandbox: Sandbox, capfd: pytest.CaptureFixture[str]
) -> None:
    """A worker frozen or starved commits nothing of what its backlog process copies: the process,
    hearing nothing for WORKER_SILENCE_S, holds fetching mid-backlog, and copies the rest once
    the worker speaks again (as a copier's every turn does)."""
    from strait.worker.batch.remote import BacklogProcess
    from strait.worker.pipeline import PartitionState

    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"bp-silent-{uid()}"
    count = 100_000
    create_topic(src, topic, 1)
    create_topic(dst, topic, 1)
    produce_numbered(src, topic, count)
    backlog = BacklogProcess(name="batch", source=src, destination=dst, group_id=f"g-{uid()}", client_id=uid())
    backlog.start()
    said: list[str] = []

    def child_said(text: str) -> bool:
        said.append(capfd.readouterr().err)
        return any(text in chunk for chunk in said)

    try:
        # Slow enough (about 100 s for the backlog) that the silence comes mid-backlog.
        backlog._send(("pace", 100_000.0))
        state = PartitionState(PartitionTask(ROUTE, topic, 0, topic))
        backlog.add(state, 0)
        wait_for(lambda: child_said("no word from the worker"), "the backlog process to hold on its own")
        held_at = state.checkpoint
        assert held_at is not None and held_at < count, held_at

        def speaks_and_copied() -> bool:
            backlog.hold(False)  # what the copier's every turn sends
            return state.checkpoint == count

        backlog._send(("pace", None))
        wait_for(speaks_and_copied, "the rest of the backlog copied once the worker speaks")
    finally:
        backlog.stop(5)
    assert numbers_in(dst, topic) == list(range(count))
