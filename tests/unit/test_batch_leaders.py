"""The batch pipeline's leader cache: grown topics, failed lookups, deleted topics."""

from __future__ import annotations

from strait.worker.batch.leaders import LeaderCache
from strait.worker.batch.wire import WireError


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
    # Before: the map of a topic was kept until a leader moved, so partitions added to the
    # topic later never found a leader and were never copied.
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
