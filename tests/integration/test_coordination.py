"""The coordination stores against real servers: the contract tests run on both ZooKeeper and
Kafka (leadership, fencing, workers, sessions); the Kafka store's own tests follow them."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
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
    connect_kafka,
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


@pytest.fixture(params=["zookeeper", "kafka"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(sandbox: Sandbox, backend: str, root: str) -> Callable[..., CoordinationStore]:
    """Opens stores of the test's backend, all on one coordination root (or topic prefix)."""

    def open_one(session_timeout_s: float = 3) -> CoordinationStore:
        if backend == "kafka":
            props = sandbox.clusters["dst"].props()
            return connect_kafka(
                props=props, prefix=f"__strait{root.replace('/', '.')}", session_timeout_s=session_timeout_s
            )
        return connect(connect=sandbox.zookeeper, root=root, session_timeout_s=session_timeout_s)

    return open_one


def coordination(sandbox: Sandbox, backend: str, root: str, session_timeout_s: float) -> dict[str, Any]:
    """The configuration's coordination section for the test's backend."""
    if backend == "kafka":
        prefix = f"__strait{root.replace('/', '.')}"
        return {"kafka": {"cluster": "dst", "prefix": prefix, "session_timeout_s": session_timeout_s}}
    return {"zookeeper": {"connect": sandbox.zookeeper, "root": root, "session_timeout_s": session_timeout_s}}


