"""The balancer against a real 4-broker, 2-rack, 2-disk Kafka cluster.

Skew is made with explicit replica assignments, every replica pinned to its broker's first disk,
and a few MB of real records. Low throttles keep moves in flight long enough to cancel them or
to kill the executor mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.testclient import TestClient

from strait import clients
from strait.balancer import executor, operations, service
from strait.balancer.capacity import Capacities
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals, eligible_dirs, leader_counts, spread
from strait.balancer.model import ClusterModel, rack_violations
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, Plan
from strait.balancer.state import StateStore
from strait.balancer.throttle import BROKER_KEYS, TOPIC_KEYS
from strait.balancer.window import Caps
from strait.sandbox import Sandbox, SandboxSpec
from strait.web.balance import mount_balance
from tests.integration.balancing import cli as _cli
from tests.integration.balancing import count, leftovers, produce
from tests.integration.balancing import wait as _wait

pytestmark = pytest.mark.integration

CAPACITY = {"*": 64_000_000}


@pytest.fixture(scope="module")
def cluster(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Iterator[dict[str, Any]]:
    sb = sandbox_factory(SandboxSpec(clusters=("big",), brokers=4, racks=2, log_dirs=2, zookeeper=False))
    state = sb.clusters["big"]
    props = {"bootstrap.servers": state.bootstrap}
    admin = clients.legacy_admin(props)
    dirs = {b.id: list(b.log_dirs) for b in state.brokers}
    yield {"props": props, "admin": admin, "dirs": dirs, "sandbox": sb}
    admin.close()


def _create(c: dict[str, Any], topic: str, assignments: dict[int, list[int]]) -> None:
    c["admin"].create_topics({topic: {"num_partitions": -1, "replication_factor": -1, "assignments": assignments}})
    gw = KafkaGateway(c["props"])
    try:
        _wait(lambda: len(gw.replicas([topic])) == len(assignments), 30, f"topic {topic}")
        # Pile every replica onto the broker's first disk: the disk-level skew to undo.
        gw.move_dirs({(topic, p, b): c["dirs"][b][0] for p, reps in assignments.items() for b in reps})
        _wait(
            lambda: all(
                d.current == c["dirs"][b][0] and d.future is None
                for (t, _, b), d in gw.replica_dirs(list(c["dirs"]), [topic]).items()
                if t == topic
            ),
            30,
            f"{topic} pinned to disk 0",
        )
    finally:
        gw.close()


def _produce(c: dict[str, Any], topic: str, per_partition: dict[int, int]) -> int:
    return produce(c["props"], topic, per_partition)


def _count(c: dict[str, Any], topic: str) -> int:
    return count(c["props"], topic)


def _leftovers(c: dict[str, Any], topics: list[str]) -> list[str]:
    return leftovers(c["props"], c["dirs"], topics)


def _model(c: dict[str, Any]) -> ClusterModel:
    gw = KafkaGateway(c["props"], CAPACITY)
    try:
        return gw.load_model()
    finally:
        gw.close()


def test_rebalance_spreads_disks_keeps_racks_and_data(cluster: dict[str, Any]) -> None:
    c = cluster
    # Brokers 1 and 2 (racks r1, r2) hold everything, all of it on their first disk.
    _create(c, "skewed", {p: [1, 2] if p % 2 == 0 else [2, 1] for p in range(8)})
    produced = _produce(c, "skewed", {p: 600 for p in range(8)})
    before = _model(c)
    goals = Goals(threshold=0.05)
    plan = operations.rebalance(before, goals)
    assert any(isinstance(m, IntraBrokerMove) for m in plan.moves), "plan should move data between disks"
    assert any(isinstance(m, InterBrokerMove) and m.adding for m in plan.moves)

    gw = KafkaGateway(c["props"], CAPACITY)
    store = StateStore(c["props"])
    run = executor.start(gw, store, plan, executor.Options(throttle=20_000_000))
    final = run.run()
    gw.close()
    assert final.status == "done", final.moves
    assert final.done == len(plan.moves)

    after = _model(c)
    assert spread(eligible_dirs(after)) <= goals.threshold + 0.01
    assert not [p.name for p in after.partitions.values() if rack_violations(after, p)]
    for m in plan.moves:
        if isinstance(m, IntraBrokerMove):
            assert after.partitions[m.key].dir_of(m.broker) == m.target_dir
    assert _count(c, "skewed") == produced
    assert _wait(lambda: not _leftovers(c, ["skewed"]), 10, "no leftovers")


def test_cancel_mid_run_restores_everything_and_spares_foreign_throttles(cluster: dict[str, Any]) -> None:
    c = cluster
    _create(c, "slow", {0: [1], 1: [2], 2: [3]})
    produced = _produce(c, "slow", {0: 1500, 1: 1500, 2: 1500})
    gw = KafkaGateway(c["props"], CAPACITY)
    # An operator's own throttles, on a broker and a topic our moves touch: they must survive.
    gw.alter_broker_configs(4, {"follower.replication.throttled.rate": ("SET", "777777")})
    gw.alter_topic_configs("slow", {"leader.replication.throttled.replicas": ("SET", "2:3")})
    _wait(lambda: gw.broker_configs(4, BROKER_KEYS), 10, "operator throttle visible")
    plan = Plan(
        operation="manual",
        cluster_id=_model(c).cluster_id,
        moves=(
            InterBrokerMove("slow", 0, (1,), (4,), {4: c["dirs"][4][1]}, 1_500_000),
            IntraBrokerMove("slow", 1, 2, c["dirs"][2][0], c["dirs"][2][1], 1_500_000),
        ),
    )
    store = StateStore(c["props"])
    run = executor.start(gw, store, plan, executor.Options(throttle=30_000))
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(final=run.run()))
    thread.start()
    _wait(lambda: run.snapshot().in_flight == 2, 20, "both moves in flight")
    time.sleep(1.5)  # partial copies exist now
    cancelled = _cli("cancel", "--bootstrap", c["props"]["bootstrap.servers"], "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    thread.join(60)
    assert not thread.is_alive()
    assert result["final"].status == "cancelled"
    assert json.loads(cancelled.stdout)["status"] == "cancelled"

    assert gw.replicas(["slow"])[("slow", 0)] == (1,)
    dirs = gw.replica_dirs([1, 2, 4], ["slow"])
    assert dirs[("slow", 1, 2)].current == c["dirs"][2][0]
    assert ("slow", 0, 4) not in dirs or dirs[("slow", 0, 4)].current is None

    def ours_left() -> list[str]:
        return [p for p in _leftovers(c, ["slow"]) if "777777" not in p and "'2:3'" not in p]

    _wait(lambda: not ours_left(), 10, "no reassignment, future replica or throttle of ours left")
    assert gw.broker_configs(4, BROKER_KEYS) == {"follower.replication.throttled.rate": "777777"}
    assert gw.topic_configs("slow", TOPIC_KEYS) == {"leader.replication.throttled.replicas": "2:3"}
    gw.alter_broker_configs(4, {"follower.replication.throttled.rate": ("DELETE", None)})
    gw.alter_topic_configs("slow", {"leader.replication.throttled.replicas": ("DELETE", None)})
    gw.close()
    assert _count(c, "slow") == produced


def test_killed_executor_is_seen_by_status_then_resumed_and_cancelled(cluster: dict[str, Any]) -> None:
    c = cluster
    bootstrap = c["props"]["bootstrap.servers"]
    _create(c, "crash", {0: [1], 1: [3]})
    _produce(c, "crash", {0: 2500, 1: 2500})
    plan = Plan(
        operation="manual",
        cluster_id=_model(c).cluster_id,
        moves=(
            InterBrokerMove("crash", 0, (1,), (2,), {2: c["dirs"][2][1]}, 2_500_000),
            InterBrokerMove("crash", 1, (3,), (4,), {4: c["dirs"][4][1]}, 2_500_000),
        ),
    )
    plan_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"crash-plan-{os.getpid()}.json")
    with open(plan_file, "w") as fh:
        fh.write(plan.to_json())
    started = _cli("execute", "--bootstrap", bootstrap, "--plan", plan_file, "--throttle", "20KB", "--detach", "--json")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    store = StateStore(c["props"])
    _wait(
        lambda: (
            (e := store.current()) is not None
            and e.status == "running"
            and sum(1 for v in e.progress.get("moves", {}).values() if v["state"] == "running") == 2
        ),
        30,
        "detached executor running both moves",
    )
    os.kill(pid, signal.SIGKILL)

    # A fresh process sees the run, in flight, with a dead executor once the heartbeat is stale.
    def dead() -> dict[str, Any] | None:
        status = _cli("status", "--bootstrap", bootstrap, "--json")
        data: dict[str, Any] = json.loads(status.stdout)
        return data if not data["alive"] else None

    status = _wait(dead, 30, "status to report the executor gone")
    assert status["status"] == "running" and status["in_flight"] == 2
    gw = KafkaGateway(c["props"])
    assert set(gw.reassignments()) >= {("crash", 0), ("crash", 1)}
    assert gw.broker_configs(2, BROKER_KEYS), "throttles of the killed run are still recorded and set"

    # Resume: the new executor adopts the moves in flight (no resubmission, no new plan).
    resumed = executor.resume(gw, store)
    assert resumed.snapshot().in_flight == 2
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(final=resumed.run()))
    thread.start()
    # The resumed executor's heartbeat shows in status: the cancel below meets a live run.
    _wait(lambda: json.loads(_cli("status", "--bootstrap", bootstrap, "--json").stdout)["alive"], 60, "a live run")
    assert thread.is_alive(), "moves should still be copying under a 20KB/s throttle"
    cancelled = _cli("cancel", "--bootstrap", bootstrap, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    thread.join(60)
    assert result["final"].status == "cancelled"
    replicas = gw.replicas(["crash"])
    assert replicas[("crash", 0)] == (1,) and replicas[("crash", 1)] == (3,)
    gw.close()
    assert _wait(lambda: not _leftovers(c, ["crash"]), 10, "no leftovers after cancel")


def test_cancel_takes_over_from_a_dead_executor(cluster: dict[str, Any]) -> None:
    c = cluster
    bootstrap = c["props"]["bootstrap.servers"]
    _create(c, "orphan", {0: [3]})
    _produce(c, "orphan", {0: 1500})
    plan = Plan(
        operation="manual",
        cluster_id=_model(c).cluster_id,
        moves=(IntraBrokerMove("orphan", 0, 3, c["dirs"][3][0], c["dirs"][3][1], 1_500_000),),
    )
    plan_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"orphan-plan-{os.getpid()}.json")
    with open(plan_file, "w") as fh:
        fh.write(plan.to_json())
    started = _cli("execute", "--bootstrap", bootstrap, "--plan", plan_file, "--throttle", "30KB", "--detach", "--json")
    assert started.returncode == 0, started.stderr
    store = StateStore(c["props"])
    _wait(
        lambda: (
            (e := store.current()) is not None
            and e.status == "running"
            and any(v["state"] == "running" for v in e.progress.get("moves", {}).values())
        ),
        30,
        "move running",
    )
    os.kill(json.loads(started.stdout)["pid"], signal.SIGKILL)
    cancelled = _cli("cancel", "--bootstrap", bootstrap, "--wait", "12", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    gw = KafkaGateway(c["props"])
    assert gw.replica_dirs([3], ["orphan"])[("orphan", 0, 3)].current == c["dirs"][3][0]
    gw.close()
    assert _wait(lambda: not _leftovers(c, ["orphan"]), 10, "no leftovers after takeover cancel")


def test_stale_plan_is_refused_naming_the_partition(cluster: dict[str, Any], tmp_path: Any) -> None:
    c = cluster
    bootstrap = c["props"]["bootstrap.servers"]
    _create(c, "stale", {0: [1, 2]})
    plan = Plan(operation="manual", moves=(InterBrokerMove("stale", 0, (3, 4), (1, 2), {}, 0),))
    path = tmp_path / "stale.json"
    path.write_text(plan.to_json())
    result = _cli("execute", "--bootstrap", bootstrap, "--plan", str(path))
    assert result.returncode != 0
    assert "stale-0" in result.stderr
    path.write_text("{not json")
    result = _cli("execute", "--bootstrap", bootstrap, "--plan", str(path))
    assert result.returncode != 0 and "not valid JSON" in result.stderr


def test_long_tail_pipeline_refills_the_window_while_batch_waits(cluster: dict[str, Any]) -> None:
    # How much sooner the pipeline finishes is measured by the balancer benchmark; here: that the
    # window refills with small moves while the big one runs, and that batch mode waits instead.
    c = cluster
    # One big partition on broker 1 bound for broker 3; many small ones on broker 2 bound for 4.
    assignments = {0: [1], **{p: [2] for p in range(1, 16)}}
    _create(c, "tail", assignments)
    _produce(c, "tail", {0: 3000, **{p: 60 for p in range(1, 16)}})
    model = _model(c)
    size = {p.partition: p.size for p in model.partitions.values() if p.topic == "tail"}
    forward = tuple(
        InterBrokerMove("tail", p, (1,), (3,), {}, size[p])
        if p == 0
        else InterBrokerMove("tail", p, (2,), (4,), {}, size[p])
        for p in assignments
    )
    back = tuple(InterBrokerMove(m.topic, m.partition, m.target, m.source, {}, m.bytes) for m in forward)
    caps = Caps(in_flight=4, broker_in=4, broker_out=4, disk=4)
    runs: dict[str, executor.Snapshot] = {}
    gw = KafkaGateway(c["props"])
    store = StateStore(c["props"])
    for mode in ("batch", "pipeline"):
        plan = Plan(operation="long-tail", moves=forward, cluster_id=model.cluster_id)
        # Kafka lets a throttled replica burst about ten seconds' worth of its rate before holding
        # it back, so the big partition (3 MB) is sized to outlast that at 150 KB/s.
        run = executor.start(gw, store, plan, executor.Options(mode=mode, caps=caps, throttle=150_000))
        runs[mode] = run.run()
        assert runs[mode].status == "done", runs[mode].moves
        undo = executor.start(
            gw,
            store,
            Plan(operation="undo", moves=back, cluster_id=model.cluster_id),
            executor.Options(caps=Caps(in_flight=16, broker_in=16, broker_out=16, disk=16)),
        )
        assert undo.run().status == "done"
    gw.close()

    def small_during_big(mode: str) -> list[str]:
        moves = runs[mode].moves
        big = moves["inter:tail:0"]
        return [
            k
            for k, v in moves.items()
            if k != "inter:tail:0" and v["started"] > big["started"] and v["finished"] < big["finished"]
        ]

    # Batch: only the moves admitted with the big one can run beside it; the window refills
    # once it is empty.
    assert len(small_during_big("batch")) <= caps.in_flight - 1, runs["batch"].moves
    # Pipeline: the window kept refilling with small moves while the big one ran.
    assert len(small_during_big("pipeline")) >= 6, runs["pipeline"].moves


def test_drain_empties_a_broker(cluster: dict[str, Any]) -> None:
    c = cluster
    before = _model(c)
    plan = operations.drain(before, [4], Goals(threshold=0.5))
    assert plan.moves
    gw = KafkaGateway(c["props"], CAPACITY)
    run = executor.start(
        gw,
        StateStore(c["props"]),
        plan,
        executor.Options(throttle=50_000_000, caps=Caps(in_flight=16, broker_in=8, broker_out=8, disk=8)),
    )
    final = run.run()
    gw.close()
    assert final.status == "done", final.moves
    after = _model(c)
    assert not [p.name for p in after.partitions.values() if 4 in p.replicas]
    assert all(d.used == 0 for d in after.log_dirs[4])
    assert _wait(lambda: not _leftovers(c, sorted({t for t, _ in after.partitions})), 10, "no leftovers")


def test_cli_fixes_a_rack_violation_and_prints_json_plans(cluster: dict[str, Any]) -> None:
    c = cluster
    bootstrap = c["props"]["bootstrap.servers"]
    _create(c, "samerack", {0: [1, 3]})  # brokers 1 and 3 are both in rack r1
    produced = _produce(c, "samerack", {0: 200})
    shown = _cli("fix-racks", "--bootstrap", bootstrap, "--capacity", "*=64MB", "--json")
    assert shown.returncode == 0, shown.stderr
    plan = json.loads(shown.stdout)
    assert [m["topic"] for m in plan["moves"]] == ["samerack"]
    assert _model(c).partitions[("samerack", 0)].replicas == (1, 3), "dry run must not move anything"

    done = _cli("fix-racks", "--bootstrap", bootstrap, "--capacity", "*=64MB", "--execute", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "done"
    after = _model(c)
    assert not rack_violations(after, after.partitions[("samerack", 0)])
    assert _count(c, "samerack") == produced
    # The calls a REST layer makes see the same state.
    latest = service.current(c["props"])
    assert latest is not None and latest["status"] == "done" and latest["done"] == len(plan["moves"])
    assert service.make_plan(c["props"], "fix-racks").moves == ()
    with pytest.raises(ValueError, match="drain"):
        service.make_plan(c["props"], "drain")


def test_another_tools_reassignment_is_left_alone(cluster: dict[str, Any]) -> None:
    c = cluster
    _create(c, "foreign", {0: [1]})
    _create(c, "mine", {0: [3]})
    _produce(c, "foreign", {0: 2000})
    _produce(c, "mine", {0: 100})
    gw = KafkaGateway(c["props"])
    # Another tool's slow reassignment of foreign-0 to broker 2, with its own throttles.
    operator = {
        "topic": {"leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "0:2"},
        1: {"leader.replication.throttled.rate": "10000"},
        2: {"follower.replication.throttled.rate": "10000"},
    }
    gw.alter_topic_configs("foreign", {k: ("SET", v) for k, v in operator["topic"].items()})
    for b in (1, 2):
        gw.alter_broker_configs(b, {k: ("SET", v) for k, v in operator[b].items()})
    assert gw.reassign({("foreign", 0): (2,)}) == {("foreign", 0): None}
    plan = Plan(
        operation="manual",
        cluster_id=_model(c).cluster_id,
        moves=(
            InterBrokerMove("foreign", 0, (1,), (3,), {}, 2_000_000),
            InterBrokerMove("mine", 0, (3,), (4,), {}, 100_000),
        ),
    )
    final = executor.start(gw, StateStore(c["props"]), plan, executor.Options(throttle=5_000_000)).run()
    assert final.moves["inter:mine:0"]["state"] == "done"
    assert final.moves["inter:foreign:0"]["state"] == "skipped"
    assert ("foreign", 0) in gw.reassignments(), "the other tool's move must still be running"
    assert gw.topic_configs("foreign", TOPIC_KEYS) == operator["topic"]
    assert gw.broker_configs(1, ["leader.replication.throttled.rate"]) == operator[1]
    # Clean up as the other tool would.
    gw.reassign({("foreign", 0): None})
    gw.alter_topic_configs("foreign", {k: ("DELETE", None) for k in operator["topic"]})
    for b in (1, 2):
        gw.alter_broker_configs(b, {k: ("DELETE", None) for k in operator[b]})
    gw.close()
    assert _wait(lambda: not _leftovers(c, ["foreign", "mine"]), 15, "clean after the other tool")


def test_cli_leaders_reorders_and_elects(cluster: dict[str, Any]) -> None:
    c = cluster
    bootstrap = c["props"]["bootstrap.servers"]
    _create(c, "leaned", {p: [1, 2 if p % 2 else 3] for p in range(12)})  # broker 1 leads all twelve
    shown = _cli("leaders", "--bootstrap", bootstrap, "--json")
    assert shown.returncode == 0, shown.stderr
    moves = json.loads(shown.stdout)["moves"]
    assert any(m["topic"] == "leaned" for m in moves), moves
    assert all(m["bytes"] == 0 for m in moves)
    before = leader_counts(_model(c))
    done = _cli("leaders", "--bootstrap", bootstrap, "--execute", "--json")
    assert done.returncode == 0, done.stderr
    gw = KafkaGateway(c["props"])
    try:

        def elected() -> bool:
            replicas, leaders = gw.replicas(["leaned"]), gw.leaders(["leaned"])
            return all(leaders[k] == r[0] for k, r in replicas.items())

        _wait(elected, 15, "preferred leaders elected")
    finally:
        gw.close()
    after = _model(c)
    assert leader_counts(after)[1] < before[1]
    # Internal topics a client may create meanwhile (__consumer_offsets, when the executor's
    # state reader first finds its group coordinator) are outside what was planned.
    left = [m for m in operations.leaders(after).moves if not m.topic.startswith("__")]
    assert left == [], f"nothing left to even out: {left}"


def test_rest_plans_starts_watches_and_guards_executions(cluster: dict[str, Any]) -> None:
    def require_token(request: Request) -> None:
        if request.headers.get("authorization") != "Bearer s3cret":
            raise HTTPException(status_code=401, detail="missing or wrong API token")

    app = FastAPI()
    mount_balance(app, {"big": cluster["props"]}, require_token, {"big": Capacities.of(CAPACITY)})
    api = TestClient(app)
    auth = {"Authorization": "Bearer s3cret"}

    unknown = api.get("/balance/nope/plan")
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
    assert api.post("/balance/big/executions", json={}).status_code == 401
    bad = api.post("/balance/big/executions", json={"plan": {"moves": "nonsense"}}, headers=auth)
    assert bad.status_code == 400 and bad.json()["error"]

    _create(cluster, "viarest", {0: [1], 1: [1], 2: [3]})
    _produce(cluster, "viarest", {0: 400, 1: 400, 2: 400})
    plan = api.get("/balance/big/plan", params={"operation": "drain", "brokers": [1]})
    assert plan.status_code == 200, plan.text
    assert plan.json()["moves"], "draining broker 1 must move its replicas"

    started = api.post("/balance/big/executions", json={"plan": plan.json(), "throttle": "20MB"}, headers=auth)
    assert started.status_code == 201, started.text
    execution_id = started.json()["execution"]

    def finished() -> dict[str, Any] | None:
        current = api.get("/balance/big/executions/current").json()
        ended = current.get("execution_id") == execution_id and current["status"] in ("done", "failed", "cancelled")
        return current if ended else None

    final = _wait(finished, 120, "REST-started execution finishes")
    assert final["status"] == "done", final
    assert final["alive"] is False and final["done"] == final["total"]
    placed = [p.replicas for p in _model(cluster).partitions.values() if p.topic == "viarest"]
    assert placed and not any(1 in replicas for replicas in placed)
