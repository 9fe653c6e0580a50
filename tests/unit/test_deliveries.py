"""Delivery reports settled in bulk: the same accounting as one callback per record."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message

from strait.offsetmap.runs import Run
from strait.worker.checkpoint import AckTracker
from strait.worker.deliveries import SAMPLE_EVERY, DeliveryBook, Report
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask


def _report(written: int, *, kind: int = TIMESTAMP_CREATE_TIME, timestamp: int = 1_000) -> Message:
    return Message(
        topic="copy",
        partition=0,
        offset=written,
        key=b"kk",
        value=b"value",
        headers=None,
        error=None,
        timestamp=(kind, timestamp),
    )


class Observer:
    def __init__(self) -> None:
        self.acks: list[tuple[int, int]] = []  # (timestamp, count)

    def acked(
        self, pipeline: str, topic: str, partition: int, ack_s: float | None, timestamp_ms: int, count: int = 1
    ) -> None:
        self.acks.append((timestamp_ms, count))


class Rig:
    def __init__(self, start: int = 0) -> None:
        self.state = PartitionState(PartitionTask("r", "orders", 0, "copy"))
        self.tracker = AckTracker(start)
        self.state.tracker = self.tracker
        self.failures: list[tuple[int, int]] = []
        self.observer = Observer()
        self.book = DeliveryBook("catchup", self.observer, self._failed)  # type: ignore[arg-type]
        self.reports: dict[int, Report] = {}

    def _failed(self, state: PartitionState, tracker: AckTracker, offset: int, size: int, error: Any, _: Any) -> None:
        tracker.failed(offset)
        self.failures.append((offset, error.code()))

    def send(self, first: int, count: int, *, source_gap: bool = False) -> None:
        reports: list[Report] = [{} for _ in range(count)]
        self.tracker.sent_range(first, count, source_gap=source_gap)
        self.book.add(self.state, self.tracker, first, reports)
        self.reports.update(zip(range(first, first + count), reports, strict=True))

    def ack(self, offset: int, written: int, **kwargs: Any) -> None:
        self.reports[offset].__setitem__(None, _report(written, **kwargs))

    def fail(self, offset: int) -> None:
        self.reports[offset].__setitem__(KafkaError(KafkaError._MSG_TIMED_OUT), _report(-1))


def test_a_stretch_acknowledged_in_order_moves_the_checkpoint_and_counts_once() -> None:
    rig = Rig(10)
    rig.send(10, 40)
    for offset in range(10, 30):
        rig.ack(offset, 500 + offset)
    rig.book.settle()
    assert rig.tracker.position == 30 and rig.tracker.in_flight == 20
    assert rig.state.records == 20 and rig.state.bytes == 20 * 7
    assert rig.state.runs.take() == [Run(10, 510, 20)]
    assert sum(count for _, count in rig.observer.acks) == 20
    assert len(rig.book) == 20
    for offset in range(30, 50):
        rig.ack(offset, 500 + offset)
    rig.book.settle()
    assert rig.tracker.position == 50 and len(rig.book) == 0
    assert rig.state.runs.take() == [Run(10, 510, 40)]


def test_a_report_that_overtakes_an_earlier_one_waits_for_it() -> None:
    rig = Rig()
    rig.send(0, 3)
    rig.ack(1, 11)
    rig.ack(2, 12)
    rig.book.settle()
    assert rig.tracker.position == 0 and rig.state.records == 0
    rig.ack(0, 10)
    rig.book.settle()
    assert rig.tracker.position == 3 and rig.state.records == 3


def test_a_failed_record_goes_to_the_handler_in_order_and_pins_the_checkpoint() -> None:
    rig = Rig()
    rig.send(0, 6)
    for offset in (0, 1, 3, 4, 5):
        rig.ack(offset, offset)
    rig.fail(2)
    rig.book.settle()
    assert rig.failures == [(2, KafkaError._MSG_TIMED_OUT)]
    assert rig.tracker.position == 2 and rig.tracker.blocked and rig.tracker.in_flight == 0
    assert rig.state.records == 5 and len(rig.book) == 0
    # Destination offsets jump where the failed record is missing: two runs.
    assert rig.state.runs.take() == [Run(0, 0, 2), Run(3, 3, 3)]


def test_stretches_after_a_source_gap_and_thousands_of_records_settle_piece_by_piece() -> None:
    rig = Rig()
    rig.send(0, 3000)
    rig.send(3000, 2000)  # continues the first stretch
    rig.send(5003, 10, source_gap=True)  # markers at 5000-5002
    for written, offset in enumerate([*range(5000), *range(5003, 5013)]):
        rig.ack(offset, written)
        if offset % 700 == 0:
            rig.book.settle()
            assert rig.tracker.position == offset + 1
    rig.book.settle()
    assert rig.tracker.position == 5013 and len(rig.book) == 0 and rig.state.records == 5010
    assert rig.state.runs.take() == [Run(0, 0, 5000), Run(5003, 5000, 10)]


def test_latency_samples_stand_for_every_record_and_end_with_the_newest() -> None:
    rig = Rig()
    count = 3 * SAMPLE_EVERY + 5
    rig.send(0, count)
    for offset in range(count):
        rig.ack(offset, offset, timestamp=2_000 + offset)
    rig.book.settle()
    assert sum(n for _, n in rig.observer.acks) == count
    assert rig.observer.acks[-1][0] == 2_000 + count - 1
    assert len(rig.observer.acks) == 4  # not one observation per record


def test_a_log_append_time_destination_reports_no_end_to_end_latency() -> None:
    rig = Rig()
    rig.send(0, 1)
    rig.ack(0, 0, kind=TIMESTAMP_LOG_APPEND_TIME, timestamp=5_000)
    rig.book.settle()
    assert rig.observer.acks == [(0, 1)]


def test_the_client_fills_a_report_dict_and_takes_produce_arguments_in_the_fast_paths_order() -> None:
    """The record loop's fast path calls ``produce`` positionally (topic, value, key, partition,
    on_delivery, callback, timestamp, headers) with a dict's ``__setitem__`` as ``on_delivery``:
    checked against confluent-kafka itself, on librdkafka's in-process mock cluster."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    owner = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = owner.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 0})
    producer.list_topics("order-check", timeout=10)  # the mock cluster creates it
    report: Report = {}
    producer.produce("order-check", b"value", b"key", 0, report.__setitem__, None, 1234, [("h", b"v")])
    assert producer.flush(30) == 0
    ((error, message),) = report.items()
    # (The mock cluster answers with a LogAppendTime, which librdkafka reports as the type.)
    assert error is None and message.offset() == 0 and message.timestamp()[1] == 1234
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "order-check", "log_level": 0})
    consumer.assign([TopicPartition("order-check", 0, 0)])
    copied = None
    for _ in range(100):
        copied = consumer.poll(0.3)
        if copied is not None and copied.error() is None:
            break
    consumer.close()
    assert copied is not None and copied.error() is None
    assert (copied.key(), copied.value(), copied.headers()) == (b"key", b"value", [("h", b"v")])
    assert copied.timestamp() == (TIMESTAMP_CREATE_TIME, 1234)
    del owner
