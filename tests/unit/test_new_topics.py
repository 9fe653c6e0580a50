"""Adding a topic through the API: a topic created a moment ago is waited for, a missing one is 404,
only the named topic is asked about, and a just-added topic is listed at once."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from strait.config import parse_config
from strait.controller.discovery import await_topic
from strait.controller.service import ControllerService, NotFound, TopicRequest
from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    PartitionKey,
    TopicSpec,
    WorkerRecord,
    WorkerState,
    describe_keys,
)

CONFIG = parse_config(
    {"clusters": {"src": {}, "dst": {}}, "routes": [{"name": "main", "source": "src", "destination": "dst"}]},
    environ={},
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_topic_that_appears_a_moment_later_is_found() -> None:
    answers = iter([None, None, None, 4])
    clock = FakeClock()
    assert await_topic(lambda: next(answers), 5.0, clock=clock, sleep=clock.sleep) == 4
    # Asked again soon at first, then less often.
    assert clock.sleeps == [0.05, 0.1, 0.2]


def test_a_topic_that_never_appears_is_given_up_on_after_the_wait_and_asked_once_more_at_its_end() -> None:
    asked: list[float] = []
    clock = FakeClock()

    def ask() -> int | None:
        asked.append(clock.now)
        return None

    assert await_topic(ask, 2.0, clock=clock, sleep=clock.sleep) is None
    assert max(clock.sleeps) == 0.5
    assert asked[-1] == pytest.approx(102.0)  # the last question at the end of the wait
    assert sum(clock.sleeps) == pytest.approx(2.0)


def test_no_wait_asks_exactly_once() -> None:
    asked: list[int] = []
    clock = FakeClock()

    def ask() -> int | None:
        asked.append(1)
        return None

    assert await_topic(ask, 0.0, clock=clock, sleep=clock.sleep) is None
    assert asked == [1] and clock.sleeps == []


class Metadata:
    """The source as the API asks it: one topic at a time, known after ``unknown_for`` questions."""

    def __init__(self, partitions: dict[str, int], unknown_for: int = 0) -> None:
        self.partitions = partitions
        self.unknown_for = unknown_for
        self.asked: list[str] = []

    def partition_count(self, cluster: str, topic: str) -> int | None:
        self.asked.append(topic)
        if len(self.asked) <= self.unknown_for:
            return None
        return self.partitions.get(topic)

    def topics(self, cluster: str) -> dict[str, int]:
        raise AssertionError("the API must not list the whole source cluster")


class Store:
    """The store as the API uses it: topic specs and an assignment in memory."""

    def __init__(self) -> None:
        self.specs: dict[tuple[str, str], TopicSpec] = {}
        self.workers: dict[str, WorkerRecord] = {}
        self.assignment = Assignment(owners={}, version=0)

    def create_topic(self, spec: TopicSpec) -> TopicSpec | None:
        existing = self.specs.get((spec.route, spec.topic))
        if existing is None:
            self.specs[(spec.route, spec.topic)] = spec
        return existing

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            topics=dict(self.specs),
            removed=frozenset(),
            workers=dict(self.workers),
            stats={},
            assignment=self.assignment,
            leader=None,
        )


def _service(metadata: Metadata, store: Store, wait_s: float = 1.0) -> ControllerService:
    return ControllerService(
        config=CONFIG,
        store=store,  # type: ignore[arg-type]  # the subset the API uses here
        metadata=metadata,  # type: ignore[arg-type]
        new_topic_wait_s=wait_s,
    )


def test_a_topic_created_a_moment_ago_is_added_not_refused_and_only_it_is_asked_about() -> None:
    metadata = Metadata({"orders": 3}, unknown_for=2)
    store = Store()
    created, described = _service(metadata, store).add_topic("orders", TopicRequest())
    assert created and described["partitions"] == 3
    assert metadata.asked == ["orders"] * 3


def test_a_topic_the_source_does_not_have_is_404_naming_the_wait() -> None:
    metadata = Metadata({})
    with pytest.raises(NotFound, match=r"does not exist on source cluster 'src' \(asked for 0.2s\)"):
        _service(metadata, Store(), wait_s=0.2).add_topic("typo", TopicRequest())
    assert set(metadata.asked) == {"typo"} and len(metadata.asked) >= 2


def test_a_just_added_topic_is_listed_at_once_and_says_it_waits_for_its_assignment() -> None:
    store = Store()
    store.workers["w1"] = WorkerRecord(id="w1", state=WorkerState.ACTIVE)
    service = _service(Metadata({"orders": 2}), store)
    service.add_topic("orders", TopicRequest())
    detail = service.topic("orders", None)
    assert detail["state"] == "assigning"
    assert [p["worker"] for p in detail["partition_detail"]] == [None, None]
    store.assignment = Assignment(
        owners={PartitionKey("main", "orders", 0): "w1", PartitionKey("main", "orders", 1): "w1"}, version=1
    )
    assert service.topic("orders", None)["state"] == "replicating"
    with pytest.raises(NotFound):
        service.topic("never-added", None)


def _keys(spec: Iterable[tuple[str, int]]) -> list[PartitionKey]:
    return [PartitionKey("main", topic, p) for topic, count in spec for p in range(count)]


def test_log_lines_name_the_partitions_compactly() -> None:
    assert describe_keys(_keys([("a", 2), ("b", 1)])) == "main/a[0-1], main/b[0]"
    many = describe_keys(_keys([(f"t{n}", 2) for n in range(8)]), limit=3)
    assert many == "main/t0[0-1], main/t1[0-1], main/t2[0-1] and 5 more topics"
    assert describe_keys([]) == ""
