"""The executor's window, throttle and cancel logic, against a simulated cluster.

The simulation follows Kafka's rules as the executor sees them through the `Gateway` calls
(reassignments listed until the copy is done, future replicas during a disk move, incremental
config ops), and advances one step per `reassignments()` call, i.e. per executor tick. The real
behaviour is covered against Kafka in tests/integration/test_balancer_execution.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from strait.balancer.executor import Executor, Options
from strait.balancer.gateway import Reassignment, ReplicaDirs, ReplicaKey
from strait.balancer.model import ClusterModel, PartitionKey
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, Plan
from strait.balancer.throttle import BROKER_KEYS, FOLLOWER_REPLICAS, LEADER_REPLICAS, wanted
from strait.balancer.window import Caps, Window, footprint


@dataclass
class _Copy:
    target: tuple[int, ...]
    left: int
    source: tuple[int, ...]


@dataclass
class FakeCluster:
    """Partitions copy `speed` bytes per tick; everything else is instant."""

    placement: dict[PartitionKey, tuple[int, ...]]
    sizes: dict[PartitionKey, int]
    dirs: dict[ReplicaKey, str]
    speed: int = 10
    copies: dict[PartitionKey, _Copy] = field(default_factory=dict)
    foreign: set[PartitionKey] = field(default_factory=set)
    futures: dict[ReplicaKey, tuple[str, int]] = field(default_factory=dict)
    preferred: dict[ReplicaKey, str] = field(default_factory=dict)
    topic_cfg: dict[str, dict[str, str]] = field(default_factory=dict)
    broker_cfg: dict[int, dict[str, str]] = field(default_factory=dict)
    ticks: int = 0
    peak: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def _advance(self) -> None:
        self.ticks += 1
        ours = len([k for k in self.copies if k not in self.foreign]) + len(self.futures)
        self.peak["in_flight"] = max(self.peak.get("in_flight", 0), ours)
        for key, copy in list(self.copies.items()):
            copy.left -= self.speed
            if copy.left <= 0:
                del self.copies[key]
                self.foreign.discard(key)
                for b in copy.target:
                    if b not in self.placement[key]:
                        rk = (key[0], key[1], b)
                        self.dirs[rk] = self.preferred.pop(rk, "/d0")
                for b in self.placement[key]:
                    if b not in copy.target:
                        self.dirs.pop((key[0], key[1], b), None)
                self.placement[key] = copy.target
        for rk, (target, left) in list(self.futures.items()):
            left -= self.speed
            if left <= 0:
                del self.futures[rk]
                self.dirs[rk] = target
            else:
                self.futures[rk] = (target, left)

    # ---- Gateway ----------------------------------------------------------------------------

    def load_model(self) -> ClusterModel:
        raise NotImplementedError

    def replicas_now(self) -> dict[PartitionKey, tuple[int, ...]]:
        return {
            k: (tuple(dict.fromkeys(c.target + c.source)) if (c := self.copies.get(k)) else v)
            for k, v in self.placement.items()
        }

    def replicas(self, topics: Iterable[str]) -> dict[PartitionKey, tuple[int, ...]]:
        wanted_topics = set(topics)
        return {k: v for k, v in self.replicas_now().items() if k[0] in wanted_topics}

    def leaders(self, topics: Iterable[str]) -> dict[PartitionKey, int]:
        return {k: v[0] for k, v in self.replicas(topics).items()}

    def reassignments(self) -> dict[PartitionKey, Reassignment]:
        self._advance()
        return {k: Reassignment(self.replicas_now()[k], (), ()) for k in self.copies}

    def replica_dirs(self, brokers: Iterable[int], topics: Iterable[str]) -> dict[ReplicaKey, ReplicaDirs]:
        bs, ts = set(brokers), set(topics)
        return {
            rk: ReplicaDirs(d, self.futures.get(rk, (None, 0))[0], 0)
            for rk, d in self.dirs.items()
            if rk[2] in bs and rk[0] in ts
        }

    def reassign(self, targets: Mapping[PartitionKey, tuple[int, ...] | None]) -> dict[PartitionKey, str | None]:
        out: dict[PartitionKey, str | None] = {}
        for key, target in targets.items():
            if target is None:
                if key in self.copies and key not in self.foreign:
                    del self.copies[key]
                    self.log.append(f"cancel {key}")
                    out[key] = None
                else:
                    out[key] = "NoReassignmentInProgressError"
                continue
            self.copies[key] = _Copy(tuple(target), self.sizes[key], self.placement[key])
            self.log.append(f"reassign {key}")
            out[key] = None
        return out

    def move_dirs(self, targets: Mapping[ReplicaKey, str]) -> dict[ReplicaKey, str | None]:
        out: dict[ReplicaKey, str | None] = {}
        for rk, d in targets.items():
            if rk not in self.dirs:
                self.preferred[rk] = d
                out[rk] = "ReplicaNotAvailableError"
            elif self.dirs[rk] == d:
                self.futures.pop(rk, None)
                out[rk] = None
            else:
                self.futures[rk] = (d, self.sizes[rk[:2]])
                out[rk] = None
        return out

    def elect_preferred(self, partitions: Iterable[PartitionKey]) -> None:
        self.log.append(f"elect {sorted(partitions)}")

    def topic_configs(self, topic: str, keys: Iterable[str]) -> dict[str, str]:
        return {k: v for k, v in self.topic_cfg.get(topic, {}).items() if k in set(keys)}

    def broker_configs(self, broker: int, keys: Iterable[str]) -> dict[str, str]:
        return {k: v for k, v in self.broker_cfg.get(broker, {}).items() if k in set(keys)}

    def alter_topic_configs(self, topic: str, ops: Mapping[str, tuple[str, str | None]]) -> None:
        cfg = self.topic_cfg.setdefault(topic, {})
        for k, (op, value) in ops.items():
            items = [e for e in cfg.get(k, "").split(",") if e]
            if op == "APPEND":
                items += [e for e in (value or "").split(",") if e not in items]
                cfg[k] = ",".join(items)
            elif op == "SUBTRACT":
                drop = set((value or "").split(","))
                cfg[k] = ",".join(e for e in items if e not in drop)
            elif op == "DELETE":
                cfg.pop(k, None)
            else:
                cfg[k] = value or ""
        if not cfg:
            del self.topic_cfg[topic]

    def alter_broker_configs(self, broker: int, ops: Mapping[str, tuple[str, str | None]]) -> None:
        cfg = self.broker_cfg.setdefault(broker, {})
        for k, (op, value) in ops.items():
            if op == "DELETE":
                cfg.pop(k, None)
            else:
                cfg[k] = value or ""
        if not cfg:
            del self.broker_cfg[broker]


def _long_tail() -> tuple[FakeCluster, Plan]:
    keys = [("t", p) for p in range(10)]
    sizes = {k: (100 if k[1] == 0 else 30) for k in keys}
    replicas = {k: ((1,) if k[1] == 0 else (2,)) for k in keys}
    dirs = {(t, p, r[0]): "/d0" for (t, p), r in replicas.items()}
    moves = tuple(
        InterBrokerMove("t", p, (1,), (3,), {3: "/d1"}, sizes[("t", p)])
        if p == 0
        else InterBrokerMove("t", p, (2,), (4,), {4: "/d1"}, sizes[("t", p)])
        for _, p in keys
    )
    return FakeCluster(dict(replicas), sizes, dirs), Plan(operation="test", moves=moves)


def _run(cluster: FakeCluster, plan: Plan, **options: object) -> Executor:
    ex = Executor(cluster, None, "x", plan, Options(**options), sleep=lambda _: None)  # type: ignore[arg-type]
    ex.run()
    return ex


CAPS = Caps(in_flight=4, broker_in=4, broker_out=4, disk=4)


def test_pipeline_keeps_the_window_full_while_the_long_tail_runs() -> None:
    batch_cluster, plan = _long_tail()
    _run(batch_cluster, plan, mode="batch", caps=CAPS)
    pipe_cluster, plan = _long_tail()
    ex = _run(pipe_cluster, plan, mode="pipeline", caps=CAPS)
    assert ex.status == "done"
    assert pipe_cluster.ticks <= 0.75 * batch_cluster.ticks
    assert pipe_cluster.peak["in_flight"] == CAPS.in_flight
    # Every partition ends where the plan said, new replicas on the planned disk.
    assert all(pipe_cluster.placement[m.key] == m.target for m in plan.moves)  # type: ignore[union-attr]
    assert pipe_cluster.dirs[("t", 0, 3)] == "/d1"
    assert pipe_cluster.peak["in_flight"] <= CAPS.in_flight


def test_window_caps_hold_per_broker_and_disk() -> None:
    window = Window(Caps(in_flight=10, broker_in=1, broker_out=10, disk=10))
    moves = [InterBrokerMove("t", p, (1,), (2,), {2: "/d1"}, 10) for p in range(3)]
    moves.append(InterBrokerMove("t", 9, (1,), (3,), {3: "/d1"}, 5))
    started = window.admit(moves, set())
    # Broker 2 takes one copy at a time; the move to broker 3 is not blocked behind it.
    assert [m.partition for m in started] == [0, 9]
    window.remove(started[0].id)
    assert [m.partition for m in window.admit(moves[1:], {("t", 9)})] == [1]


def test_window_never_runs_two_moves_of_one_partition() -> None:
    window = Window(Caps(in_flight=10, broker_in=10, broker_out=10, disk=10))
    inter = InterBrokerMove("t", 0, (1,), (2,), {}, 10)
    intra = IntraBrokerMove("t", 0, 1, "/d0", "/d1", 10)
    assert window.admit([inter, intra], set()) == [inter]
    assert footprint(intra).disks == ((1, "/d0"), (1, "/d1"))


def test_throttles_cover_moves_in_flight_only_and_operator_settings_survive() -> None:
    cluster, plan = _long_tail()
    cluster.topic_cfg["t"] = {LEADER_REPLICAS: "5:9"}
    cluster.broker_cfg[4] = {"follower.replication.throttled.rate": "123"}
    seen: list[dict[str, dict[str, str]]] = []
    ex = Executor(cluster, None, "x", plan, Options(caps=CAPS, throttle=1000), sleep=lambda _: None)
    ex.run(lambda _: seen.append({k: dict(v) for k, v in cluster.topic_cfg.items()}))
    assert any(FOLLOWER_REPLICAS in s.get("t", {}) for s in seen), "throttles were set while copying"
    assert cluster.topic_cfg == {"t": {LEADER_REPLICAS: "5:9"}}
    assert cluster.broker_cfg == {4: {"follower.replication.throttled.rate": "123"}}


def test_wanted_throttles_match_kafka_semantics() -> None:
    w = wanted([InterBrokerMove("t", 3, (1, 2), (2, 5), {}, 10), IntraBrokerMove("u", 0, 7, "/a", "/b", 1)], 500)
    assert w.topics["t"][LEADER_REPLICAS] == {"3:1", "3:2"}
    assert w.topics["t"][FOLLOWER_REPLICAS] == {"3:5"}
    assert w.brokers[5] == {"follower.replication.throttled.rate": "500"}
    assert w.brokers[7] == {"replica.alter.log.dirs.io.max.bytes.per.second": "500"}
    assert set(w.brokers[1]) <= set(BROKER_KEYS)
    assert wanted([InterBrokerMove("t", 3, (1, 2), (2, 1), {}, 0)], 500).topics == {}


def test_no_throttle_rate_is_asked_of_a_gone_broker() -> None:
    # Broker 9 is gone: the drain copies from broker 1 only, and broker 9 would refuse a config request.
    w = wanted([InterBrokerMove("t", 3, (9, 1), (2, 1), {}, 10)], 500, live={1, 2, 3})
    assert set(w.brokers) == {1, 2}
    assert w.topics["t"][LEADER_REPLICAS] == {"3:9", "3:1"}  # topic entries name it harmlessly
    assert 9 in wanted([InterBrokerMove("t", 3, (9, 1), (2, 1), {}, 10)], 500).brokers


def test_cancel_reverts_moves_in_flight_and_leaves_nothing_behind() -> None:
    cluster, plan = _long_tail()
    intra = IntraBrokerMove("t", 5, 2, "/d0", "/d1", 10)
    plan = Plan(operation="test", moves=(*plan.moves[:5], intra))
    cluster.speed = 1
    ex = Executor(cluster, None, "x", plan, Options(caps=CAPS, throttle=1000), sleep=lambda _: None)

    def tick(snap: object) -> None:
        if cluster.ticks == 3:
            ex.request_cancel()

    final = ex.run(tick)
    assert final.status == "cancelled"
    assert not cluster.copies and not cluster.futures
    assert cluster.placement[("t", 0)] == (1,)
    assert cluster.dirs[("t", 5, 2)] == "/d0"
    assert cluster.topic_cfg == {} and cluster.broker_cfg == {}
    assert {s["state"] for s in final.moves.values()} <= {"cancelled", "done"}


def test_foreign_reassignment_is_left_alone_and_our_move_skipped_when_stale() -> None:
    cluster, plan = _long_tail()
    # Another tool is moving t-1 from broker 2 to broker 5.
    cluster.copies[("t", 1)] = _Copy((5,), 30, (2,))
    cluster.foreign.add(("t", 1))
    ex = _run(cluster, plan, caps=CAPS)
    assert "reassign ('t', 1)" not in cluster.log
    assert cluster.placement[("t", 1)] == (5,)
    assert ex.states["inter:t:1"]["state"] == "skipped"
    assert "t-1" in ex.states["inter:t:1"]["error"]
    assert ex.status == "done"


def test_stale_move_is_skipped_naming_the_partition() -> None:
    cluster, plan = _long_tail()
    cluster.placement[("t", 2)] = (5,)
    ex = _run(cluster, plan, caps=CAPS)
    assert ex.states["inter:t:2"]["state"] == "skipped"
    assert "t-2" in ex.states["inter:t:2"]["error"]


def test_moves_finish_with_a_preferred_leader_election() -> None:
    cluster, plan = _long_tail()
    _run(cluster, plan, caps=CAPS)
    assert cluster.log[-1].startswith("elect")


@pytest.mark.parametrize("text", ["", "abc", "-5MB", "12XB"])
def test_bad_rates_are_refused(text: str) -> None:
    from strait.balancer.units import parse_bytes

    with pytest.raises(ValueError):
        parse_bytes(text)


def test_rates_with_units() -> None:
    from strait.balancer.units import parse_bytes

    assert parse_bytes("50KB") == 50_000
    assert parse_bytes("20MB") == 20_000_000
    assert parse_bytes("1GiB") == 1024**3
    assert parse_bytes("1000") == 1000


def test_move_found_already_applied_counts_as_done() -> None:
    # E.g. submitted just before the executor died, before its state was saved.
    cluster, plan = _long_tail()
    cluster.placement[("t", 2)] = (4,)
    ex = _run(cluster, plan, caps=CAPS)
    assert ex.states["inter:t:2"]["state"] == "done"
    assert "reassign ('t', 2)" not in cluster.log


def test_executor_crash_removes_throttles_and_leaves_the_run_resumable() -> None:
    cluster, plan = _long_tail()
    cluster.speed = 1
    ex = Executor(cluster, None, "x", plan, Options(caps=CAPS, throttle=1000), sleep=lambda _: None)

    def boom(snap: object) -> None:
        if cluster.ticks == 3:
            raise RuntimeError("admin client died")

    with pytest.raises(RuntimeError):
        ex.run(boom)
    assert cluster.topic_cfg == {} and cluster.broker_cfg == {}
    assert ex.status == "running"
    assert ex.snapshot().in_flight > 0


def test_moves_blocked_by_another_tool_are_skipped_not_waited_on_forever() -> None:
    cluster, plan = _long_tail()
    cluster.copies[("t", 3)] = _Copy((5,), 10_000, (2,))  # effectively never finishes
    cluster.foreign.add(("t", 3))
    ex = _run(cluster, plan, caps=CAPS)
    assert ex.states["inter:t:3"]["state"] == "skipped"
    assert "another tool" in ex.states["inter:t:3"]["error"]
    assert ("t", 3) in cluster.copies, "the other tool's reassignment is untouched"
    assert "cancel ('t', 3)" not in cluster.log
