"""What feeds the assignment: topic discovery from source metadata, and byte rates from stats."""

from __future__ import annotations

from strait.config import RouteConfig
from strait.controller.discovery import plan_topic_updates
from strait.controller.rates import RateTracker
from strait.coordination.model import PartitionKey, TopicSpec

ROUTE = RouteConfig(name="main", source="src", destination="dst", include=["orders-.*"], exclude=[".*-tmp"])


def _spec(topic: str, partitions: int, origin: str = "api") -> TopicSpec:
    return TopicSpec.from_json("main", topic, {"partitions": partitions, "origin": origin})


def test_patterns_add_matching_topics_only() -> None:
    source = {"orders-eu": 3, "orders-tmp": 1, "payments": 2, "__consumer_offsets": 50}
    updates = plan_topic_updates(ROUTE, source, {}, frozenset())
    assert [(u.topic, u.partitions, u.origin) for u in updates] == [("orders-eu", 3, "pattern")]


def test_a_removed_topic_is_not_re_added_by_a_pattern() -> None:
    assert plan_topic_updates(ROUTE, {"orders-eu": 3}, {}, frozenset({("main", "orders-eu")})) == []


def test_partition_growth_is_picked_up_and_settings_kept() -> None:
    existing = TopicSpec(route="main", topic="payments", destination_topic="pay-copy", start="latest", partitions=2)
    updates = plan_topic_updates(ROUTE, {"payments": 5}, {("main", "payments"): existing}, frozenset())
    assert updates == [
        TopicSpec(route="main", topic="payments", destination_topic="pay-copy", start="latest", partitions=5)
    ]


def test_unchanged_or_vanished_topics_need_no_update() -> None:
    specs = {("main", "orders-eu"): _spec("orders-eu", 3, "pattern"), ("main", "gone"): _spec("gone", 4)}
    assert plan_topic_updates(ROUTE, {"orders-eu": 3}, specs, frozenset()) == []


def test_rates_follow_copied_bytes_and_survive_a_change_of_worker() -> None:
    key = PartitionKey("main", "orders-eu", 0)
    tracker = RateTracker()
    tracker.observe({"w1": {"updated": 10.0, "partitions": {str(key): {"bytes": 0}}}})
    tracker.observe({"w1": {"updated": 12.0, "partitions": {str(key): {"bytes": 2000}}}})
    assert tracker.rates({key}) == {key: 1000.0}
    # The partition moved: the new worker's counter starts from zero, which is not a negative rate.
    tracker.observe({"w2": {"updated": 13.0, "partitions": {str(key): {"bytes": 10}}}})
    assert tracker.rates({key})[key] == 1000.0
    tracker.observe({"w2": {"updated": 15.0, "partitions": {str(key): {"bytes": 4010}}}})
    assert tracker.rates({key})[key] == 0.5 * 2000.0 + 0.5 * 1000.0
    assert tracker.rates({PartitionKey("main", "other", 0)}) == {PartitionKey("main", "other", 0): 0.0}
