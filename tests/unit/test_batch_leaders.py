"""The batch pipeline's leader cache: grown topics, failed lookups, deleted topics."""

from __future__ import annotations

import pytest
from kafka.future import Future

from strait.worker.batch.leaders import LeaderCache
from strait.worker.batch.protocol import WireError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Metadata:
    """What a cluster answers, per topic; counts the lookups."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[int, int]] = {}
        self.lookups = 0

    def __call__(self, cluster: str, topic: str) -> dict[int, int]:
        self.lookups += 1
        if topic not in self.topics:
            raise WireError(f"metadata of {topic}: UNKNOWN_TOPIC_OR_PARTITION", 3)
        return dict(self.topics[topic])


def make() -> tuple[LeaderCache, Metadata, Clock]:
    metadata, clock = Metadata(), Clock()
    return LeaderCache(metadata, refresh_s=0.2, missing_topic_s=10.0, clock=clock), metadata, clock


def test_a_cached_leader_needs_no_lookup() -> None:
    cache, metadata, _ = make()
    metadata.topics["t"] = {0: 1, 1: 2}
    assert cache.leader("source", "t", 0) == 1
    assert cache.leader("source", "t", 1) == 2
    assert metadata.lookups == 1


def test_a_partition_the_topic_grew_is_looked_up_again() -> None:
    # A topic's map kept until a leader moves would leave partitions added to the topic later
    # without a leader, never copied.
    cache, metadata, clock = make()
    metadata.topics["t"] = {0: 1, 1: 1}
    assert cache.leader("destination", "t", 0) == 1
    metadata.topics["t"] = {0: 1, 1: 1, 2: 3, 3: 1}
    clock.now += 0.3
    assert cache.leader("destination", "t", 2) == 3
    assert cache.leader("destination", "t", 3) == 1


def test_lookups_of_a_missing_partition_are_spaced() -> None:
    cache, metadata, clock = make()
    metadata.topics["t"] = {0: 1}  # partition 1 has no leader (its broker restarts)
    assert cache.leader("source", "t", 1) is None
    assert cache.leader("source", "t", 1) is None
    assert metadata.lookups == 1
    clock.now += 0.25
    metadata.topics["t"] = {0: 1, 1: 2}
    assert cache.leader("source", "t", 1) == 2
    assert metadata.lookups == 2


def test_forget_asks_at_once() -> None:
    cache, metadata, _ = make()
    metadata.topics["t"] = {0: 1}
    assert cache.leader("source", "t", 0) == 1
    metadata.topics["t"] = {0: 2}
    cache.forget("source", ["t"])
    assert cache.leader("source", "t", 0) == 2


def test_a_topic_missing_long_enough_is_gone() -> None:
    cache, metadata, clock = make()
    metadata.topics["t"] = {0: 1}
    assert cache.leader("destination", "t", 0) == 1
    assert cache.gone("destination", "t") is None
    del metadata.topics["t"]
    cache.forget("destination", ["t"])
    assert cache.leader("destination", "t", 0) is None
    clock.now += 5
    assert cache.leader("destination", "t", 0) is None
    assert cache.gone("destination", "t") is None  # missing 5 s: not yet
    clock.now += 6
    assert cache.gone("destination", "t") == 11.0
    assert cache.gone("source", "t") is None  # per cluster


def test_a_topic_seen_again_is_not_gone() -> None:
    cache, metadata, clock = make()
    assert cache.leader("destination", "t", 0) is None
    clock.now += 20
    metadata.topics["t"] = {0: 1}
    assert cache.leader("destination", "t", 0) == 1
    assert cache.gone("destination", "t") is None


def test_other_failures_do_not_count_as_missing() -> None:
    def unreachable(cluster: str, topic: str) -> dict[int, int]:
        raise WireError("no broker available")

    clock = Clock()
    cache = LeaderCache(unreachable, missing_topic_s=1.0, clock=clock)
    assert cache.leader("source", "t", 0) is None
    clock.now += 60
    assert cache.leader("source", "t", 0) is None
    assert cache.gone("source", "t") is None


class LaterMetadata:
    """A lookup answered later: each call returns a kafka-python future the test completes."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Future]] = []

    def __call__(self, cluster: str, topic: str) -> Future:
        future = Future()
        self.asked.append((topic, future))
        return future


def test_a_lookup_answered_later_holds_no_one_and_its_answer_is_used() -> None:
    # A blocking round trip per lookup would stall the pipeline's only thread.
    metadata, clock = LaterMetadata(), Clock()
    cache = LeaderCache(metadata, refresh_s=0.2, clock=clock)
    assert cache.leader("source", "t", 0) is None and cache.asking("source", "t")
    assert cache.leader("source", "t", 1) is None  # still on the way: not asked twice
    assert len(metadata.asked) == 1
    metadata.asked[0][1].success({0: 1, 1: 2})
    assert cache.leader("source", "t", 1) == 2 and not cache.asking("source", "t")
    assert cache.leader("source", "t", 0) == 1
    assert len(metadata.asked) == 1


def test_a_failed_later_lookup_counts_like_a_failed_one() -> None:
    metadata, clock = LaterMetadata(), Clock()
    cache = LeaderCache(metadata, refresh_s=0.2, missing_topic_s=1.0, clock=clock)
    assert cache.leader("destination", "t", 0) is None
    metadata.asked[0][1].failure(WireError("metadata of t: UNKNOWN_TOPIC_OR_PARTITION", 3))
    assert cache.leader("destination", "t", 0) is None and not cache.asking("destination", "t")
    clock.now += 0.1
    assert cache.leader("destination", "t", 0) is None and len(metadata.asked) == 1  # spaced
    clock.now += 1.0
    assert cache.leader("destination", "t", 0) is None and len(metadata.asked) == 2
    assert cache.gone("destination", "t") == pytest.approx(1.1)


def test_forget_drops_an_answer_asked_before_the_move() -> None:
    metadata, clock = LaterMetadata(), Clock()
    cache = LeaderCache(metadata, clock=clock)
    assert cache.leader("destination", "t", 0) is None
    stale = metadata.asked[0][1]
    cache.forget("destination", ["t"])
    stale.success({0: 1})
    assert cache.leader("destination", "t", 0) is None and len(metadata.asked) == 2
    metadata.asked[1][1].success({0: 2})
    assert cache.leader("destination", "t", 0) == 2


def test_an_answer_already_there_is_used_at_once() -> None:
    def answered(cluster: str, topic: str) -> Future:
        return Future().success({0: 3})

    cache = LeaderCache(answered, clock=Clock())
    assert cache.leader("source", "t", 0) == 3
