"""Which source topic settings reach a created destination topic, and with how many replicas."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import ConfigEntry, ConfigSource  # type: ignore[attr-defined]

from strait.worker.destination import configs_to_copy, default_replication_factor


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
