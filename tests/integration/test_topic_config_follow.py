"""Destination topic settings follow the source's, on real clusters, through a real controller.

A topic picked up by a route's pattern is created on the destination by a worker with the
source's settings, minus the route's excluded keys. Then the source changes: ``retention.ms``
goes up, an override is removed, and excluded keys change too. The leading controller must bring
the destination in line within a few refresh intervals, and leave the excluded keys alone. It also
keeps the route's offset map as long as the data: longer when the data lives longer, for ever
when the data is compacted, back to the cluster's default when the data lives shorter.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException

# confluent-kafka re-exports these without listing them in __all__, which strict mypy rejects.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from strait import clients
from strait.controller.topicconfig import overrides
from strait.demo import create_topic, wait_until
from strait.offsetmap.codec import map_topic
from strait.sandbox import Sandbox
from tests.integration.test_replication import FleetFactory, make_fleet, uid

pytestmark = pytest.mark.integration

__all__ = ["make_fleet"]  # the fixture, shared with test_replication


def _overrides(props: dict[str, Any], topic: str) -> dict[str, str] | None:
    """The topic's own settings, or None while it does not exist."""
    admin = clients.admin(props)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=15)[resource].result(timeout=20)
    except KafkaException:
        return None
    return overrides(entries.values())


def _effective(props: dict[str, Any], topic: str) -> dict[str, str | None] | None:
    """The map's settings that matter (defaults included), or None while it does not exist."""
    admin = clients.admin(props)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=15)[resource].result(timeout=20)
    except KafkaException:
        return None
    return {k: entries[k].value for k in ("cleanup.policy", "retention.ms", "retention.bytes") if k in entries}


def _alter(props: dict[str, Any], topic: str, set_: dict[str, str], delete: tuple[str, ...] = ()) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = clients.admin(props)  # kept referenced until the answer: a dropped client fails its futures
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(timeout=20)


def test_source_setting_changes_reach_the_destination_but_excluded_keys_do_not(
    sandbox: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    stem = f"cfg-{uid()}"
    topic = f"{stem}-orders"
    create_topic(
        src,
        topic,
        2,
        configs={"retention.ms": "3600000", "segment.ms": "600000", "max.message.bytes": "500000"},
    )
    route = {
        "name": "main",
        "source": "src",
        "destination": "dst",
        "include": [f"{stem}-.*"],
        "naming": {"prefix": "src."},
        # The destination keeps its own max.message.bytes (and, as by default, min.insync.replicas).
        "topic_config": {"exclude": ["min.insync.replicas", "max.message.bytes"]},
    }
    fleet = make_fleet(routes=[route])
    fleet.start_controller()
    fleet.start_worker("w1")
    copy = f"src.{topic}"
    # Created by the worker with the source's settings, minus the excluded key.
    assert wait_until(lambda: _overrides(dst, copy) is not None, 120), "the destination topic was not created"
    created = _overrides(dst, copy)
    assert created is not None
    assert (created.get("retention.ms"), created.get("segment.ms")) == ("3600000", "600000"), created
    assert "max.message.bytes" not in created, created

    # The source changes: a longer retention, segment.ms back to the cluster default, and two
    # excluded keys changed.
    _alter(
        src,
        topic,
        {"retention.ms": "7200000", "min.insync.replicas": "2", "max.message.bytes": "400000"},
        delete=("segment.ms",),
    )
    changed = time.monotonic()

    def followed() -> bool:
        now = _overrides(dst, copy) or {}
        return now.get("retention.ms") == "7200000" and "segment.ms" not in now

    assert wait_until(followed, 120, interval_s=0.2), f"destination settings: {_overrides(dst, copy)}"
    took_s = time.monotonic() - changed
    record_property("topic_config_follow_s", round(took_s, 2))
    print(
        f"\nMEASURE source setting change -> destination: {took_s:.2f}s "
        f"(refresh_interval_s {fleet.refresh_interval_s}; load average {os.getloadavg()[0]:.1f})"
    )
    after = _overrides(dst, copy) or {}
    # Compared in the same round as retention.ms: the excluded keys kept the destination's values.
    assert "min.insync.replicas" not in after and "max.message.bytes" not in after, after

    # The destination is changed by hand: the next rounds put a followed key back, not an excluded one.
    _alter(dst, copy, {"retention.ms": "1000", "max.message.bytes": "300000"})
    assert wait_until(lambda: (_overrides(dst, copy) or {}).get("retention.ms") == "7200000", 120, interval_s=0.2)
    assert (_overrides(dst, copy) or {}).get("max.message.bytes") == "300000"
    # The leader's /metrics count the changes (the two follows above; creation is the worker's).
    with urllib.request.urlopen(f"http://127.0.0.1:{fleet.ports['c1']}/metrics", timeout=30) as response:
        metrics = response.read().decode()
    changes = [
        line for line in metrics.splitlines() if line.startswith('strait_topic_config_changes_total{route="main"}')
    ]
    assert changes and float(changes[0].split()[-1]) >= 2, changes

    # The route's offset map: never compacted nor cut by size, and kept at least as long as the
    # longest-lived data, never less than the cluster's default it was created with (7 days).
    producer = clients.producer(src)
    for n in range(20):
        producer.produce(topic, f"r{n}".encode(), partition=n % 2)
    assert producer.flush(30) == 0
    offset_map = map_topic("main")
    week, month = str(7 * 24 * 3600_000), str(30 * 24 * 3600_000)

    def map_keeps(retention_ms: str) -> bool:
        return _effective(dst, offset_map) == {
            "cleanup.policy": "delete",
            "retention.ms": retention_ms,
            "retention.bytes": "-1",
        }

    # The data keeps 2 hours: the map keeps the default.
    assert wait_until(lambda: map_keeps(week), 120, interval_s=0.5), _effective(dst, offset_map)
    _alter(src, topic, {"retention.ms": month})  # longer than the default: the map follows
    assert wait_until(lambda: map_keeps(month), 120, interval_s=0.5), _effective(dst, offset_map)
    _alter(src, topic, {"cleanup.policy": "compact"})  # compacted data is kept for ever: so is the map
    assert wait_until(lambda: map_keeps("-1"), 120, interval_s=0.5), _effective(dst, offset_map)
    _alter(src, topic, {"retention.ms": "7200000"}, delete=("cleanup.policy",))  # back below the default
    assert wait_until(lambda: map_keeps(week), 120, interval_s=0.5), _effective(dst, offset_map)
