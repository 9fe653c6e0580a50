"""Which source topic settings reach a created destination topic, and with how many replicas."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigEntry, ConfigSource, NewTopic  # type: ignore[attr-defined]

from strait.worker.destination import TopicCreator, configs_to_copy, default_replication_factor


def _entry(
    name: str, value: str | None, source: ConfigSource, *, is_default: bool = False, is_sensitive: bool = False
) -> ConfigEntry:
    return ConfigEntry(name, value, source=source, is_default=is_default, is_sensitive=is_sensitive)


def test_only_the_topics_own_overrides_are_copied() -> None:
    entries = [
        _entry("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("compression.type", "zstd", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG, is_default=True),
        _entry("max.message.bytes", "2000000", ConfigSource.STATIC_BROKER_CONFIG),
    ]
    assert configs_to_copy(entries) == {
        "retention.ms": "3600000",
        "cleanup.policy": "compact",
        "compression.type": "zstd",
    }


def test_source_given_as_a_plain_int_is_understood() -> None:
    # describe_configs hands back ints, not ConfigSource members.
    source: Any = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    entry = ConfigEntry("retention.ms", "1000", source=source)
    assert configs_to_copy([entry]) == {"retention.ms": "1000"}


def test_cluster_specific_and_unreadable_settings_stay_behind() -> None:
    entries = [
        _entry("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("message.timestamp.type", "LogAppendTime", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("leader.replication.throttled.replicas", "*", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("some.secret", None, ConfigSource.DYNAMIC_TOPIC_CONFIG, is_sensitive=True),
    ]
    assert configs_to_copy(entries) == {}


def test_replication_factor_fits_the_destination_cluster() -> None:
    assert default_replication_factor(1) == 1
    assert default_replication_factor(2) == 2
    assert default_replication_factor(3) == 3
    assert default_replication_factor(12) == 3
    assert default_replication_factor(0) == 1


class SlowAdmin:
    """create_topics answers the first request only once released; records every request."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        self.release = threading.Event()
        self.asked = threading.Event()

    def create_topics(self, topics: list[NewTopic], request_timeout: float) -> dict[str, Future[None]]:
        self.requests.append([t.topic for t in topics])
        self.asked.set()
        futures: dict[str, Future[None]] = {}
        for topic in topics:
            future: Future[None] = Future()
            if topic.topic == "exists":
                future.set_exception(KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS)))
            elif len(self.requests) > 1 or self.release.wait(10):
                future.set_result(None)
            futures[topic.topic] = future
        return futures


def test_topics_asked_for_while_a_creation_is_out_go_together_in_the_next_request() -> None:
    admin = SlowAdmin()
    creator = TopicCreator(admin, timeout_s=10)  # type: ignore[arg-type]  # create_topics is all it uses
    errors: list[BaseException] = []

    def create(name: str) -> None:
        try:
            creator.create(NewTopic(name, num_partitions=1, replication_factor=1))
        except KafkaException as exc:
            errors.append(exc)

    first = threading.Thread(target=create, args=("t1",))
    first.start()
    assert admin.asked.wait(10)
    later = [threading.Thread(target=create, args=(name,)) for name in ("t2", "t3", "exists")]
    for thread in later:
        thread.start()
    deadline = time.monotonic() + 10
    while len(creator._queue) < 3:  # all three wait behind t1's request
        assert time.monotonic() < deadline
        time.sleep(0.01)
    admin.release.set()
    for thread in [first, *later]:
        thread.join(10)
    assert admin.requests[0] == ["t1"]
    assert sorted(admin.requests[1]) == ["exists", "t2", "t3"]
    assert len(admin.requests) == 2
    assert [exc.args[0].code() for exc in errors] == [KafkaError.TOPIC_ALREADY_EXISTS]  # type: ignore[attr-defined]
