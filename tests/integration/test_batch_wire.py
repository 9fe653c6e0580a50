"""Batch mode's raw I/O on real clusters (strait.worker.batch.wire): record batches fetched
from the source leader, rewritten and produced to the destination leader arrive bit for bit
(keys, values, headers, timestamps, order), as a normal consumer reads them."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from strait.demo import create_topic
from strait.sandbox import Sandbox
from strait.worker.batch.compat import DestinationTopic, Mode, Reason
from strait.worker.batch.records import TIMESTAMP_TYPE_FLAG, Codec, TimestampType, rewrite, split_batches
from strait.worker.batch.wire import BrokerLink, copy_partition

pytestmark = pytest.mark.integration

Row = tuple[Any, ...]  # key, value, headers, (timestamp type, timestamp), offset


def uid() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture
def links(sandbox: Sandbox) -> Iterator[tuple[BrokerLink, BrokerLink]]:
    src = BrokerLink(sandbox.clusters["src"].props())
    dst = BrokerLink(sandbox.clusters["dst"].props())
    try:
        yield src, dst
    finally:
        src.close()
        dst.close()


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


@pytest.mark.parametrize("codec", ["lz4", "none", "gzip", "zstd"])
def test_batches_copied_bit_for_bit(sandbox: Sandbox, links: tuple[BrokerLink, BrokerLink], codec: str) -> None:
    src_props, dst_props = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"batch-{codec}-{uid()}"
    create_topic(src_props, topic, 1)
    create_topic(dst_props, topic, 1)
    produce_mixed(src_props, topic, 3000, codec, seed=len(codec))
    src, dst = links

    fetched = src.fetch(src.leader(topic, 0), topic, 0, 0)
    first = split_batches(fetched.records).batches
    assert first and {b.codec for b in first} == {Codec[codec.upper()]}

    stats = copy_partition(src, dst, topic, 0, max_bytes=64 * 1024)
    assert stats.decision is not None and stats.decision.mode is Mode.BATCH
    assert stats.records_produced == 3000 and stats.next_offset == 3000
    assert stats.batches_produced > 5 and stats.fetches > 1  # many batches, several fetches

    source_rows, copied_rows = read_all(src_props, topic), read_all(dst_props, topic)
    assert len(copied_rows) == 3000
    assert payload(copied_rows) == payload(source_rows)
    assert [o for *_, o in copied_rows] == list(range(3000))

    # The destination stores the very batches: same codec, same record counts.
    out = split_batches(dst.fetch(dst.leader(topic, 0), topic, 0, 0, max_bytes=16 * 1024 * 1024).records).batches
    again = split_batches(src.fetch(src.leader(topic, 0), topic, 0, 0, max_bytes=16 * 1024 * 1024).records).batches
    assert [(b.codec, b.record_count, bytes(b.payload())) for b in out] == [
        (b.codec, b.record_count, bytes(b.payload())) for b in again
    ]
    assert {b.producer_id for b in out} == {stats.producer.producer_id if stats.producer else -2}


def test_aborted_transactions_and_markers_not_copied(sandbox: Sandbox, links: tuple[BrokerLink, BrokerLink]) -> None:
    src_props, dst_props = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"batch-txn-{uid()}"
    create_topic(src_props, topic, 1)
    create_topic(dst_props, topic, 1)
    producer = Producer({**src_props, "transactional.id": f"batch-test-{uid()}", "compression.type": "lz4"})
    producer.init_transactions(30)
    base_ts = int(time.time() * 1000) - 3_600_000
    expected: list[bytes] = []
    for txn in range(6):
        producer.begin_transaction()
        for i in range(50):
            value = f"txn{txn}-{i}".encode()
            producer.produce(topic, key=b"k", value=value, timestamp=base_ts + txn * 100 + i)
            if txn % 2 == 0:
                expected.append(value)
        producer.flush(30)
        if txn % 2 == 0:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    src, dst = links

    stats = copy_partition(src, dst, topic, 0, read_committed=True, max_bytes=4096)
    assert stats.records_produced == len(expected) == 150
    assert stats.skipped.get("aborted", 0) >= 3 and stats.skipped.get("control", 0) == 6
    copied = read_all(dst_props, topic)
    assert [v for _, v, *_ in copied] == expected
    assert payload(copied) == payload(read_all(src_props, topic))


def test_destination_recompressing_falls_back_to_record_mode(
    sandbox: Sandbox, links: tuple[BrokerLink, BrokerLink]
) -> None:
    src_props, dst_props = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"batch-zstd-{uid()}"
    create_topic(src_props, topic, 1)
    create_topic(dst_props, topic, 1, {"compression.type": "zstd"})
    produce_mixed(src_props, topic, 100, "lz4", seed=3)
    src, dst = links
    stats = copy_partition(src, dst, topic, 0, destination_config=DestinationTopic("zstd"))
    assert stats.decision is not None and stats.decision.reason is Reason.CODEC_MISMATCH
    assert stats.records_produced == 0 and read_all(dst_props, topic) == []


def test_log_append_time_source_falls_back_to_record_mode(
    sandbox: Sandbox, links: tuple[BrokerLink, BrokerLink]
) -> None:
    src_props, dst_props = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"batch-lat-{uid()}"
    create_topic(src_props, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    create_topic(dst_props, topic, 1)
    produce_mixed(src_props, topic, 50, "lz4", seed=4)
    src, dst = links
    stats = copy_partition(src, dst, topic, 0)
    assert stats.decision is not None and stats.decision.reason is Reason.LOG_APPEND_TIME
    assert stats.records_produced == 0


def raw_batch(deltas: list[int], codec: int, attributes: int = 0) -> bytes:
    now = int(time.time() * 1000)
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for i, delta in enumerate(deltas):
        builder.append(delta, now - 10_000 + i, b"k%d" % i, b"v" * 200, [])
    raw = bytearray(builder.build())
    if attributes:
        raw[21:23] = (int.from_bytes(raw[21:23], "big") | attributes).to_bytes(2, "big")
        raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)


@pytest.mark.parametrize(
    ("deltas", "codec", "attributes", "accepted"),
    [
        ([0, 1, 2], 0, 0, True),
        ([0, 2, 5], 0, 0, False),  # compacted: offsets missing inside the batch
        ([0, 2, 5], 1, 0, False),
        ([0, 1, 2], 1, TIMESTAMP_TYPE_FLAG, True),  # accepted, but stored as CreateTime
    ],
    ids=["contiguous", "gap-none", "gap-gzip", "log-append-time"],
)
def test_broker_rules_behind_the_fallbacks(
    sandbox: Sandbox,
    links: tuple[BrokerLink, BrokerLink],
    deltas: list[int],
    codec: int,
    attributes: int,
    accepted: bool,
) -> None:
    """What a real destination broker does with batches that compat.decide_mode keeps in record mode."""
    _, dst = links
    topic = f"batch-rule-{uid()}"
    create_topic(sandbox.clusters["dst"].props(), topic, 1)
    [batch] = split_batches(raw_batch(deltas, codec, attributes)).batches
    identity = dst.init_producer_id()
    out = rewrite(batch, producer_id=identity.producer_id, producer_epoch=identity.epoch, base_sequence=0)
    leader = dst.leader(topic, 0)
    result = dst.produce(leader, {(topic, 0): out})[(topic, 0)]
    stored = split_batches(dst.fetch(leader, topic, 0, 0).records).batches
    if not accepted:
        assert result.error_code == 87 and stored == []  # INVALID_RECORD
        return
    assert result.error_code == 0
    [copy] = stored
    assert bytes(copy.payload()) == bytes(batch.payload())
    # The broker sets the timestamp type from the topic's config: a LogAppendTime batch becomes
    # CreateTime with the records' own (producer) times, not what a source consumer saw.
    assert copy.timestamp_type is TimestampType.CREATE_TIME and copy.max_timestamp == batch.max_timestamp


def test_batch_the_destination_refuses_stops_batch_mode_at_that_batch(
    sandbox: Sandbox, links: tuple[BrokerLink, BrokerLink]
) -> None:
    """A destination config batch mode was not told about (max.message.bytes): the broker's
    MESSAGE_TOO_LARGE sends the partition to record mode at the refused batch, nothing skipped."""
    src_props, dst_props = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"batch-large-{uid()}"
    create_topic(src_props, topic, 1)
    create_topic(dst_props, topic, 1, {"max.message.bytes": "2000"})
    producer = Producer({**src_props, "linger.ms": 0, "batch.num.messages": 1})
    for size in (100, 100, 5000, 100):
        producer.produce(topic, value=b"v" * size)
        producer.flush(30)
    src, dst = links
    stats = copy_partition(src, dst, topic, 0)
    assert stats.decision is not None and stats.decision.reason is Reason.REFUSED
    assert "TOO_LARGE" in stats.decision.detail  # kafka-python names it MESSAGE_SIZE_TOO_LARGE
    assert stats.records_produced == 2 and stats.next_offset == 2
    assert [len(v) for _, v, *_ in read_all(dst_props, topic)] == [100, 100]


def test_destination_broker_frozen_mid_copy_loses_and_duplicates_nothing(sandbox: Sandbox) -> None:
    """The destination leader stops answering (SIGSTOP) for a few seconds while batches are in
    flight: requests time out, the same bytes go again with the same sequences, and the broker's
    duplicate detection keeps exactly one copy of each batch."""
    src_props, dst_props = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"batch-freeze-{uid()}"
    create_topic(src_props, topic, 1)
    create_topic(dst_props, topic, 1)
    count = 20_000
    produce_mixed(src_props, topic, count, "lz4", seed=5)
    broker = sandbox.clusters["dst"].brokers[0].id
    froze = threading.Event()

    def freeze_when_copying() -> None:
        watcher = Consumer({**dst_props, "group.id": f"watch-{uid()}"})
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                _low, high = watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
                if high >= count // 10:
                    break
                time.sleep(0.05)
        finally:
            watcher.close()
        sandbox.pause_broker("dst", broker)
        froze.set()
        try:
            time.sleep(4)
        finally:
            sandbox.resume_broker("dst", broker)

    src = BrokerLink(src_props)
    dst = BrokerLink(dst_props, request_timeout_ms=2_000)
    thread = threading.Thread(target=freeze_when_copying, daemon=True)
    try:
        thread.start()
        stats = copy_partition(src, dst, topic, 0, max_bytes=32 * 1024, retries=20, deadline_s=240)
    finally:
        thread.join(30)
        src.close()
        dst.close()
    assert froze.is_set(), "the copy ended before the broker could be frozen"
    assert stats.records_produced == count and stats.next_offset == count
    assert stats.resent > 0, "nothing was in flight while the broker was frozen"
    copied = read_all(dst_props, topic)
    assert [o for *_, o in copied] == list(range(count))  # no duplicates, no holes
    assert payload(copied) == payload(read_all(src_props, topic))


def test_one_produce_request_carries_several_partitions(sandbox: Sandbox) -> None:
    """The bench's multi-partition produce path against a real broker (every answer checked)."""
    from strait.worker.batch.bench import bench_wire

    props = sandbox.clusters["dst"].props()
    rows = bench_wire(props, props, partitions=3, rounds=4)
    assert len(rows) == 4 and rows[2].startswith("| 1 | 12 | 12 |") and rows[3].startswith("| 3 | 12 | 4 |")
