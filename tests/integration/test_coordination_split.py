"""The split assignment (layout 2) on a real ZooKeeper: scale past the old 1 MB node, fencing of
every node, chunked nodes, the order of a move, and reading a cluster left in layout 1."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterable, Iterator

import pytest
from kazoo.client import KazooClient

from strait.config import parse_config
from strait.coordination import LeaderInfo, PartitionKey, WorkerRecord, WorkerState, connect
from strait.coordination import split as split_module
from strait.coordination import stats as stats_module
from strait.coordination.model import TopicSpec
from strait.coordination.store import CoordinationStore
from strait.demo import wait_until
from strait.metrics.exposition import serve_metrics
from strait.metrics.worker import WorkerMetrics
from strait.sandbox import Sandbox
from strait.worker.agent import WorkerAgent
from strait.worker.task import PartitionTask

pytestmark = pytest.mark.integration

ZNODE_LIMIT = 1024 * 1024


@pytest.fixture
def root() -> str:
    return f"/split-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def raw(sandbox: Sandbox) -> Iterator[KazooClient]:
    client = KazooClient(hosts=sandbox.zookeeper)
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def stores(sandbox: Sandbox, root: str) -> Iterator[list[CoordinationStore]]:
    opened = [connect(connect=sandbox.zookeeper, root=root, session_timeout_s=5) for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


def _sizes(raw: KazooClient, root: str) -> dict[str, int]:
    """Bytes of every node under root/assignment."""
    sizes: dict[str, int] = {}

    def walk(path: str) -> None:
        data, _ = raw.get(path)
        sizes[path] = len(data)
        for child in raw.get_children(path):
            walk(f"{path}/{child}")

    walk(f"{root}/assignment")
    return sizes


def _spread(count: int, workers: list[str], topics: int = 25) -> dict[PartitionKey, str | None]:
    """`count` partitions over `topics` topics, dealt round-robin (the most fragmented ranges)."""
    per_topic = count // topics
    owners: dict[PartitionKey, str | None] = {}
    for n in range(count):
        key = PartitionKey("eu-west-dr", f"payments.events-{n // per_topic:02d}", n % per_topic)
        owners[key] = workers[n % len(workers)] if n % 97 else None
    return owners


def test_25k_partitions_fit_and_each_worker_reads_only_its_part(
    stores: list[CoordinationStore], raw: KazooClient, root: str
) -> None:
    leader, worker = stores
    workers = [f"worker-{n}.eu-west-1.internal" for n in range(3)]
    owners = _spread(25_000, workers)
    # One string per partition, as layout 1 kept it, passes the node limit.
    assert len(json.dumps({str(k): w for k, w in owners.items()})) > ZNODE_LIMIT
    assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
    assert leader.write_assignment(owners, leader.read_assignment().version)

    assert dict(worker.read_assignment().owners) == owners
    for name in workers:
        assert worker.read_worker_assignment(name).of_worker(name) == {k for k, w in owners.items() if w == name}
    assert worker.read_worker_assignment("w9").owners == {}
    sizes = _sizes(raw, root)
    assert max(sizes.values()) < ZNODE_LIMIT / 4, sizes
    manifest = json.loads(raw.get(f"{root}/assignment")[0])
    assert manifest["layout"] == 2 and manifest["partitions"] == 25_000


def test_a_deposed_leader_cannot_write_any_node_even_in_a_multi_transaction_publish(
    stores: list[CoordinationStore], raw: KazooClient, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(split_module, "TX_OPS", 2)  # every publish takes several transactions
    a, b = stores
    owners = {PartitionKey("main", "t", p): f"w{p % 4}" for p in range(40)}
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    assert a.write_assignment(owners, a.read_assignment().version)
    before = {path: raw.get(path)[1].version for path in _sizes(raw, root)}

    raw.delete(f"{root}/leader")  # depose a behind its back, as a session expiry would
    assert b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b"))
    moved = {k: "zombie" for k in owners}
    assert not a.write_assignment(moved, a.read_assignment().version)
    assert {path: raw.get(path)[1].version for path in _sizes(raw, root)} == before
    assert not raw.exists(f"{root}/assignment/workers/zombie")

    assert b.write_assignment(moved, b.read_assignment().version)
    assert a.read_assignment().owners == moved
    assert a.read_worker_assignment("w1").owners == {}


def test_a_move_empties_the_old_owner_before_the_new_one_gets_it(
    stores: list[CoordinationStore], raw: KazooClient, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(split_module, "TX_OPS", 1)  # one node per transaction: the order is visible
    leader, _ = stores
    key = PartitionKey("main", "t", 0)
    assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
    # "a" sorts before "z": the new owner would be written first without the phases.
    assert leader.write_assignment({key: "z"}, leader.read_assignment().version)
    assert leader.write_assignment({key: "a"}, leader.read_assignment().version)
    a_from = f"{root}/assignment/workers/a"
    z_from = f"{root}/assignment/workers/z"
    assert raw.get(z_from)[1].mzxid < raw.get(a_from)[1].mzxid, "the old owner's node must be written first"
    assert leader.read_worker_assignment("a").of_worker("a") == {key}
    assert leader.read_worker_assignment("z").owners == {}


def test_large_nodes_are_cut_into_pieces_and_shrink_back(
    stores: list[CoordinationStore], raw: KazooClient, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(split_module, "CHUNK_BYTES", 2_000)
    leader, worker = stores
    assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
    big = {PartitionKey("main", "t", p): "w1" for p in range(0, 6_000, 2)}  # no runs: long ranges
    assert leader.write_assignment(big, leader.read_assignment().version)
    head = json.loads(raw.get(f"{root}/assignment/workers/w1")[0])
    assert head["more"] >= 3
    assert worker.read_worker_assignment("w1").of_worker("w1") == set(big)

    small = {PartitionKey("main", "t", p): "w1" for p in range(10)}
    assert leader.write_assignment(small, leader.read_assignment().version)
    assert raw.get_children(f"{root}/assignment/workers/w1") == []
    assert worker.read_worker_assignment("w1").of_worker("w1") == set(small)
    assert worker.read_assignment().owners == small


def test_a_cluster_written_in_layout_1_is_read_then_migrated(sandbox: Sandbox, raw: KazooClient, root: str) -> None:
    # What a controller of the previous version left: one map in the assignment node.
    old = {"main/t/0": "w1", "main/t/1": "w2", "main/t/2": None}
    raw.create(f"{root}/assignment", json.dumps(old).encode(), makepath=True)
    raw.create(f"{root}/leader-epoch", b"{}")
    leader = connect(connect=sandbox.zookeeper, root=root)
    worker = connect(connect=sandbox.zookeeper, root=root)
    try:
        assert {str(k): w for k, w in leader.read_assignment().owners.items()} == old
        assert set(worker.read_worker_assignment("w1").owners) == {PartitionKey("main", "t", 0)}
        # While an old controller may read it, a worker also publishes the old holding list.
        holding = frozenset({PartitionKey("main", "t", 0)})
        worker.register_worker(WorkerRecord("w1", WorkerState.ACTIVE, holding=holding))
        record = json.loads(raw.get(f"{root}/workers/live/w1")[0])
        assert record["holding"] == ["main/t/0"] and record["held"] == [["main", "t", "0"]]

        assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
        owners = dict(leader.read_assignment().owners)
        owners[PartitionKey("main", "t", 2)] = "w1"
        assert leader.write_assignment(owners, leader.read_assignment().version)
        assert json.loads(raw.get(f"{root}/assignment")[0])["layout"] == 2
        assert worker.read_worker_assignment("w1").of_worker("w1") == {
            PartitionKey("main", "t", 0),
            PartitionKey("main", "t", 2),
        }
        assert worker.read_worker_assignment("w2").of_worker("w2") == {PartitionKey("main", "t", 1)}
        worker.update_worker(WorkerRecord("w1", WorkerState.ACTIVE, holding=holding))
        assert "holding" not in json.loads(raw.get(f"{root}/workers/live/w1")[0])
        assert leader.snapshot().workers["w1"].holding == holding
    finally:
        leader.close()
        worker.close()


def test_a_worker_watch_fires_for_its_own_node(stores: list[CoordinationStore]) -> None:
    leader, worker = stores
    woken = threading.Event()
    worker.watch_worker_assignment("w1", lambda _a: woken.set())
    assert woken.wait(10)  # the first call, as kazoo's watches do
    woken.clear()
    assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
    assert leader.write_assignment({PartitionKey("main", "t", 0): "w1"}, leader.read_assignment().version)
    assert woken.wait(10)


def test_forgetting_a_worker_deletes_its_empty_node_only_while_leading(
    stores: list[CoordinationStore], raw: KazooClient, root: str
) -> None:
    leader, other = stores
    assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
    assert leader.write_assignment({PartitionKey("main", "t", 0): "gone"}, leader.read_assignment().version)
    leader.forget_worker("gone")  # still has a partition: kept
    assert raw.exists(f"{root}/assignment/workers/gone")
    assert leader.write_assignment({PartitionKey("main", "t", 0): "w1"}, leader.read_assignment().version)
    other.forget_worker("gone")  # not the leader: nothing
    assert raw.exists(f"{root}/assignment/workers/gone")
    leader.forget_worker("gone")
    assert not raw.exists(f"{root}/assignment/workers/gone")
    assert leader.read_assignment().owners == {PartitionKey("main", "t", 0): "w1"}


class _Copier:
    """Stands in for the data path: copies nothing, reports stats for what it holds."""

    def __init__(self) -> None:
        self.tasks: set[PartitionTask] = set()

    def start(self) -> None: ...

    def assign(self, tasks: Iterable[PartitionTask]) -> None:
        self.tasks |= set(tasks)

    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]:
        self.tasks -= set(tasks)
        return set()

    def abandon(self) -> None:
        self.tasks.clear()

    def fenced(self) -> set[PartitionTask]:
        return set()

    def crashed(self) -> str | None:
        return None

    def assigned(self) -> set[PartitionTask]:
        return set(self.tasks)

    def stats(self) -> dict[PartitionTask, dict[str, int]]:
        return {task: {"records": 3, "bytes": 30, "lag": 0} for task in self.tasks}

    def stop(self, drain: bool = True, timeout_s: float = 30) -> None:
        self.tasks.clear()


def test_a_large_worker_keeps_its_stats_out_of_zookeeper_and_the_controller_still_sees_them(
    sandbox: Sandbox, raw: KazooClient, root: str
) -> None:
    count = stats_module.INLINE_PARTITIONS + 500
    config = parse_config(
        {
            "zookeeper": {"connect": sandbox.zookeeper, "root": root, "session_timeout_s": 5},
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": "main", "source": "src", "destination": "dst"}],
            "worker": {"stats_interval_s": 0.5, "drain_timeout_s": 10},
        },
        environ={},
    )
    leader = connect(connect=sandbox.zookeeper, root=root)
    worker_store = connect(connect=sandbox.zookeeper, root=root, session_timeout_s=5)
    metrics = WorkerMetrics("w1")
    agent = WorkerAgent(
        config=config, worker_id="w1", store=worker_store, make_copier=lambda _route: _Copier(), metrics=metrics
    )
    metrics.url = serve_metrics(metrics.registry, "127.0.0.1:0", stats=lambda: agent.last_report)
    keys = {PartitionKey("main", "t", p) for p in range(count)}
    thread = threading.Thread(target=agent.run, daemon=True)
    try:
        assert leader.attempt_to_acquire_leadership(LeaderInfo("c", "http://c"))
        leader.create_topic(TopicSpec("main", "t", "t", partitions=count, initial_partitions=count))
        assert leader.write_assignment(dict.fromkeys(keys, "w1"), leader.read_assignment().version)
        thread.start()
        assert wait_until(lambda: leader.snapshot().workers["w1"].holding == keys, 60)
        assert wait_until(lambda: raw.exists(f"{root}/workers/stats/w1") is not None, 30)
        assert wait_until(lambda: len(dict(leader.snapshot().stats["w1"].get("partitions") or {})) == count, 60)
        summary = json.loads(raw.get(f"{root}/workers/stats/w1")[0])
        assert "partitions" not in summary and summary["partition_count"] == count
        assert summary["stats_url"].endswith("/stats") and len(json.dumps(summary)) < 2_000
        assert len(raw.get(f"{root}/workers/live/w1")[0]) < 200  # holding as one range
    finally:
        agent.request_drain()
        assert leader.write_assignment({}, leader.read_assignment().version)
        thread.join(timeout=30)
        leader.close()


def test_a_leader_deposed_in_the_middle_of_a_publish_leaves_no_partition_in_two_nodes(
    stores: list[CoordinationStore], raw: KazooClient, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(split_module, "TX_OPS", 1)  # one node per transaction
    a, b = stores
    before = {PartitionKey("main", "t", p): ("w1" if p < 6 else "w2") for p in range(12)}
    after = {PartitionKey("main", "t", p): ("w2" if p < 6 else "w3") for p in range(12)}  # every one moves
    assert a.attempt_to_acquire_leadership(LeaderInfo("a", "http://a"))
    assert a.write_assignment(before, a.read_assignment().version)

    client = a._client  # type: ignore[attr-defined]
    real = client.transaction
    commits = {"n": 0}

    def transaction() -> object:
        t = real()
        commit = t.commit

        def deposing_commit() -> object:
            commits["n"] += 1
            if commits["n"] == 2:  # the first transaction landed: now another controller takes over
                raw.delete(f"{root}/leader")
                assert b.attempt_to_acquire_leadership(LeaderInfo("b", "http://b"))
            return commit()

        t.commit = deposing_commit
        return t

    monkeypatch.setattr(client, "transaction", transaction)
    assert not a.write_assignment(after, a.read_assignment().version)
    assert commits["n"] == 2, "the publish went on after a transaction was refused"

    seen: dict[PartitionKey, list[str]] = {}
    for worker in ("w1", "w2", "w3"):
        for key in b.read_worker_assignment(worker).of_worker(worker):
            seen.setdefault(key, []).append(worker)
    assert all(len(owners) == 1 for owners in seen.values()), seen
    assert set(seen) < set(before), "the first transaction only took partitions away"
    assert b.write_assignment(after, b.read_assignment().version)
    assert b.read_assignment().owners == after
