"""The controller's cycle against an in-memory store: clean hand-overs, dead workers, drains."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from strait.config import parse_config
from strait.controller.discovery import SourceMetadata
from strait.controller.loop import Controller
from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    SessionState,
    TopicSpec,
    WorkerRecord,
    WorkerState,
)

CONFIG = parse_config(
    {
        "clusters": {"src": {}, "dst": {}},
        "routes": [{"name": "main", "source": "src", "destination": "dst", "include": ["auto-.*"]}],
    },
    environ={},
)


class MemoryStore:
    """Just enough of `CoordinationStore` for the control loop, kept in dicts."""

    def __init__(self) -> None:
        self.leading = True
        self.topics_: dict[tuple[str, str], TopicSpec] = {}
        self.removed: set[tuple[str, str]] = set()
        self.workers: dict[str, WorkerRecord] = {}
        self.assignment = Assignment(owners={}, version=0)
        self.writes = 0

    def holds_leadership(self) -> bool:
        return self.leading

    def attempt_to_acquire_leadership(self, leader: LeaderInfo) -> bool:
        return self.leading

    def release_leadership(self) -> None:
        self.leading = False

    def session_state(self) -> SessionState:
        return SessionState.CONNECTED

    def on_session_change(self, listener: Callable[[SessionState], None]) -> None: ...

    def watch_cluster(self, on_change: Callable[[], None]) -> None: ...

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            topics=dict(self.topics_),
            removed=frozenset(self.removed),
            workers=dict(self.workers),
            stats={},
            assignment=self.assignment,
            leader=None,
        )

    def write_assignment(self, owners: Mapping[PartitionKey, str | None], version: int) -> bool:
        if not self.leading or version != self.assignment.version:
            return False
        self.assignment = Assignment(owners=dict(owners), version=version + 1)
        self.writes += 1
        return True

    def create_topic(self, spec: TopicSpec) -> TopicSpec | None:
        existing = self.topics_.get((spec.route, spec.topic))
        if existing is None:
            self.topics_[(spec.route, spec.topic)] = spec
        return existing

    def update_topic(self, spec: TopicSpec) -> None:
        self.topics_[(spec.route, spec.topic)] = spec

    def forget_worker(self, worker_id: str) -> None:
        if not self.workers[worker_id].live:
            del self.workers[worker_id]

    # Worker side, driven by the test.
    def join(
        self, worker: str, holding: set[PartitionKey] | None = None, drain: bool = False, pool: str | None = None
    ) -> None:
        previous = self.workers.get(worker)
        self.workers[worker] = WorkerRecord(
            id=worker,
            state=WorkerState.ACTIVE,
            holding=frozenset(holding or ()),
            drain_requested=drain,
            pool=pool or (previous.pool if previous else "default"),
        )

    def hold_what_is_assigned(self) -> None:
        """Every live worker does what it is told: release what it lost, start what it got."""
        for worker in list(self.workers):
            if self.workers[worker].live:
                mine = self.assignment.of_worker(worker)
                self.join(worker, set(mine), self.workers[worker].drain_requested)

    def owners(self) -> dict[str, str | None]:
        return {str(k): w for k, w in sorted(self.assignment.owners.items())}


class NoMetadata(SourceMetadata):
    def __init__(self, topics: dict[str, int] | None = None) -> None:
        super().__init__({})
        self.listing = topics or {}

    def topics(self, cluster: str) -> dict[str, int]:
        return dict(self.listing)


def _controller(store: MemoryStore, metadata: NoMetadata | None = None) -> Controller:
    return Controller(
        config=CONFIG,
        store=store,  # type: ignore[arg-type]  # the subset the loop uses
        metadata=metadata or NoMetadata(),
        identity=LeaderInfo("c1", "http://c1"),
    )


def _add(store: MemoryStore, topic: str, partitions: int) -> None:
    store.create_topic(TopicSpec(route="main", topic=topic, destination_topic=topic, partitions=partitions))


def test_a_moved_partition_waits_for_its_old_owner_to_release_it() -> None:
    store = MemoryStore()
    controller = _controller(store)
    store.join("w1")
    _add(store, "t", 2)
    assert controller.cycle() is False
    store.hold_what_is_assigned()
    assert store.owners() == {"main/t/0": "w1", "main/t/1": "w1"}

    store.join("w2")
    assert controller.cycle() is True  # one partition is in hand-over
    moving = [k for k, w in store.owners().items() if w is None]
    assert len(moving) == 1
    assert controller.cycle() is True  # w1 still holds it: nothing changes
    store.hold_what_is_assigned()  # w1 releases it
    assert controller.cycle() is False
    assert sorted(w or "" for w in store.owners().values()) == ["w1", "w2"]


def test_a_dead_workers_partitions_move_in_one_cycle() -> None:
    store = MemoryStore()
    controller = _controller(store)
    store.join("w1")
    store.join("w2")
    _add(store, "t", 4)
    controller.cycle()
    store.hold_what_is_assigned()
    del store.workers["w2"]  # its session ended
    assert controller.cycle() is False
    assert set(store.owners().values()) == {"w1"}


class ListingAfterOwners(NoMetadata):
    """Notes the written owners each time the source's topics are listed."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__({"t": 4})
        self.store = store
        self.owners_seen: list[dict[str, str | None]] = []

    def topics(self, cluster: str) -> dict[str, int]:
        self.owners_seen.append(dict(self.store.owners()))
        return super().topics(cluster)


def test_a_dead_workers_partitions_move_before_the_source_is_listed() -> None:
    # The listing is a Kafka round trip: failover must not wait for it.
    store = MemoryStore()
    metadata = ListingAfterOwners(store)
    controller = _controller(store, metadata)
    store.join("w1")
    store.join("w2")
    _add(store, "t", 4)
    controller.cycle()
    store.hold_what_is_assigned()
    del store.workers["w2"]  # its session ended
    metadata.owners_seen.clear()
    controller.refresh_soon()
    controller.cycle()
    assert [set(owners.values()) for owners in metadata.owners_seen] == [{"w1"}]


def test_a_draining_worker_hands_everything_over() -> None:
    store = MemoryStore()
    controller = _controller(store)
    store.join("w1")
    store.join("w2")
    _add(store, "t", 4)
    controller.cycle()
    store.hold_what_is_assigned()
    store.join("w1", set(store.assignment.of_worker("w1")), drain=True)
    controller.cycle()
    store.hold_what_is_assigned()
    controller.cycle()
    assert set(store.owners().values()) == {"w2"}
    assert not store.workers["w1"].holding


def test_patterns_and_growth_come_from_metadata() -> None:
    store = MemoryStore()
    metadata = NoMetadata({"auto-a": 2, "other": 1})
    controller = _controller(store, metadata)
    store.join("w1")
    controller.cycle()
    assert set(store.owners()) == {"main/auto-a/0", "main/auto-a/1"}
    metadata.listing["auto-a"] = 3
    controller.refresh_soon()
    controller.cycle()
    assert "main/auto-a/2" in store.owners()


def test_a_controller_that_is_not_leader_writes_nothing() -> None:
    store = MemoryStore()
    store.leading = False
    store.join("w1")
    _add(store, "t", 2)
    _controller(store).cycle()
    assert store.writes == 0
