"""The capacity limit held while moves run: pure room arithmetic, then the real executor driven
through a simulated cluster that tracks the bytes on every disk, over many generated plans.

The invariant checked at every step of every simulated run: no disk holds more than its limit
(capacity x capacity_limit), or more than it held at the start if it began above it. The same
runs without capacities in the plan break it, which shows the checker can fail.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pytest

from strait.balancer import operations
from strait.balancer.executor import Executor, Options
from strait.balancer.gateway import Reassignment, ReplicaDirs, ReplicaKey
from strait.balancer.goals import Goals
from strait.balancer.headroom import Headroom, landing, limits_of, with_capacities
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition, PartitionKey
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, Move, Plan
from strait.balancer.synthetic import Shape, generate
from strait.balancer.window import Caps, Window

DiskKey = tuple[int, str]
WIDE = Caps(in_flight=64, broker_in=64, broker_out=64, disk=64)


# ---- pure arithmetic ------------------------------------------------------------------------------


def test_a_move_waits_for_room_counting_what_is_there_and_what_is_coming() -> None:
    limits = {(1, "/a"): 100, (1, "/b"): 100, (2, "/a"): 100}
    first = InterBrokerMove("t", 0, (2,), (1,), {1: "/a"}, 50)
    room = Headroom.build(limits, {(1, "/a"): 20}, [first])
    assert room.incoming[(1, "/a")] == 50  # the whole partition, however much of it is copied
    assert room.blocker(IntraBrokerMove("t", 1, 1, "/b", "/a", 30)) is None  # 20 + 50 + 30 = 100
    block = room.blocker(IntraBrokerMove("t", 2, 1, "/b", "/a", 31))
    assert block is not None and block.disk == (1, "/a")
    assert "broker 1 dir /a" in str(block) and "limit" in str(block)


def test_a_new_replica_without_a_dir_must_fit_on_every_dir_of_its_broker() -> None:
    limits = {(1, "/a"): 100, (1, "/b"): 100}
    move = InterBrokerMove("t", 0, (2,), (1,), {}, 60)
    assert sorted(d for d, _ in landing(move, {1: ["/a", "/b"]})) == [(1, "/a"), (1, "/b")]
    assert Headroom.build(limits, {(1, "/b"): 50}, []).blocker(move) is not None
    assert Headroom.build(limits, {(1, "/b"): 40}, []).blocker(move) is None


def test_inter_broker_move_lands_its_per_replica_size_on_each_new_broker() -> None:
    move = InterBrokerMove("t", 0, (1, 2), (3, 4), {3: "/a", 4: "/b"}, 200)
    assert landing(move, {}) == [((3, "/a"), 100), ((4, "/b"), 100)]


def test_disks_without_a_known_size_are_not_held() -> None:
    room = Headroom.build({(1, "/a"): 10}, {}, [])
    assert room.blocker(IntraBrokerMove("t", 0, 2, "/a", "/b", 10**12)) is None


def test_limits_come_from_the_plan_capacities_times_the_capacity_limit() -> None:
    plan = Plan(operation="x", moves=(), goals={"capacity_limit": 0.5}, capacities={"3:/data/d1": 1000})
    assert limits_of(plan) == {(3, "/data/d1"): 500}
    assert limits_of(replace(plan, goals={})) == {(3, "/data/d1"): 900}


def test_capacities_configured_at_execution_win_over_the_plan_and_reported_fill_gaps() -> None:
    plan = Plan(operation="x", moves=(), capacities={"1:/a": 100, "1:/b": 100})
    model = ClusterModel.build(
        [Broker(1)],
        [LogDir(1, "/a", 70, 0, configured=True), LogDir(1, "/b", 5000, 0), LogDir(1, "/c", 6000, 0)],
        [],
    )
    assert with_capacities(plan, model) == {"1:/a": 70, "1:/b": 100, "1:/c": 6000}


def test_window_skips_a_move_without_room_and_admits_smaller_ones_behind_it() -> None:
    window = Window(WIDE)
    big = IntraBrokerMove("t", 0, 1, "/b", "/a", 80)
    small = IntraBrokerMove("t", 1, 1, "/b", "/a", 20)
    room = Headroom.build({(1, "/a"): 100, (1, "/b"): 1000}, {(1, "/a"): 50}, [])
    assert window.admit([big, small], set(), room=room) == [small]
    assert window.verdicts[small.id] is None
    block = window.verdicts[big.id]
    assert block is not None and (block.used, block.incoming, block.size) == (50, 0, 80)


# ---- a simulated cluster that knows the bytes on every disk -----------------------------------------


@dataclass
class DiskSim:
    """Kafka as the executor sees it, with disk usage: copies advance a random number of bytes per tick.

    Growth is applied and checked before completions free anything, so the checked state is the
    peak of each step.
    """

    model: ClusterModel
    limits: Mapping[DiskKey, int]
    rng: random.Random
    max_speed: int
    placement: dict[PartitionKey, tuple[int, ...]] = field(default_factory=dict)
    where: dict[ReplicaKey, str] = field(default_factory=dict)
    sizes: dict[PartitionKey, int] = field(default_factory=dict)
    copies: dict[PartitionKey, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    futures: dict[ReplicaKey, tuple[str, int]] = field(default_factory=dict)
    preferred: dict[ReplicaKey, str] = field(default_factory=dict)
    start: dict[DiskKey, int] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)
    ticks: int = 0

    def __post_init__(self) -> None:
        for p in self.model.partitions.values():
            self.placement[p.key] = p.replicas
            self.sizes[p.key] = p.size
            for b, d in zip(p.replicas, p.dirs, strict=True):
                self.where[(p.topic, p.partition, b)] = d
        self.start = self.usage()

    def first_dir(self, broker: int) -> str:
        return self.model.log_dirs[broker][0].path

    def usage(self) -> dict[DiskKey, int]:
        used: dict[DiskKey, int] = {(d.broker, d.path): 0 for d in self.model.all_dirs()}
        for (t, p, b), d in self.where.items():
            used[(b, d)] += self.sizes[(t, p)]
        for key, (target, left) in self.copies.items():
            for b in target:
                if b not in self.placement[key]:
                    rk = (key[0], key[1], b)
                    used[(b, self.preferred.get(rk) or self.first_dir(b))] += self.sizes[key] - left
        for rk, (d, left) in self.futures.items():
            used[(rk[2], d)] += self.sizes[rk[:2]] - left
        return used

    def check(self) -> None:
        for disk, used in self.usage().items():
            allowed = max(self.limits.get(disk, used), self.start[disk])
            if used > allowed:
                self.breaches.append(f"tick {self.ticks}: {disk} holds {used} > {allowed}")

    def _advance(self) -> None:
        self.ticks += 1
        self.copies = {
            k: (t, max(left - self.rng.randint(1, self.max_speed), 0)) for k, (t, left) in self.copies.items()
        }
        self.futures = {
            rk: (d, max(left - self.rng.randint(1, self.max_speed), 0)) for rk, (d, left) in self.futures.items()
        }
        self.check()
        for key, (target, left) in list(self.copies.items()):
            if left == 0:
                del self.copies[key]
                for b in target:
                    rk = (key[0], key[1], b)
                    if b not in self.placement[key]:
                        self.where[rk] = self.preferred.pop(rk, None) or self.first_dir(b)
                for b in self.placement[key]:
                    if b not in target:
                        del self.where[(key[0], key[1], b)]
                self.placement[key] = target
        for rk, (d, left) in list(self.futures.items()):
            if left == 0:
                del self.futures[rk]
                self.where[rk] = d

    # ---- the Gateway calls the executor makes ----

    def reassignments(self) -> dict[PartitionKey, Reassignment]:
        self._advance()
        return {k: Reassignment(self.replicas_now()[k], (), ()) for k in self.copies}

    def replicas_now(self) -> dict[PartitionKey, tuple[int, ...]]:
        return {
            k: tuple(dict.fromkeys(c[0] + v)) if (c := self.copies.get(k)) else v for k, v in self.placement.items()
        }

    def replicas(self, topics: Iterable[str]) -> dict[PartitionKey, tuple[int, ...]]:
        ts = set(topics)
        return {k: v for k, v in self.replicas_now().items() if k[0] in ts}

    def leaders(self, topics: Iterable[str]) -> dict[PartitionKey, int]:
        return {k: v[0] for k, v in self.replicas(topics).items()}

    def replica_dirs(self, brokers: Iterable[int], topics: Iterable[str]) -> dict[ReplicaKey, ReplicaDirs]:
        bs, ts = set(brokers), set(topics)
        out = {}
        for rk, d in self.where.items():
            if rk[2] in bs and rk[0] in ts:
                future, left = self.futures.get(rk, (None, 0))
                out[rk] = ReplicaDirs(d, future, self.sizes[rk[:2]] - left if future else 0)
        return out

    def disk_usage(self, brokers: Iterable[int]) -> dict[DiskKey, int]:
        bs = set(brokers)
        return {disk: used for disk, used in self.usage().items() if disk[0] in bs}

    def reassign(self, targets: Mapping[PartitionKey, tuple[int, ...] | None]) -> dict[PartitionKey, str | None]:
        for key, target in targets.items():
            if target is None:
                self.copies.pop(key, None)
            else:
                self.copies[key] = (tuple(target), self.sizes[key])
        return dict.fromkeys(targets)

    def move_dirs(self, targets: Mapping[ReplicaKey, str]) -> dict[ReplicaKey, str | None]:
        out: dict[ReplicaKey, str | None] = {}
        for rk, d in targets.items():
            if rk not in self.where:
                self.preferred[rk] = d
                out[rk] = "ReplicaNotAvailableError"
            elif self.where[rk] == d:
                self.futures.pop(rk, None)
                out[rk] = None
            else:
                self.futures[rk] = (d, self.sizes[rk[:2]])
                out[rk] = None
        return out

    def elect_preferred(self, partitions: Iterable[PartitionKey]) -> None:
        pass

    def topic_configs(self, topic: str, keys: Iterable[str]) -> dict[str, str]:
        return {}

    def broker_configs(self, broker: int, keys: Iterable[str]) -> dict[str, str]:
        return {}

    def alter_topic_configs(self, topic: str, ops: Mapping[str, tuple[str, str | None]]) -> None:
        pass

    def alter_broker_configs(self, broker: int, ops: Mapping[str, tuple[str, str | None]]) -> None:
        pass

    def load_model(self) -> ClusterModel:
        raise NotImplementedError


def _execute(
    model: ClusterModel, plan: Plan, seed: int, caps: Caps = WIDE, max_speed: int = 0
) -> tuple[DiskSim, Executor]:
    limits = limits_of(plan)
    largest = max((m.bytes for m in plan.moves), default=1)
    sim = DiskSim(model, limits, random.Random(seed), max_speed or max(largest // 4, 1))
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    ex = Executor(sim, None, "sim", plan, Options(caps=caps), clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    ex.run()
    return sim, ex


SHAPES = [
    Shape(
        brokers=4, dirs_per_broker=2, partitions=40, replication=2, racks=2, skew=0.7, fill=0.55, dir_capacity=10_000
    ),
    Shape(brokers=6, dirs_per_broker=3, partitions=60, replication=3, racks=3, skew=0.6, fill=0.6, dir_capacity=10_000),
    Shape(
        brokers=5, dirs_per_broker=2, partitions=25, replication=2, racks=0, skew=0.8, fill=0.65, dir_capacity=10_000
    ),
    Shape(
        brokers=6,
        dirs_per_broker=2,
        partitions=50,
        replication=2,
        racks=2,
        empty_brokers=2,
        fill=0.6,
        dir_capacity=10_000,
    ),
]
CASES = [(i, seed) for i in range(len(SHAPES)) for seed in range(12)]
# Tight disks and random moves in and out of them: most of these overflow a disk mid-run unless
# the executor holds the limit (see test_without_limits_the_same_runs_overflow_disks).
RANDOM_SHAPES = [
    Shape(brokers=4, dirs_per_broker=2, partitions=30, replication=2, racks=0, fill=0.6, dir_capacity=10_000),
    Shape(brokers=5, dirs_per_broker=3, partitions=40, replication=2, racks=0, fill=0.7, dir_capacity=10_000),
]


@pytest.mark.parametrize(("shape", "seed"), CASES)
def test_no_disk_passes_its_limit_at_any_step_of_a_planned_rebalance(shape: int, seed: int) -> None:
    model = generate(SHAPES[shape], seed)
    plan = operations.rebalance(model, Goals(threshold=0.05, capacity_limit=0.75, leaders=False))
    rng = random.Random(seed)
    caps = Caps(in_flight=rng.choice([2, 8, 64]), broker_in=rng.choice([1, 4, 64]), broker_out=64, disk=64)
    sim, ex = _execute(model, plan, seed, caps)
    assert sim.breaches == []
    assert ex.status == "done"
    for move_id, state in ex.states.items():
        assert state["state"] in ("done", "skipped"), (move_id, state)
        if state["state"] == "skipped":
            assert "no room" in state["error"]


def _random_plan(model: ClusterModel, rng: random.Random) -> Plan:
    """Moves of random replicas to random disks, kept only while the final state fits every limit
    (as a plan must): the order and overlap in between is what the executor has to get right."""
    used = {(d.broker, d.path): d.used for d in model.all_dirs()}
    limit = {(d.broker, d.path): int(d.capacity * 0.75) for d in model.all_dirs()}
    moves: list[Move] = []
    for p in rng.sample(list(model.partitions.values()), k=min(30, len(model.partitions))):
        b = rng.choice(p.replicas)
        src = (b, p.dir_of(b))
        if rng.random() < 0.5:
            others = [d for d in model.log_dirs[b] if d.path != src[1]]
            dst = (b, rng.choice(others).path)
            move: Move = IntraBrokerMove(p.topic, p.partition, b, src[1], dst[1], p.size)
        else:
            free = [x for x in model.brokers if x not in p.replicas]
            if not free:
                continue
            nb = rng.choice(free)
            dst = (nb, rng.choice(model.log_dirs[nb]).path)
            target = tuple(nb if x == b else x for x in p.replicas)
            move = InterBrokerMove(p.topic, p.partition, p.replicas, target, {nb: dst[1]}, p.size)
        if used[dst] + p.size > limit[dst]:
            continue
        used[dst] += p.size
        used[src] -= p.size
        moves.append(move)
    capacities = {f"{d.broker}:{d.path}": d.capacity for d in model.all_dirs()}
    return Plan(operation="random", moves=tuple(moves), goals={"capacity_limit": 0.75}, capacities=capacities)


@pytest.mark.parametrize("seed", range(40))
def test_no_disk_passes_its_limit_at_any_step_of_a_random_plan(seed: int) -> None:
    model = generate(RANDOM_SHAPES[seed % 2], 100 + seed)
    plan = _random_plan(model, random.Random(seed))
    sim, ex = _execute(model, plan, seed)
    assert sim.breaches == []
    for state in ex.states.values():
        assert state["state"] == "done" or (state["state"] == "skipped" and "no room" in state["error"]), state


def test_without_limits_the_same_runs_overflow_disks() -> None:
    # The checker has teeth: run the generated plans with nothing holding the disks back.
    overflowed = 0
    for seed in range(20):
        model = generate(RANDOM_SHAPES[seed % 2], 100 + seed)
        plan = _random_plan(model, random.Random(seed))
        sim = DiskSim(
            model, limits_of(plan), random.Random(seed), max(max((m.bytes for m in plan.moves), default=1) // 4, 1)
        )
        unheld = replace(plan, capacities={})
        Executor(sim, None, "sim", unheld, Options(caps=WIDE), sleep=lambda _: None).run()  # type: ignore[arg-type]
        overflowed += bool(sim.breaches)
    assert overflowed >= 10


def _two_disks(used_a: int, used_b: int, parts: list[tuple[str, int, str]]) -> ClusterModel:
    return ClusterModel.build(
        [Broker(1)],
        [LogDir(1, "/a", 100, used_a), LogDir(1, "/b", 100, used_b)],
        [Partition(t, 0, (1,), (d,), size) for t, size, d in parts],
    )


def test_a_move_into_a_full_disk_waits_for_the_move_out_and_says_why() -> None:
    # /a is at 80 of its limit 90; "big" (30) may only go in once "out" (40) has left it.
    model = _two_disks(80, 40, [("out", 40, "/a"), ("keep", 40, "/a"), ("big", 30, "/b"), ("other", 10, "/b")])
    plan = Plan(
        operation="x",
        moves=(IntraBrokerMove("big", 0, 1, "/b", "/a", 30), IntraBrokerMove("out", 0, 1, "/a", "/b", 40)),
        capacities={"1:/a": 100, "1:/b": 100},
    )
    limits = limits_of(plan)
    sim = DiskSim(model, limits, random.Random(1), 5)
    seen: list[str] = []
    ex = Executor(sim, None, "x", plan, Options(caps=WIDE), sleep=lambda _: None)  # type: ignore[arg-type]
    ex.run(lambda s: seen.extend(str(v.get("waiting")) for v in s.moves.values() if v.get("waiting")))
    assert sim.breaches == []
    assert ex.status == "done" and {s["state"] for s in ex.states.values()} == {"done"}
    assert seen and "broker 1 dir /a" in seen[0]
    assert ex.states["intra:big:0:1"]["started"] >= ex.states["intra:out:0:1"]["finished"]
    assert "waiting" not in ex.states["intra:big:0:1"]


def test_a_swap_that_only_fits_at_the_end_is_skipped_not_forced() -> None:
    # Both disks at 85 of their limit 90: each move needs the other to finish first.
    model = _two_disks(85, 85, [("x", 40, "/a"), ("fa", 45, "/a"), ("y", 40, "/b"), ("fb", 45, "/b")])
    plan = Plan(
        operation="swap",
        moves=(IntraBrokerMove("x", 0, 1, "/a", "/b", 40), IntraBrokerMove("y", 0, 1, "/b", "/a", 40)),
        capacities={"1:/a": 100, "1:/b": 100},
    )
    sim = DiskSim(model, limits_of(plan), random.Random(1), 5)
    ex = Executor(sim, None, "x", plan, Options(caps=WIDE), sleep=lambda _: None)  # type: ignore[arg-type]
    final = ex.run()
    assert sim.breaches == []
    assert final.status == "done" and final.done == 0
    assert all(s["state"] == "skipped" and "no room" in s["error"] for s in ex.states.values())


def test_status_counts_moves_waiting_for_room() -> None:
    model = _two_disks(80, 40, [("out", 40, "/a"), ("keep", 40, "/a"), ("big", 30, "/b"), ("other", 10, "/b")])
    plan = Plan(
        operation="x",
        moves=(IntraBrokerMove("big", 0, 1, "/b", "/a", 30), IntraBrokerMove("out", 0, 1, "/a", "/b", 40)),
        capacities={"1:/a": 100, "1:/b": 100},
    )
    sim = DiskSim(model, limits_of(plan), random.Random(1), 5)
    ex = Executor(sim, None, "x", plan, Options(caps=WIDE), sleep=lambda _: None)  # type: ignore[arg-type]
    waiting: list[int] = []
    ex.run(lambda s: waiting.append(s.waiting))
    assert max(waiting) == 1 and waiting[-1] == 0


def test_the_dashboard_summary_counts_moves_waiting_for_room() -> None:
    from strait.metrics.balance import summarize

    moves = {"a": {"state": "pending", "waiting": "no room yet on broker 1 dir /a"}, "b": {"state": "pending"}}
    assert summarize("e", "running", moves)["waiting_for_room"] == 1


class _Store:
    """The two calls `executor.start` makes of the state store."""

    def __init__(self) -> None:
        self.saved: dict[str, object] = {}

    def current(self) -> None:
        return None

    def start(self, execution_id: str, plan: dict[str, object], options: dict[str, object]) -> None:
        self.saved = plan


def test_start_records_the_capacities_held_while_moves_run_with_the_plan() -> None:
    from strait.balancer import executor

    model = ClusterModel.build(
        [Broker(1)],
        [LogDir(1, "/a", 100, 80, configured=True), LogDir(1, "/b", 7_000, 40, 7_000, 6_000)],
        [Partition("out", 0, (1,), ("/a",), 40), Partition("keep", 0, (1,), ("/a",), 40)],
    )
    sim = DiskSim(model, {}, random.Random(1), 5)
    sim.load_model = lambda: model  # type: ignore[method-assign]
    plan = Plan(operation="x", moves=(IntraBrokerMove("out", 0, 1, "/a", "/b", 40),), capacities={"1:/a": 500})
    store = _Store()
    run = executor.start(sim, store, plan, Options())  # type: ignore[arg-type]
    recorded = Plan.from_dict(store.saved)
    assert recorded.capacities == {"1:/a": 100, "1:/b": 7_000}  # configured now, then reported
    assert run.keeper.limits == {(1, "/a"): 90, (1, "/b"): 6_300}
