"""The ZooKeeper coordination store against a real ZooKeeper: leadership, fencing, sessions."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from strait.config import parse_config
from strait.coordination import (
    LeaderInfo,
    PartitionKey,
    SessionState,
    WorkerIdTaken,
    WorkerRecord,
    WorkerState,
    connect,
)
from strait.coordination.model import TopicSpec
from strait.coordination.store import CoordinationStore
from strait.demo import wait_until
from strait.sandbox import Sandbox, SandboxError
from strait.worker.agent import WorkerAgent
from strait.worker.task import PartitionTask

pytestmark = pytest.mark.integration

KEY = PartitionKey("main", "orders", 0)


@pytest.fixture
def root() -> str:
    return f"/coord-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stores(sandbox: Sandbox, root: str) -> Iterator[list[CoordinationStore]]:
    opened = [connect(connect=sandbox.zookeeper, root=root, session_timeout_s=3) for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


def test_one_leader_at_a_time_and_release_hands_over(stores: list[CoordinationStore]) -> None:
    a, b = stores
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    assert not b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b"))
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))  # idempotent for the holder
    assert b.snapshot().leader == LeaderInfo("a", "http://a")
    a.release_leadership()
    assert not a.holds_leadership()
    assert b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b"))


def test_assignment_writes_are_compare_and_set_and_fenced(
    sandbox: Sandbox, stores: list[CoordinationStore], root: str
) -> None:
    a, b = stores
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    version = a.read_assignment().version
    assert a.write_assignment({KEY: "w1"}, version)
    assert not a.write_assignment({KEY: "w2"}, version), "a stale version must lose"
    assert a.read_assignment().owners == {KEY: "w1"}

    # Depose a behind its back (as a session expiry would), let b lead: a's writes must fail.
    raw = KazooClient(hosts=sandbox.zookeeper)
    raw.start()
    try:
        raw.delete(f"{root}/leader")
    finally:
        raw.stop()
        raw.close()
    assert b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b"))
    current = a.read_assignment().version
    assert not a.write_assignment({KEY: "stale-leader"}, current)
    assert b.write_assignment({KEY: "w3"}, current)
    assert b.read_assignment().owners == {KEY: "w3"}


def test_worker_ids_are_exclusive_and_deregistration_is_remembered(stores: list[CoordinationStore]) -> None:
    a, b = stores
    a.register_worker(WorkerRecord(id="w1", state=WorkerState.JOINING, holding=frozenset({KEY})))
    with pytest.raises(WorkerIdTaken):
        b.register_worker(WorkerRecord(id="w1", state=WorkerState.JOINING))
    snapshot = b.snapshot()
    assert snapshot.workers["w1"].live and snapshot.workers["w1"].holding == frozenset({KEY})
    a.deregister_worker(WorkerRecord(id="w1", state=WorkerState.LEFT))
    assert b.snapshot().workers["w1"].state is WorkerState.LEFT
    b.register_worker(WorkerRecord(id="w1", state=WorkerState.JOINING))
    b.close()
    assert wait_until(lambda: a.snapshot().workers["w1"].state is WorkerState.DEAD, 10)


def test_a_workers_pool_is_registered_and_a_gone_worker_can_be_forgotten(stores: list[CoordinationStore]) -> None:
    a, b = stores
    a.register_worker(WorkerRecord(id="v1", state=WorkerState.ACTIVE, pool="vip"))
    a.register_worker(WorkerRecord(id="d1", state=WorkerState.ACTIVE))
    workers = b.snapshot().workers
    assert (workers["v1"].pool, workers["d1"].pool) == ("vip", "default")
    before = time.time()
    a.deregister_worker(WorkerRecord(id="v1", state=WorkerState.LEFT, pool="vip"))
    gone = b.snapshot().workers["v1"]
    assert not gone.live and gone.state is WorkerState.LEFT and gone.pool == "vip"
    assert gone.gone_since is not None and before - 1 <= gone.gone_since <= time.time() + 1
    b.forget_worker("d1")  # live: kept
    b.forget_worker("v1")
    assert set(b.snapshot().workers) == {"d1"}


def test_leadership_stops_as_soon_as_the_connection_is_in_doubt(sandbox: Sandbox, root: str) -> None:
    store = connect(connect=sandbox.zookeeper, root=root, session_timeout_s=10)
    seen: list[SessionState] = []
    store.on_session_change(seen.append)
    try:
        assert store.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
        sandbox.stop_zookeeper()
        try:
            # SUSPENDED, long before the 10 s session could expire.
            assert wait_until(lambda: not store.holds_leadership(), 5, interval_s=0.05)
            assert SessionState.SUSPENDED in seen
            assert not store.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
        finally:
            try:
                sandbox.start_zookeeper()
            except SandboxError:
                # Under load the sandbox can take a JVM still being exec'd for one that exited;
                # asking again finds it running (or really starts it).
                sandbox.start_zookeeper()
        # The session survived the outage: the node is still ours, so leadership comes back.
        assert wait_until(lambda: store.attempt_to_acquire_leadership(LeaderInfo("a", "http://a")), 30)
    finally:
        store.close()


class RecordingCopier:
    """Stands in for the data path: remembers what the agent asks of it."""

    def __init__(self) -> None:
        self.tasks: set[PartitionTask] = set()
        self.revoked: list[PartitionTask] = []

    def start(self) -> None: ...

    def assign(self, tasks: Iterable[PartitionTask]) -> None:
        self.tasks |= set(tasks)

    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]:
        for task in tasks:
            self.tasks.discard(task)
            self.revoked.append(task)
        return set()

    def abandon(self) -> None:
        self.revoked.extend(self.tasks)
        self.tasks.clear()

    def fenced(self) -> set[PartitionTask]:
        return set()

    def crashed(self) -> str | None:
        return None

    def assigned(self) -> set[PartitionTask]:
        return set(self.tasks)

    def stats(self) -> dict[PartitionTask, dict[str, int]]:
        return {task: {"records": 0, "bytes": 0} for task in self.tasks}

    def stop(self, drain: bool = True, timeout_s: float = 30) -> None:
        self.tasks.clear()


def test_a_worker_whose_session_expires_stops_copying_and_registers_again(sandbox: Sandbox, root: str) -> None:
    config = parse_config(
        {
            "zookeeper": {"connect": sandbox.zookeeper, "root": root, "session_timeout_s": 3},
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": "main", "source": "src", "destination": "dst"}],
            "worker": {"stats_interval_s": 0.5, "drain_timeout_s": 10},
        },
        environ={},
    )
    leader = connect(connect=sandbox.zookeeper, root=root)
    worker_store = connect(connect=sandbox.zookeeper, root=root, session_timeout_s=3)
    copier = RecordingCopier()
    agent = WorkerAgent(config=config, worker_id="w1", store=worker_store, make_copier=lambda _route: copier)
    keys = {PartitionKey("main", "t", p) for p in range(2)}
    try:
        assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
        leader.create_topic(TopicSpec(route="main", topic="t", destination_topic="t-copy", partitions=2))
        assert leader.write_assignment(dict.fromkeys(keys, "w1"), leader.read_assignment().version)
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        assert wait_until(lambda: leader.snapshot().workers["w1"].holding == keys, 15)
        assert {t.destination_topic for t in copier.tasks} == {"t-copy"}
        assert agent.state is WorkerState.ACTIVE

        # Expire the worker's session the way ZooKeeper does it: another client with the same
        # session id closes it.
        session_id, password = worker_store._client.client_id  # type: ignore[attr-defined]
        twin = KazooClient(hosts=sandbox.zookeeper, client_id=(session_id, password))
        twin.start()
        twin.stop()
        twin.close()
        assert wait_until(lambda: len(copier.revoked) == 2, 15), "the worker kept copying after its session ended"
        # It registers again with a new session and, still assigned, resumes.
        assert wait_until(lambda: leader.snapshot().workers["w1"].holding == keys, 20)
        assert len(copier.tasks) == 2

        agent.request_drain()
        assert wait_until(lambda: leader.snapshot().workers["w1"].drain_requested, 10)
        assert leader.write_assignment({}, leader.read_assignment().version)  # what the controller would do
        thread.join(timeout=20)
        assert not thread.is_alive()
        assert leader.snapshot().workers["w1"].state is WorkerState.LEFT
    finally:
        agent.request_drain()
        leader.close()


class ReadCounter:
    """Counts the ZooKeeper reads a store's client sends (get, get_children, exists, get_async)."""

    METHODS = ("get", "get_children", "exists", "get_async")

    def __init__(self, store: CoordinationStore) -> None:
        self.reads = 0
        client = store._client  # type: ignore[attr-defined]
        for name in self.METHODS:
            setattr(client, name, self._counted(getattr(client, name)))

    def _counted(self, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return method(*args, **kwargs)

        return call

    def take(self) -> int:
        reads, self.reads = self.reads, 0
        return reads


def test_a_workers_pick_up_reads_the_specs_of_its_new_topics_only(stores: list[CoordinationStore]) -> None:
    leader, worker = stores
    for n in range(40):
        leader.create_topic(TopicSpec(route="main", topic=f"t{n:02d}", destination_topic=f"t{n:02d}", partitions=2))
    counter = ReadCounter(worker)
    specs = worker.topic_specs({("main", "t07"), ("main", "t31"), ("main", "gone")})
    assert sorted(specs) == [("main", "t07"), ("main", "t31")]
    assert specs[("main", "t07")].partitions == 2
    # One read per topic asked for, whatever else the cluster replicates; the whole listing
    # reads every topic (what a pick-up used to cost).
    assert counter.take() == 3
    assert len(worker.topics()) == 40
    assert counter.take() == 2 + 40
