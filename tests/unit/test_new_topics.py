"""Adding a topic through the API: a topic created a moment ago is waited for, a missing one is 404,
only the named topic is asked about, a just-added topic is listed at once, and its destination
topic is created there and then (a failure is a 502 naming cluster and topic)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import pytest
from fastapi.testclient import TestClient

from strait.config import RouteConfig, parse_config
from strait.controller.discovery import await_topic
from strait.controller.service import Conflict, ControllerService, DestinationFailed, NotFound, TopicRequest
from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    PartitionKey,
    TopicSpec,
    WorkerRecord,
    WorkerState,
    describe_keys,
)
from strait.web.app import create_app

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

    def topic_specs(self, names: Iterable[tuple[str, str]]) -> dict[tuple[str, str], TopicSpec]:
        return {name: self.specs[name] for name in names if name in self.specs}

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


class Maker:
    """A route's destination topics as the API uses them: records what it is asked to make;
    ``gate``, when given, holds each answer until it is set."""

    def __init__(self, events: list[str], error: Exception | None = None, gate: threading.Event | None = None) -> None:
        self.events = events
        self.error = error
        self.gate = gate

    def ensure(self, source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        self.events.append(f"ensure {source_topic}->{destination_topic}")
        if self.gate is not None:
            self.gate.wait(30)
        if self.error is not None:
            raise self.error
        return 3


class Woken:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def wake(self) -> None:
        self.events.append("wake")


def _creating_service(
    store: Store, events: list[str], error: Exception | None = None, gate: threading.Event | None = None
) -> ControllerService:
    made: list[str] = []

    def destinations(route: RouteConfig) -> Maker:
        made.append(route.name)
        events.append(f"maker for {route.name} ({len(made)})")
        return Maker(events, error, gate)

    return ControllerService(
        config=parse_config(
            {
                "clusters": {"src": {}, "dst": {}},
                "routes": [{"name": "main", "source": "src", "destination": "dst", "naming": {"prefix": "src."}}],
            },
            environ={},
        ),
        store=store,  # type: ignore[arg-type]
        metadata=Metadata({"orders": 3, "payments": 1}),  # type: ignore[arg-type]
        controller=Woken(events),  # type: ignore[arg-type]
        destinations=destinations,
        destination_wait_s=0.2,
    )


def test_adding_a_topic_creates_its_destination_with_the_routes_naming_while_the_leader_is_woken() -> None:
    events: list[str] = []
    store = Store()
    service = _creating_service(store, events)
    created, _ = service.add_topic("orders", TopicRequest())
    service.add_topic("payments", TopicRequest())
    again, _ = service.add_topic("orders", TopicRequest())
    assert created and not again
    # The destination is made (from the start of the request, on its own thread) while the
    # topic is stored and the leader woken; one maker per route, asked again on a repeated POST
    # (the destination may have gone).
    assert events[0] == "maker for main (1)"
    assert sorted(events[1:]) == sorted(
        ["ensure orders->src.orders", "ensure payments->src.payments", "ensure orders->src.orders"] + ["wake"] * 3
    )


def test_a_creation_started_before_the_source_knew_the_topic_is_started_again() -> None:
    events: list[str] = []
    store = Store()
    service = _creating_service(store, events)
    maker = Maker(events, error=RuntimeError("source topic 'orders' does not exist"))
    service._destinations["main"] = maker

    def later_known(source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        # The first ask fails as for a topic the source's metadata does not have yet.
        events.append(f"ensure {source_topic}->{destination_topic}")
        if events.count(f"ensure {source_topic}->{destination_topic}") == 1:
            raise RuntimeError("source topic 'orders' does not exist")
        return 3

    maker.ensure = later_known  # type: ignore[method-assign]
    created, _ = service.add_topic("orders", TopicRequest())
    assert created and events.count("ensure orders->src.orders") == 2


def test_a_topic_added_with_another_destination_creates_nothing_and_is_409() -> None:
    events: list[str] = []
    store = Store()
    service = _creating_service(store, events)
    service.add_topic("orders", TopicRequest(destination_topic="orders-copy"))
    with pytest.raises(Conflict):
        service.add_topic("orders", TopicRequest(destination_topic="elsewhere"))
    assert "ensure orders->elsewhere" not in events and "ensure orders->orders-copy" in events


def test_a_destination_that_cannot_be_made_is_502_naming_cluster_and_topic_and_the_topic_stays_added() -> None:
    events: list[str] = []
    store = Store()
    service = _creating_service(store, events, error=RuntimeError("destination topic 'src.orders': not authorized"))
    with pytest.raises(DestinationFailed) as raised:
        service.add_topic("orders", TopicRequest())
    message = raised.value.message
    assert "'src.orders' on cluster 'dst'" in message and "not authorized" in message
    assert "topic 'orders' is added to route 'main'" in message
    assert ("main", "orders") in store.specs  # nothing lost: the workers create it themselves
    app = TestClient(create_app(service, api_token=None))
    response = app.post("/topics/orders")
    assert response.status_code == 502 and "on cluster 'dst'" in response.json()["error"]


def test_a_slow_destination_does_not_hold_the_post_and_its_failure_is_logged_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []
    store = Store()
    gate = threading.Event()
    service = _creating_service(store, events, error=RuntimeError("not authorized"), gate=gate)
    with caplog.at_level(logging.INFO, logger="strait.controller.service"):
        created, _ = service.add_topic("orders", TopicRequest())
        assert created and "not ready 0.2s after the request; still being made" in caplog.text
        gate.set()
        for _ in range(3000):
            if "not authorized (the workers keep trying)" in caplog.text:
                break
            threading.Event().wait(0.01)
    assert "destination topic src.orders on cluster dst not ready: not authorized" in caplog.text


def test_without_a_maker_adding_a_topic_creates_nothing() -> None:
    store = Store()
    created, _ = _service(Metadata({"orders": 3}), store).add_topic("orders", TopicRequest())
    assert created and ("main", "orders") in store.specs


def test_closing_the_api_lets_go_of_its_kafka_clients() -> None:
    # Admin clients kept after their clusters stop log a failed connection every second: the
    # controller lets go of them when it stops.
    events: list[str] = []
    store = Store()
    service = _creating_service(store, events)
    service.add_topic("orders", TopicRequest())
    closed: list[str] = []
    for maker in service._destinations.values():
        maker.close = lambda: closed.append("maker")  # type: ignore[attr-defined]
    service.metadata.close = lambda: closed.append("metadata")  # type: ignore[method-assign]
    service.close()
    assert closed == ["maker", "metadata"] and service._destinations == {}
