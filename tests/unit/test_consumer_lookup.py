"""A consumer asks for a newly assigned topic's metadata at once, without holding up the caller."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from strait import clients
from strait.clients import Consumer, Producer


class RecordingConsumer(Consumer):
    """Records metadata lookups; each waits until the test releases it."""

    def __init__(self) -> None:
        # No broker needed: librdkafka only connects when it has something to ask.
        super().__init__({"group.id": "lookup-test", "bootstrap.servers": "127.0.0.1:1", "log_level": 0})
        self.asked: list[str] = []
        self.release = threading.Event()

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked.append(str(topic))
        self.release.wait(30)
        return None


def test_a_new_topic_is_looked_up_once_in_the_background_and_close_waits_for_it() -> None:
    consumer = RecordingConsumer()
    consumer.incremental_assign([TopicPartition("a", 0, 0), TopicPartition("b", 1, 5)])
    # The lookups are still blocked, yet assign returned: the caller is not held up.
    assert any(lookup.is_alive() for lookup in consumer._lookups.threads)
    consumer.incremental_assign([TopicPartition("a", 1, 0)])  # known by now: not asked again
    consumer.assign([TopicPartition("b", 0, 0), TopicPartition("c", 0, 0)])
    lookups = list(consumer._lookups.threads)
    consumer.release.set()
    consumer.close()
    assert sorted(consumer.asked) == ["a", "b", "c"]
    assert not any(lookup.is_alive() for lookup in lookups)


class RecordingProducer(Producer):
    def __init__(self) -> None:
        super().__init__({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
        self.asked: list[str] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked.append(str(topic))
        return None


def test_a_producer_looks_a_topic_up_once_before_its_first_record() -> None:
    producer = RecordingProducer()
    producer.look_up(["copy"])
    producer.look_up(["copy"])
    producer.close()  # waits for the lookup
    assert producer.asked == ["copy"]


def test_the_admin_log_pump_keeps_no_client_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    # Held by the pump (say, by its loop variable), an abandoned admin client would live on,
    # reconnecting, and print librdkafka's FAIL lines until the process ends.
    monkeypatch.setattr(clients, "_ADMIN_LOG_PUMP_S", 0.02)
    rounds = threading.Semaphore(0)
    serve = clients._pump._serve

    def counted() -> None:
        serve()
        rounds.release()

    monkeypatch.setattr(clients._pump, "_serve", counted)
    admin = clients.admin({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    gone = weakref.ref(admin)
    # Two rounds ended after the client was added: the second one began after it, and polled it.
    assert rounds.acquire(timeout=10) and rounds.acquire(timeout=10), "the pump never served the client"
    del admin
    for _ in range(300):
        gc.collect()
        if gone() is None:
            break
        time.sleep(0.01)
    assert gone() is None
