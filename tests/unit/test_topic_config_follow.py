"""Destination topic settings follow the source's: the decision, the route's keys, one round."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigSource,
    ResourceType,
)

from strait.config import ConfigError, TopicConfigFollow, parse_config
from strait.controller.topicconfig import TopicConfigFollower, overrides, plan_change
from strait.coordination.model import TopicSpec
from strait.worker.destination import configs_to_copy

DEFAULT = TopicConfigFollow()


def test_a_changed_or_new_source_setting_is_set_and_a_dropped_one_removed() -> None:
    change = plan_change(
        "t",
        {"retention.ms": "600000", "cleanup.policy": "compact"},
        {"retention.ms": "86400000", "segment.ms": "1000"},
        DEFAULT.excluded,
    )
    assert change.set == {"retention.ms": "600000", "cleanup.policy": "compact"}
    assert change.delete == {"segment.ms"}
    assert plan_change("t", {"retention.ms": "1"}, {"retention.ms": "1"}, DEFAULT.excluded).empty


def test_excluded_keys_keep_the_destinations_values_either_way() -> None:
    change = plan_change(
        "t",
        {"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"},
        {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
        DEFAULT.excluded,
    )
    assert change.empty


def test_the_route_chooses_its_excluded_keys_but_never_the_copys_own() -> None:
    follow = TopicConfigFollow(exclude=[r"retention\..*"])
    assert follow.excluded("retention.ms") and follow.excluded("retention.bytes")
    assert not follow.excluded("min.insync.replicas")  # the route's list replaces the default
    assert follow.excluded("message.timestamp.type")  # the copy sets timestamps: never followed
    assert follow.excluded("leader.replication.throttled.replicas")  # managed per cluster


def test_route_keys_are_validated_at_load() -> None:
    raw: dict[str, Any] = {
        "clusters": {"a": {}, "b": {}},
        "routes": [{"name": "r", "source": "a", "destination": "b"}],
    }
    route = parse_config(raw, environ={}).routes[0]
    assert route.topic_config.follow is True
    assert route.topic_config.exclude == ["min.insync.replicas", "unclean.leader.election.enable"]
    raw["routes"][0]["topic_config"] = {"exclude": ["("]}
    with pytest.raises(ConfigError, match=r"topic_config\.exclude: invalid regular expression"):
        parse_config(raw, environ={})
    raw["routes"][0]["topic_config"] = {"follows": False}
    with pytest.raises(ConfigError, match=r"topic_config\.follows"):
        parse_config(raw, environ={})


def _entry(name: str, value: str | None, source: ConfigSource, **flags: bool) -> ConfigEntry:
    return ConfigEntry(name, value, source=source, **flags)


def test_only_the_topics_own_readable_settings_count() -> None:
    entries = [
        _entry("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG, is_default=True),
        _entry("max.message.bytes", "2000000", ConfigSource.STATIC_BROKER_CONFIG),
        _entry("secret", None, ConfigSource.DYNAMIC_TOPIC_CONFIG, is_sensitive=True),
        _entry("managed", "x", ConfigSource.DYNAMIC_TOPIC_CONFIG, is_read_only=True),
    ]
    assert overrides(entries) == {"retention.ms": "1000"}


# --- one round against a fake admin ------------------------------------------------------------


def _done(value: Any = None, error: KafkaError | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is not None:
        future.set_exception(KafkaException(error))
    else:
        future.set_result(value)
    return future


class _Admin:
    def __init__(self, topics: dict[str, dict[str, str]], refuse: frozenset[str] = frozenset()) -> None:
        self.topics = topics
        self.refuse = refuse
        self.altered: list[list[tuple[str, str | None, Any]]] = []

    def describe_configs(self, resources: list[Any], request_timeout: float, **_: Any) -> dict[Any, Future[Any]]:
        out = {}
        for resource in resources:
            if resource.name not in self.topics:
                out[resource] = _done(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
                continue
            configs = self.topics[resource.name]
            entries = {k: _entry(k, v, ConfigSource.DYNAMIC_TOPIC_CONFIG) for k, v in configs.items()}
            out[resource] = _done(entries)
        return out

    def list_topics(self, *_: Any, **__: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))  # no reading the brokers

    def incremental_alter_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
        (resource,) = resources
        ops = [(e.name, e.value, e.incremental_operation) for e in resource.incremental_configs]
        if any(name in self.refuse for name, _, _ in ops):
            return {resource: _done(error=KafkaError(KafkaError.INVALID_CONFIG, "refused"))}
        self.altered.append(ops)
        configs = self.topics[resource.name]
        for name, value, op in ops:
            if op == AlterConfigOpType.SET:
                configs[name] = str(value)
            else:
                configs.pop(name, None)
        return {resource: _done()}


def _follower(source: _Admin, destination: _Admin, specs: list[TopicSpec], **route: Any) -> TopicConfigFollower:
    config = parse_config(
        {
            "clusters": {"a": {}, "b": {}},
            "routes": [{"name": "r", "source": "a", "destination": "b", **route}],
        },
        environ={},
    )
    follower = TopicConfigFollower(config, leading=lambda: True, topics=lambda: {(s.route, s.topic): s for s in specs})
    follower._admins = {"a": source, "b": destination}
    return follower


def test_a_round_brings_renamed_destinations_in_line_and_skips_missing_ones() -> None:
    source = _Admin({"orders": {"retention.ms": "5000", "min.insync.replicas": "2"}, "later": {"retention.ms": "1"}})
    destination = _Admin({"A.orders": {"retention.ms": "9000", "min.insync.replicas": "1", "segment.ms": "10"}})
    specs = [TopicSpec("r", "orders", "A.orders"), TopicSpec("r", "later", "A.later"), TopicSpec("r", "gone", "gone")]
    follower = _follower(source, destination, specs)
    applied = follower.round()
    assert [c.topic for c in applied] == ["A.orders"]
    assert destination.topics["A.orders"] == {"retention.ms": "5000", "min.insync.replicas": "1"}
    assert follower.round() == []  # nothing left to do
    assert follower.view()["r"]["rounds"] == 2 and follower.view()["r"]["changes"] == 1


def test_a_key_the_destination_refuses_does_not_hold_back_the_others() -> None:
    source = _Admin({"t": {"retention.ms": "5000", "confluent.placement": "x"}})
    destination = _Admin({"t": {}}, refuse=frozenset({"confluent.placement"}))
    follower = _follower(source, destination, [TopicSpec("r", "t", "t")])
    follower.round()
    assert destination.topics["t"] == {"retention.ms": "5000"}
    view = follower.view()["r"]
    assert view["errors"] == 1 and "confluent.placement" in view["failing"]["t"]


def test_a_route_that_does_not_follow_is_left_alone() -> None:
    source = _Admin({"t": {"retention.ms": "5000"}})
    destination = _Admin({"t": {}})
    follower = _follower(source, destination, [TopicSpec("r", "t", "t")], topic_config={"follow": False})
    assert follower.round() == [] and destination.altered == []


def test_a_new_destination_topic_is_created_without_the_routes_excluded_keys() -> None:
    entries = [
        _entry("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("max.message.bytes", "500000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        _entry("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    ]
    follow = TopicConfigFollow(exclude=["max.message.bytes"])
    assert configs_to_copy(entries, follow.excluded) == {"retention.ms": "1000", "min.insync.replicas": "2"}
    assert configs_to_copy(entries, DEFAULT.excluded) == {"retention.ms": "1000", "max.message.bytes": "500000"}


def test_only_the_leader_follows() -> None:
    source = _Admin({"t": {"retention.ms": "5000"}})
    destination = _Admin({"t": {}})
    follower = _follower(source, destination, [TopicSpec("r", "t", "t")])
    calls: list[bool] = []

    def leading() -> bool:
        calls.append(len(calls) >= 2)  # a standby twice, then the leader
        if len(calls) == 3:
            follower.stop()  # after this round
        return calls[-1]

    follower._leading = leading
    follower.interval_s = 0.01
    follower.run()
    assert destination.altered == [[("retention.ms", "5000", AlterConfigOpType.SET)]]
    assert follower.view()["r"]["rounds"] == 1


def test_the_metrics_say_what_was_changed_and_what_is_refused() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from strait.metrics.controller import _TopicConfigCollector

    source = _Admin({"t": {"retention.ms": "5000"}, "u": {"confluent.placement": "x"}})
    destination = _Admin({"t": {}, "u": {}}, refuse=frozenset({"confluent.placement"}))
    follower = _follower(source, destination, [TopicSpec("r", "t", "t"), TopicSpec("r", "u", "u")])
    follower.round()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_TopicConfigCollector(follower.view))
    text = generate_latest(registry).decode()
    assert 'strait_topic_config_changes_total{route="r"} 1.0' in text
    assert 'strait_topic_config_errors_total{route="r"} 1.0' in text
    assert 'strait_topic_config_failing_topics{route="r"} 1.0' in text
    assert 'strait_topic_config_rounds_total{route="r"} 1.0' in text


def test_a_destination_topic_fed_by_two_sources_is_not_followed() -> None:
    config = parse_config(
        {
            "clusters": {"a": {}, "b": {}, "c": {}},
            "routes": [
                {"name": "ac", "source": "a", "destination": "c"},
                {"name": "bc", "source": "b", "destination": "c"},
            ],
        },
        environ={},
    )
    specs = [TopicSpec("ac", "orders", "orders"), TopicSpec("bc", "orders", "orders"), TopicSpec("ac", "t", "t")]
    follower = TopicConfigFollower(config, leading=lambda: True, topics=lambda: {(s.route, s.topic): s for s in specs})
    destination = _Admin({"orders": {}, "t": {}})
    follower._admins = {
        "a": _Admin({"orders": {"retention.ms": "1"}, "t": {"retention.ms": "3"}}),
        "b": _Admin({"orders": {"retention.ms": "2"}}),
        "c": destination,
    }
    follower.round()
    follower.round()
    assert destination.topics == {"orders": {}, "t": {"retention.ms": "3"}}


# --- the offset map keeps as long as its data ------------------------------------------------------

HOUR, WEEK, MONTH = 3_600_000, 7 * 24 * 3_600_000, 30 * 24 * 3_600_000
MAP = "__strait_offsets.r"


class _DefaultsAdmin(_Admin):
    """Also lists the broker default behind each topic's retention.ms (168 hours), as brokers do."""

    def describe_configs(self, resources: list[Any], request_timeout: float, **_: Any) -> dict[Any, Future[Any]]:
        out = super().describe_configs(resources, request_timeout)
        for future in out.values():
            if future.exception() is None and "retention.ms" in future.result():
                entry = future.result()["retention.ms"]
                entry.synonyms = {
                    "retention.ms": entry,
                    "log.retention.hours": _entry("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
                }
        return out


class _BrokerAdmin(_Admin):
    """Its brokers say the default: log.retention.hours=168, log.retention.ms not set."""

    def __init__(self, topics: dict[str, dict[str, str]]) -> None:
        super().__init__(topics)
        self.broker_reads = 0

    def list_topics(self, *_: Any, **__: Any) -> Any:
        return SimpleNamespace(brokers={2: None, 1: None})

    def describe_configs(self, resources: list[Any], request_timeout: float, **_: Any) -> dict[Any, Future[Any]]:
        if resources and resources[0].restype == ResourceType.BROKER:
            self.broker_reads += 1
            entries = {
                "log.retention.hours": _entry("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
                "log.retention.ms": _entry("log.retention.ms", None, ConfigSource.DEFAULT_CONFIG),
            }
            return {resources[0]: _done(entries)}
        return super().describe_configs(resources, request_timeout)


def _map_follower(destination: _Admin) -> TopicConfigFollower:
    specs = [TopicSpec("r", "t", "t"), TopicSpec("r", "u", "u"), TopicSpec("r", "later", "later")]
    return _follower(_Admin({}), destination, specs, topic_config={"follow": False})


def test_the_offset_map_keeps_as_long_as_its_longest_lived_data_never_less_than_its_default() -> None:
    destination = _DefaultsAdmin(
        {
            MAP: {"retention.ms": str(WEEK), "cleanup.policy": "compact"},
            "t": {"retention.ms": str(MONTH), "cleanup.policy": "delete"},
            "u": {"retention.ms": str(HOUR), "cleanup.policy": "delete"},
        }
    )
    follower = _map_follower(destination)  # a route that does not follow settings still keeps its map
    follower.round()
    assert destination.topics[MAP] == {"retention.ms": str(MONTH), "cleanup.policy": "delete", "retention.bytes": "-1"}
    destination.topics["u"]["cleanup.policy"] = "compact"  # kept for ever: so is the map
    follower.round()
    assert destination.topics[MAP]["retention.ms"] == "-1"
    destination.topics["u"]["cleanup.policy"] = "compact,delete"  # compaction and 1 hour
    destination.topics["t"]["retention.ms"] = str(HOUR)
    follower.round()
    assert destination.topics[MAP]["retention.ms"] == str(WEEK), "not below the default it was created with"
    altered = len(destination.altered)
    follower.round()
    assert len(destination.altered) == altered, "nothing more to change"


def test_the_default_the_map_was_created_with_can_come_from_the_brokers_settings() -> None:
    destination = _BrokerAdmin(
        {MAP: {"retention.ms": "-1", "cleanup.policy": "delete", "retention.bytes": "-1"}, "t": {"retention.ms": "1"}}
    )
    follower = _map_follower(destination)
    destination.topics["t"]["cleanup.policy"] = "delete"
    follower.round()
    assert destination.topics[MAP]["retention.ms"] == str(WEEK)
    follower.round()
    assert destination.broker_reads == 1, "the brokers' default is read once in a while, not every round"


def test_without_the_clusters_default_the_map_is_only_ever_lengthened() -> None:
    destination = _Admin(
        {
            MAP: {"retention.ms": str(WEEK), "cleanup.policy": "delete", "retention.bytes": "-1"},
            "t": {"retention.ms": str(HOUR), "cleanup.policy": "delete"},
        }
    )
    follower = _map_follower(destination)
    follower.round()
    assert destination.altered == []
    destination.topics["t"]["retention.ms"] = str(MONTH)
    follower.round()
    assert destination.topics[MAP]["retention.ms"] == str(MONTH)


def test_no_map_yet_or_a_map_that_refuses_is_left_alone() -> None:
    destination = _Admin({"t": {"retention.ms": str(MONTH), "cleanup.policy": "delete"}})
    _map_follower(destination).round()
    assert destination.altered == [] and MAP not in destination.topics
    refusing = _Admin({MAP: {"retention.ms": str(WEEK)}, "t": {}}, refuse=frozenset({"retention.bytes"}))
    follower = _map_follower(refusing)
    follower.round()
    follower.round()
    assert refusing.altered == []  # refused (and said once); the data's settings are not touched