@pytest.fixture
def stores(open_store: Callable[..., CoordinationStore]) -> Iterator[list[CoordinationStore]]:
    opened = [open_store() for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


class Outage:
    """The coordinating server unreachable: ZooKeeper stopped, or the Kafka broker frozen."""

    def __init__(self, sandbox: Sandbox, backend: str) -> None:
        self.sandbox, self.backend = sandbox, backend

    def begin(self) -> None:
        if self.backend == "kafka":
            self.sandbox.pause_broker("dst", 1)
        else:
            self.sandbox.stop_zookeeper()

    def end(self) -> None:
        if self.backend == "kafka":
            self.sandbox.resume_broker("dst", 1)
            return
        try:
            self.sandbox.start_zookeeper()
        except SandboxError:
            # Under load the sandbox can take a JVM still being exec'd for one that exited;
            # asking again finds it running (or really starts it).
            self.sandbox.start_zookeeper()


def stall_heartbeats(store: CoordinationStore) -> threading.Event:
    """Freeze a Kafka store's heartbeats as a stopped process would (its other threads still run,
    so it can be seen to believe what it believed); set the event returned to let it go on."""
    thaw = threading.Event()
    closed: threading.Event = store._stop  # type: ignore[attr-defined]

    def frozen() -> None:
        while not (thaw.wait(0.1) or closed.is_set()):
            pass

    store._beat = frozen  # type: ignore[attr-defined]
    return thaw


def depose(sandbox: Sandbox, backend: str, root: str, store: CoordinationStore) -> None:
    """End `store`'s leadership behind its back: its ZooKeeper node deleted (as a session
    expiry would), or its heartbeats frozen until a standby may take over."""
    if backend == "kafka":
        stall_heartbeats(store)
        return
    raw = KazooClient(hosts=sandbox.zookeeper)
    raw.start()
    try:
        raw.delete(f"{root}/leader")
    finally:
        raw.stop()
        raw.close()


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
    sandbox: Sandbox, backend: str, stores: list[CoordinationStore], root: str
) -> None:
    a, b = stores
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    version = a.read_assignment().version
    assert a.write_assignment({KEY: "w1"}, version)
    assert not a.write_assignment({KEY: "w2"}, version), "a stale version must lose"
    assert a.read_assignment().owners == {KEY: "w1"}

    # Depose a behind its back, let b lead: a's writes must fail.
    depose(sandbox, backend, root, a)
    assert wait_until(lambda: b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b")), 15)
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


def test_leadership_stops_as_soon_as_the_connection_is_in_doubt(
    sandbox: Sandbox, backend: str, open_store: Callable[..., CoordinationStore]
) -> None:
    store = open_store(session_timeout_s=10)
    seen: list[SessionState] = []
    store.on_session_change(seen.append)
    outage = Outage(sandbox, backend)
    try:
        assert store.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
        outage.begin()
        try:
            # SUSPENDED, long before the 10 s session could expire.
            assert wait_until(lambda: not store.holds_leadership(), 7, interval_s=0.05)
            assert SessionState.SUSPENDED in seen
            assert not store.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
        finally:
            outage.end()
        # The session survived the outage: leadership is still ours to take back.
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


def expire_session(sandbox: Sandbox, backend: str, store: CoordinationStore) -> None:
    """End `store`'s session: in ZooKeeper, closed by another client with the same session id;
    on Kafka, the broker frozen until the store judges its session lost."""
    if backend == "kafka":
        sandbox.pause_broker("dst", 1)
        try:
            assert wait_until(lambda: store.session_state() is SessionState.LOST, 15, interval_s=0.05)
        finally:
            sandbox.resume_broker("dst", 1)
        return
    session_id, password = store._client.client_id  # type: ignore[attr-defined]
    twin = KazooClient(hosts=sandbox.zookeeper, client_id=(session_id, password))
    twin.start()
    twin.stop()
    twin.close()


def test_a_worker_whose_session_expires_stops_copying_and_registers_again(
    sandbox: Sandbox, backend: str, root: str, open_store: Callable[..., CoordinationStore]
) -> None:
    config = parse_config(
        {
            "coordination": coordination(sandbox, backend, root, 3),
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": "main", "source": "src", "destination": "dst"}],
            "worker": {"stats_interval_s": 0.5, "drain_timeout_s": 10},
        },
        environ={},
    )
    leader = open_store(session_timeout_s=10)
    worker_store = open_store(session_timeout_s=3)
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
        # Announced first, then copied: the agent turns active once its copier has the tasks.
        assert wait_until(lambda: agent.state is WorkerState.ACTIVE, 10)
        assert {t.destination_topic for t in copier.tasks} == {"t-copy"}

        expire_session(sandbox, backend, worker_store)
        assert wait_until(lambda: len(copier.revoked) == 2, 15), "the worker kept copying after its session ended"
        # It registers again with a new session and, still assigned, resumes.
        assert wait_until(lambda: leader.snapshot().workers["w1"].holding == keys, 20)
        assert wait_until(lambda: len(copier.tasks) == 2, 10)

        agent.request_drain()
        assert wait_until(lambda: leader.snapshot().workers["w1"].drain_requested, 10)
        # What the controller would do (leading again if the outage put its leadership in doubt).
        assert wait_until(lambda: leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c")), 15)
        assert leader.write_assignment({}, leader.read_assignment().version)
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


def test_a_workers_pick_up_reads_the_specs_of_its_new_topics_only(sandbox: Sandbox, root: str) -> None:
    leader, worker = (connect(connect=sandbox.zookeeper, root=root) for _ in range(2))
    try:
        for n in range(40):
            spec = TopicSpec(route="main", topic=f"t{n:02d}", destination_topic=f"t{n:02d}", partitions=2)
            leader.create_topic(spec)
        counter = ReadCounter(worker)
        specs = worker.topic_specs({("main", "t07"), ("main", "t31"), ("main", "gone")})
        assert sorted(specs) == [("main", "t07"), ("main", "t31")]
        assert specs[("main", "t07")].partitions == 2
        # One read per topic asked for, whatever else the cluster replicates; the whole listing
        # reads every topic (what a pick-up used to cost).
        assert counter.take() == 3
        assert len(worker.topics()) == 40
        assert counter.take() == 2 + 40
    finally:
        leader.close()
        worker.close()


# --- the Kafka store's own ---------------------------------------------------------------


@pytest.fixture
def kafka_stores(sandbox: Sandbox, root: str) -> Iterator[list[CoordinationStore]]:
    props = sandbox.clusters["dst"].props()
    prefix = f"__strait{root.replace('/', '.')}"
    opened = [connect_kafka(props=props, prefix=prefix, session_timeout_s=3) for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


def test_a_frozen_leaders_writes_are_refused_once_a_new_leader_took_over(kafka_stores: list[CoordinationStore]) -> None:
    a, b = kafka_stores
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    assert a.write_assignment({KEY: "w1"}, a.read_assignment().version)
    thaw = stall_heartbeats(a)
    try:
        assert not b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b")), "a's heartbeats are still fresh"
        assert wait_until(lambda: b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b")), 15, interval_s=0.1)
        version = b.read_assignment().version
        # The frozen leader's transaction reaches the broker, which refuses it (fenced by b's
        # init_transactions), and the store's own write refuses too.
        assert not a._commit([("assignment", {"gen": version + 1})])  # type: ignore[attr-defined]
        assert not a.write_assignment({KEY: "stale-leader"}, version)
        assert not a.holds_leadership()
    finally:
        thaw.set()
    assert b.write_assignment({KEY: "w2"}, version)
    assert a.read_assignment().owners == b.read_assignment().owners == {KEY: "w2"}
    assert a.snapshot().leader == LeaderInfo("b", "http://b")


def test_a_worker_that_stops_heartbeating_is_seen_gone_within_the_session_timeout(
    kafka_stores: list[CoordinationStore],
) -> None:
    leader, worker = kafka_stores
    worker.register_worker(WorkerRecord(id="w1", state=WorkerState.ACTIVE, holding=frozenset({KEY})))
    assert leader.snapshot().workers["w1"].live
    deaths: list[float] = []
    leader.watch_cluster(lambda: deaths.append(time.monotonic()) if not leader.snapshot().workers["w1"].live else None)
    stalled = time.monotonic()
    stall_heartbeats(worker)  # as kill -9 or SIGSTOP: no more heartbeats, no goodbye
    assert wait_until(lambda: bool(deaths), 10, interval_s=0.05), "the leader was not told"
    # Its last heartbeat was read at most a quarter of the timeout before the stall.
    assert deaths[0] - stalled <= 3 + 0.5
    gone = leader.snapshot().workers["w1"]
    assert not gone.live and gone.state is WorkerState.DEAD


def test_100k_partitions_are_published_and_each_worker_reads_its_part(kafka_stores: list[CoordinationStore]) -> None:
    leader, worker = kafka_stores
    owners: dict[PartitionKey, str | None] = {}
    for n in range(100_000):
        # Dealt round-robin over 25 topics: the most fragmented ranges, several pieces a worker.
        owners[PartitionKey("eu-west-dr", f"payments.events-{n % 25:02d}", n // 25)] = f"w{n % 2}" if n % 97 else None
    told = threading.Event()
    worker.watch_worker_assignment("w1", lambda _hint: told.set())
    told.clear()
    assert leader.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    assert leader.write_assignment(owners, leader.read_assignment().version)
    assert told.wait(10)
    part = worker.read_worker_assignment("w1")
    assert part.owners == {k: w for k, w in owners.items() if w == "w1"}
    assert worker.read_assignment().owners == owners
    moved = {k: ("w2" if w == "w1" else w) for k, w in list(owners.items())[:50_000]}
    assert leader.write_assignment(moved, leader.read_assignment().version)
    assert worker.read_assignment().owners == moved
    assert worker.read_worker_assignment("w0").owners == {k: w for k, w in moved.items() if w == "w0"}


def test_the_kafka_store_needs_only_the_coordinator_acls(secure_sandbox: Sandbox, root: str) -> None:
    # The sandbox's user strait holds exactly the ACLs of strait.security.acls (mutual TLS on dst).
    props = secure_sandbox.clusters["dst"].props()
    prefix = f"__strait{root.replace('/', '.')}"
    leader, worker = (connect_kafka(props=props, prefix=prefix, session_timeout_s=3) for _ in range(2))
    try:
        assert leader.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
        leader.create_topic(TopicSpec(route="main", topic="orders", destination_topic="orders", partitions=1))
        assert leader.write_assignment({KEY: "w1"}, leader.read_assignment().version)
        worker.register_worker(WorkerRecord(id="w1", state=WorkerState.ACTIVE, holding=frozenset({KEY})))
        worker.publish_stats("w1", {"updated": time.time()})
        assert worker.read_worker_assignment("w1").owners == {KEY: "w1"}
        snapshot = leader.snapshot()
        assert snapshot.workers["w1"].live and set(snapshot.topics) == {("main", "orders")}
        leader.release_leadership()
        assert worker.attempt_to_acquire_leadership(LeaderInfo("b", "http://b"))
    finally:
        leader.close()
        worker.close()


def test_a_stopped_fleets_topics_move_from_zookeeper_to_kafka(sandbox: Sandbox, root: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from strait.cli.main import app

    config = tmp_path / "strait.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "coordination": coordination(sandbox, "zookeeper", root, 3),
                "clusters": {"src": sandbox.clusters["src"].props(), "dst": sandbox.clusters["dst"].props()},
                "routes": [{"name": "main", "source": "src", "destination": "dst"}],
            }
        )
    )
    prefix = f"__strait{root.replace('/', '.')}"
    migrate = ["coordination", "migrate", "--config", str(config), "--cluster", "dst", "--prefix", prefix]
    old = connect(connect=sandbox.zookeeper, root=root, session_timeout_s=3)
    try:
        old.create_topic(TopicSpec(route="main", topic="a", destination_topic="a-copy", start="latest", partitions=4))
        old.create_topic(TopicSpec(route="main", topic="b", destination_topic="b", origin="pattern", partitions=2))
        old.delete_topic("main", "c")
        old.register_worker(WorkerRecord(id="w1", state=WorkerState.ACTIVE))
        refused = CliRunner().invoke(app, migrate)
        assert refused.exit_code == 1 and "stop the fleet first: workers w1 are live" in refused.output
        old.deregister_worker(WorkerRecord(id="w1", state=WorkerState.LEFT))
        specs = old.topics()
    finally:
        old.close()
    moved = CliRunner().invoke(app, migrate)
    assert moved.exit_code == 0, moved.output
    assert "2 topics, 1 removal marks to move" in moved.output and f"prefix: {prefix}" in moved.output
    new = connect_kafka(props=sandbox.clusters["dst"].props(), prefix=prefix, session_timeout_s=3)
    try:
        assert new.topics() == specs
        assert new.snapshot().removed == {("main", "c")}
    finally:
        new.close()
    again = CliRunner().invoke(app, migrate)
    assert again.exit_code == 0 and "0 topics, 0 removal marks to move; 2 already there" in again.output
