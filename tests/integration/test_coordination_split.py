"""The split assignment (layout 2) on a real ZooKeeper: scale past the old 1 MB node, fencing of
every node, chunked nodes, the order of a move, and reading a cluster left in layout 1."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from strait.coordination import LeaderInfo, PartitionKey, WorkerRecord, WorkerState, connect
from strait.coordination import split as split_module
from strait.coordination.store import CoordinationStore
from strait.sandbox import Sandbox

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
