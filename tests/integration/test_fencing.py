"""Fencing against a real destination: after fence(), a zombie's transaction is aborted and it
can write nothing more; the rightful owner of the id starts normally."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.fencing import FenceError, fence, transactional_id
from strait.sandbox import Sandbox
from strait.worker.pipeline import client_call

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_topic(props: dict[str, str], topic: str) -> None:
    admin = clients.admin(props)  # must outlive the future
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)


def _read(props: dict[str, str], topic: str, isolation: str) -> list[bytes]:
    """Every record of partition 0 up to its end (the last stable offset for read_committed)."""
    consumer = clients.consumer(
        props,
        **{
            "group.id": _name("fencing-reader"),
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        },
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return values
                raise KafkaException(error)
            values.append(msg.value() or b"")
    finally:
        consumer.close()
    raise AssertionError(f"{topic}: no end of partition within 30 s")


def _fenced_error(call: Any) -> KafkaError:
    """Run a call that must fail because the producer was fenced; its KafkaError."""
    try:
        call()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    raise AssertionError("a fenced producer's call succeeded")


def test_fence_aborts_the_open_transaction_and_fences_the_zombie(sandbox: Sandbox) -> None:
    dst = sandbox.clusters["dst"].props()
    topic, group = _name("fenced"), _name("strait.route")
    _create_topic(dst, topic)
    tid = transactional_id(_name("route"), "w1", "realtime")
    checkpoints = clients.consumer(dst, **{"group.id": group, "enable.auto.commit": False})  # never subscribes

    zombie = clients.producer(dst, **{"transactional.id": tid})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"committed", partition=0)
    zombie.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], checkpoints.consumer_group_metadata(), 30)
    zombie.commit_transaction(30)
    # An open transaction with records in the log and a checkpoint pending: what a worker
    # frozen in the middle of a transaction leaves behind.
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(topic, f"open-{i}".encode(), partition=0)
    zombie.send_offsets_to_transaction([TopicPartition(topic, 0, 6)], checkpoints.consumer_group_metadata(), 30)
    assert zombie.flush(30) == 0

    # The open transaction would time out only after 60 s (librdkafka's default): fenced within
    # 30 s, it was aborted, not waited out.
    fence(dst, [tid, transactional_id("unused", "w1", "catchup")], timeout_s=30)

    # The zombie wakes up: whatever it does next fails as fenced, and fatally.
    delivery: list[KafkaError | None] = []
    zombie.produce(topic, b"late", partition=0, on_delivery=lambda err, _msg: delivery.append(err))
    try:
        zombie.flush(30)
    except Exception as exc:  # KafkaException, or a SystemError caused by one (a confluent-kafka quirk)
        assert isinstance(exc, KafkaException) or isinstance(exc.__cause__, KafkaException), exc
    assert len(delivery) == 1 and delivery[0] is not None
    assert delivery[0].code() == KafkaError.INVALID_PRODUCER_EPOCH
    commit_error = _fenced_error(lambda: zombie.commit_transaction(10))
    assert commit_error.code() == KafkaError._FENCED and commit_error.fatal()

    # Its open transaction was aborted: read_committed sees none of it, the log still holds it.
    assert _read(dst, topic, "read_committed") == [b"committed"]
    assert len(_read(dst, topic, "read_uncommitted")) == 6
    # And its pending checkpoint never became visible.
    stable = clients.consumer(dst, **{"group.id": group, "isolation.level": "read_committed"})
    assert [tp.offset for tp in stable.committed([TopicPartition(topic, 0)], timeout=15)] == [1]
    stable.close()

    # The id's rightful owner starts a new producer with it and commits normally.
    owner = clients.producer(dst, **{"transactional.id": tid})
    owner.init_transactions(30)
    owner.begin_transaction()
    owner.produce(topic, b"owner", partition=0)
    owner.send_offsets_to_transaction([TopicPartition(topic, 0, 8)], checkpoints.consumer_group_metadata(), 30)
    owner.commit_transaction(30)
    assert _read(dst, topic, "read_committed") == [b"committed", b"owner"]
    checkpoints.close()


def test_a_fenced_producers_flush_fails_as_a_kafka_exception(sandbox: Sandbox) -> None:
    """confluent-kafka 2.16 raises this fatal error from flush() as a bare KafkaError object (no
    exception class: `except Exception` misses it and a pipeline thread died of it);
    client_call turns it into the KafkaException the pipelines handle."""
    dst = sandbox.clusters["dst"].props()
    topic = _name("fenced-flush")
    _create_topic(dst, topic)
    tid = transactional_id(_name("route"), "w1", "realtime")
    zombie = clients.producer(dst, **{"transactional.id": tid, "linger.ms": 50})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"before", partition=0)
    assert zombie.flush(30) == 0
    fence(dst, [tid], timeout_s=30)
    reports: list[object] = []
    for _ in range(10):
        # A delivery callback that does not call into the client: the bare-object path.
        zombie.produce(topic, b"late", partition=0, on_delivery=lambda err, _msg: reports.append(err))
    with pytest.raises(KafkaException) as info:
        client_call(zombie.flush, 10)
    assert info.value.args[0].fatal()
    assert len(reports) == 10


def test_fence_fails_loudly_when_the_destination_is_unreachable() -> None:
    tid = transactional_id("route", "w1", "realtime")
    started = time.monotonic()
    with pytest.raises(FenceError) as info:
        fence({"bootstrap.servers": "127.0.0.1:1"}, [tid], timeout_s=2)
    assert time.monotonic() - started < 10
    assert list(info.value.failures) == [tid]
    assert "_TIMED_OUT" in info.value.failures[tid]
