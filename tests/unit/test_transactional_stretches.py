"""The exactly-once pipeline on the record loop's fast path: stretches inside transactions.

Records that continue a partition's stream go out in stretches (one tracker call and one
delivery-book entry each); the first record of a transaction, gaps and records held back
while a transaction ends take the per-record path. The oracle: over generated histories (source
gaps, acknowledgements, failed records, abortable commits, a full producer queue), the fast path
commits exactly what the per-record path commits, every source record once and in order, each
copy with exactly its source record's headers.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, Message

from strait.worker import transactional
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask
from tests.unit.test_record_pipeline import TOPIC, FakeConsumer
from tests.unit.test_transactional_pipeline import ScriptedProducer, _pipeline, _timeout


class HeaderProducer(ScriptedProducer):
    """Remembers the headers each copy was produced with, by source offset."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: dict[tuple[int, int], list[Any]] = {}  # by partition and source offset

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes,
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        super().produce(topic, value, key, partition, on_delivery, callback, timestamp, headers)
        self.headers[partition, int(value.decode()[1:])] = list(headers or [])


class HeaderConsumer(FakeConsumer):
    """Odd offsets come with headers of their own (one named like Strait's own once were)."""

    def consume(self, num: int, timeout: float) -> list[Message]:
        return [_with_headers(m) if (m.offset() or 0) % 2 else m for m in super().consume(num, timeout)]


def _with_headers(message: Message) -> Message:
    offset = message.offset() or 0
    return Message(
        topic=message.topic(),
        partition=message.partition(),
        offset=offset,
        key=message.key(),
        value=message.value(),
        headers=_upstream(offset),
        error=None,
        timestamp=(TIMESTAMP_CREATE_TIME, 1_000 + offset),
    )


def _upstream(offset: int) -> list[tuple[str, bytes]]:
    return [("trace", b"t%d" % offset), ("strait.offset", b"999")]


def _state(partition: int = 0) -> PartitionState:
    return PartitionState(PartitionTask("r", TOPIC, partition, f"{TOPIC}-copy"))


def test_a_transaction_sends_its_first_record_alone_and_the_rest_in_one_stretch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = HeaderProducer()
    consumer = HeaderConsumer({0: list(range(100))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0)
    assert pipeline._bulk
    single: list[int] = []
    copy_one = pipeline._copy_one

    def counted(message: Message, before: int | None) -> bool:
        single.append(message.offset() or 0)
        return copy_one(message, before)

    monkeypatch.setattr(pipeline, "_copy_one", counted)
    state = _state()
    pipeline.add(state, 0)
    pipeline._step()
    assert single == [0], "only the record that begins the transaction takes the per-record path"
    assert producer.committed.get(0) == list(range(100)) and state.durable == 100
    for offset in range(100):
        assert producer.headers[0, offset] == (_upstream(offset) if offset % 2 else [])


def test_a_stretch_counts_its_bytes_toward_the_transactions_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = HeaderProducer()
    consumer = FakeConsumer({0: list(range(10))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0, transaction_max_bytes=10**9)
    state = _state()
    pipeline.add(state, 0)
    pipeline._step()  # committed with the start
    assert state.durable == 10
    consumer.logs[0] += list(range(10, 50))
    pipeline._step()
    assert pipeline._txn_open and state.durable == 10
    assert pipeline._txn_bytes == sum(len(b"k") + len(b"v%d" % o) for o in range(10, 50))
    pipeline._max_bytes = pipeline._txn_bytes + 4
    consumer.logs[0] += [50, 51]
    pipeline._step()  # 8 bytes more: past the limit, committed without waiting for the interval
    assert not pipeline._txn_open and state.durable == 52


def _history(seed: int, bulk: bool) -> tuple[HeaderProducer, list[PartitionState], dict[int, list[int]]]:
    """One generated history of two partitions, the same for both paths: the producer, the
    partitions and the source logs after it."""
    rng = random.Random(seed)
    producer = HeaderProducer()
    producer.capacity = rng.choice([3, 7, 1_000_000])
    consumer = HeaderConsumer({0: [0], 1: [0]})
    consumer.batch_limit = rng.choice([5, 40])
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0)
    pipeline._bulk = bulk
    states = [_state(0), _state(1)]
    for state in states:
        pipeline.add(state, 0)
    ends = [0, 0]
    for _ in range(80):
        event = rng.random()
        if event < 0.35:
            partition = rng.randrange(2)
            for _ in range(rng.randint(1, 30)):
                ends[partition] += rng.choice([1, 1, 1, 1, 2, 5])  # gaps: markers, compaction
                consumer.logs[partition].append(ends[partition])
        elif event < 0.55 and producer.pending:
            producer.ack(rng.randint(1, len(producer.pending)))
        elif event < 0.6 and producer.pending:
            producer.fail(1)
        elif event < 0.64:
            producer.errors["send_offsets"] = [KafkaError(KafkaError._STATE, "abortable", txn_requires_abort=True)]
        elif event < 0.7:
            producer.errors["commit"] = [_timeout()]  # asked again next turn, records held back
        elif event < 0.85:
            pipeline._commit_soon = True
        pipeline._step()
    producer.errors.clear()
    producer.capacity = 1_000_000
    for _ in range(1000):  # drained: everything fetched, produced and committed
        if [s.durable for s in states] == [end + 1 for end in ends] and not pipeline._txn_open:
            break
        pipeline._commit_soon = True
        pipeline._step()
    assert all(s.error is None for s in states) and not pipeline._txn_open
    return producer, states, consumer.logs


@pytest.mark.parametrize("seed", range(40))
def test_stretches_commit_exactly_what_single_records_commit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    fast, fast_states, logs = _history(seed, True)
    slow, slow_states, _ = _history(seed, False)
    for partition, log in logs.items():
        committed = fast.committed.get(partition, [])
        assert committed == slow.committed.get(partition, []) == log, "a record lost, or committed twice"
        assert fast_states[partition].durable == slow_states[partition].durable == log[-1] + 1
        for offset in log:
            source = _upstream(offset) if offset % 2 else []
            assert fast.headers[partition, offset] == slow.headers[partition, offset] == source
    assert fast.calls.count("abort") == slow.calls.count("abort")
