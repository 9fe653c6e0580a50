"""The chaos schedule: which fault strikes what, when, and when it is undone. Pure and seeded.

`generate(params)` draws a schedule from `params.seed` alone (no clock, no I/O), so a run that
found a problem can be replayed fault for fault. Fault kinds are dealt like cards from a
shuffled deck, refilled when empty, so even a short run meets every kind once; each fault is
placed at the first target where it breaks none of the rules below, otherwise the next kind of
the deck is tried.

Rules, each checked by `tests/unit/test_chaos_schedule.py` over many seeds:
- every fault that takes something away is undone (restart, SIGCONT, re-add) before the quiet
  tail, which leaves the copy time to settle while the load goes on;
- at most one broker of a cluster is down at a time, and never broker 1 (the cluster's KRaft
  controller): with replication factor 3 and `min.insync.replicas` 2 writes go on;
- the coordination store is out for a bounded time, and not while something needs coordination
  to take effect (a controller kill, a topic change through the API, a worker restart);
- at least one worker is never faulted at any moment, and one worker has one fault at a time;
- a source topic is not expanded while a source broker is down (its new replicas need all three);
- a short pause stays well below the session timeout, a long one well beyond it;
- a burst exceeds the catch-up threshold, so it moves partitions to the catch-up pipeline.

The coordination store decides what "the store is out" means (`STORE_KINDS`): on ZooKeeper,
ZooKeeper is killed and restarted; on Kafka, a broker of the coordinating cluster (the
destination) that leads a coordination topic is killed and restarted, or frozen (SIGSTOP)
without closing its connections, and these replace the destination broker kills. A kill holds
no coordination resource while the broker restarts: the coordination topics have three
replicas, so the store is out only until the cluster has elected new leaders; a freeze holds it
(the frozen leader keeps its partitions until the cluster fences it).

Restarts take much longer than planned on a starved machine (a broker killed with -9 may need
two minutes to serve again), so the injector enforces the same exclusions at run time: a fault
waits until the faults it contends with were really undone.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any, Literal

FaultKind = Literal[
    "worker-kill",
    "worker-pause-long",
    "worker-pause-short",
    "controller-kill",
    "source-broker-kill",
    "destination-broker-kill",
    "zookeeper-kill",
    "coordinator-kill",
    "coordinator-pause",
    "partition-expand",
    "topic-readd",
    "topic-add",
    "burst",
]
Store = Literal["zookeeper", "kafka"]
STORES: tuple[Store, ...] = ("kafka", "zookeeper")

# Every kind of the ZooKeeper store; `STORE_KINDS` has each store's.
KINDS: tuple[FaultKind, ...] = (
    "worker-kill",
    "worker-pause-long",
    "worker-pause-short",
    "controller-kill",
    "source-broker-kill",
    "destination-broker-kill",
    "zookeeper-kill",
    "partition-expand",
    "topic-readd",
    "topic-add",
    "burst",
)
# The coordination store's faults: ZooKeeper itself, or the coordinating cluster's brokers.
COORDINATOR_KINDS: frozenset[FaultKind] = frozenset({"coordinator-kill", "coordinator-pause"})
STORE_KINDS: dict[Store, tuple[FaultKind, ...]] = {
    "zookeeper": KINDS,
    # The destination is the coordinating cluster: its broker kill is the coordinator's.
    "kafka": tuple(
        kind
        for k in KINDS
        if k != "destination-broker-kill"
        for kind in (("coordinator-kill", "coordinator-pause") if k == "zookeeper-kill" else (k,))
    ),
}
# Faults that take something away and give it back at `end_s`; the others are instants.
UNDONE: frozenset[FaultKind] = frozenset(
    {
        "worker-kill",
        "worker-pause-long",
        "worker-pause-short",
        "controller-kill",
        "source-broker-kill",
        "destination-broker-kill",
        "zookeeper-kill",
        "coordinator-kill",
        "coordinator-pause",
        "topic-readd",
    }
)
WORKER_KINDS: frozenset[FaultKind] = frozenset({"worker-kill", "worker-pause-long", "worker-pause-short"})
BROKER_KINDS: frozenset[FaultKind] = frozenset({"source-broker-kill", "destination-broker-kill"})
# The worker's copier moves a partition to the catch-up pipeline beyond this fetch lag.
CATCHUP_LAG_THRESHOLD = 10_000
# Instants still occupy their target for a moment, so that two changes of a topic or a topic
# change and a coordination outage do not land on the same second.
INSTANT_S = 2.0
# After a fault is undone, its target gets this long to recover before the next conflicting fault.
SETTLE_S = 3.0


@dataclass(frozen=True)
class ScheduleParams:
    """The shape of the system under test and how hard to shake it."""

    duration_s: float
    seed: int
    workers: int = 3
    controllers: int = 2
    brokers: int = 3
    topics: tuple[str, ...] = ("t0", "t1", "t2")
    late_topics: tuple[str, ...] = ("late0",)  # produced to from the start, added to the route mid-run
    partitions: int = 4
    max_partitions: int = 8
    session_timeout_s: float = 6.0
    mean_gap_s: float = 6.0  # mean time between two faults' starts
    burst_records: tuple[int, int] = (15_000, 30_000)  # per burst partition
    kinds: frozenset[FaultKind] = frozenset(KINDS)
    store: Store = "zookeeper"

    @property
    def warmup_s(self) -> float:
        """Time before the first fault: the copy is flowing normally."""
        return min(60.0, max(10.0, 0.05 * self.duration_s))

    @property
    def quiet_tail_s(self) -> float:
        """Time after the last fault was undone, load still on, before the run ends."""
        return min(120.0, max(20.0, 0.1 * self.duration_s))

    @property
    def horizon_s(self) -> float:
        """Every fault is undone by then."""
        return self.duration_s - self.quiet_tail_s

    @property
    def coordination_max_down_s(self) -> float:
        """Longest a ZooKeeper kill or a coordinating broker's freeze lasts."""
        return 2.0 * self.session_timeout_s

    def enabled(self) -> tuple[FaultKind, ...]:
        """The kinds that make sense for this shape and store, in a fixed order."""
        out = []
        for kind in STORE_KINDS[self.store]:
            if kind not in self.kinds:
                continue
            if (kind in BROKER_KINDS or kind in COORDINATOR_KINDS) and self.brokers < 3:
                continue  # below 3 replicas a broker down stops writes with min.insync.replicas 2
            if kind == "topic-add":
                continue  # placed once per late topic, not dealt from the deck
            out.append(kind)
        return tuple(out)


@dataclass(frozen=True)
class Fault:
    """One fault. `end_s` is when it is undone (None for instants)."""

    id: int
    kind: FaultKind
    # A worker id, "leader", "src/2" or "dst/3", "zookeeper", "coordinator" (the coordinating
    # cluster's broker that leads a coordination topic, found when it strikes), or a topic.
    target: str
    start_s: float
    end_s: float | None = None
    count: int = 0  # burst: records per partition; partition-expand: the new partition count
    partitions: tuple[int, ...] = ()  # burst: the partitions it goes to
    exclusive: frozenset[str] = field(default=frozenset(), compare=False)
    shared: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def busy_until(self) -> float:
        """End of the window in which a conflicting fault may not start."""
        end = self.end_s if self.end_s is not None else self.start_s + INSTANT_S
        return end + SETTLE_S

    def contends(self, other: Fault) -> bool:
        """Whether the two may not be in effect at the same time (whenever that is)."""
        mine, theirs = self.exclusive | self.shared, other.exclusive | other.shared
        return bool(self.exclusive & theirs or other.exclusive & mine)

    def conflicts(self, other: Fault) -> bool:
        """Whether the two contend and their planned windows overlap."""
        return _overlap(self, other) and self.contends(other)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "target": self.target, "start_s": self.start_s}
        if self.end_s is not None:
            out["end_s"] = self.end_s
        if self.count:
            out["count"] = self.count
        if self.partitions:
            out["partitions"] = list(self.partitions)
        return out


@dataclass(frozen=True)
class Step:
    """One action of the schedule: a fault starting or being undone."""

    at_s: float
    action: Literal["start", "end"]
    fault: Fault


@dataclass(frozen=True)
class Schedule:
    params: ScheduleParams
    faults: tuple[Fault, ...]

    def steps(self) -> list[Step]:
        """Every action in time order (a fault's start before its end at the same instant)."""
        out = [Step(f.start_s, "start", f) for f in self.faults]
        out += [Step(f.end_s, "end", f) for f in self.faults if f.end_s is not None]
        return sorted(out, key=lambda s: (s.at_s, s.action != "start", s.fault.id))

    def counts(self) -> dict[str, int]:
        """Faults per kind."""
        out: dict[str, int] = {}
        for fault in self.faults:
            out[fault.kind] = out.get(fault.kind, 0) + 1
        return dict(sorted(out.items()))


def generate(params: ScheduleParams) -> Schedule:
    """The schedule of `params.seed`: the same parameters always give the same schedule."""
    if params.horizon_s <= params.warmup_s:
        return Schedule(params, ())
    rng = random.Random(params.seed)
    placed: list[Fault] = []
    partitions = {topic: params.partitions for topic in params.topics}
    if "topic-add" in params.kinds:
        for topic in params.late_topics:
            for _ in range(100):
                at = round(rng.uniform(params.warmup_s, params.horizon_s - INSTANT_S), 1)
                added = _shape(Fault(len(placed), "topic-add", topic, at))
                if _fits(added, placed, params):
                    placed.append(added)
                    break
    late = list(placed)
    deck: list[FaultKind] = []
    at = params.warmup_s
    while at < params.horizon_s:
        # Only faults still in effect can conflict with one starting now (or later).
        active = late + [f for f in placed[len(late) :] if f.busy_until > at]
        if not deck:
            deck = list(params.enabled())
            rng.shuffle(deck)
        if not deck:
            break
        # When no kind left in the deck fits now, a kind already dealt this round may: the
        # deck keeps every kind's turn, and the faults keep coming at the planned rate.
        extra = [k for k in params.enabled() if k not in deck]
        rng.shuffle(extra)
        for index, kind in enumerate(deck + extra):
            fault = _draw(rng, kind, round(at, 1), len(placed), active, partitions, params)
            if fault is not None:
                placed.append(fault)
                if index < len(deck):
                    del deck[index]
                if kind == "partition-expand":
                    partitions[fault.target] = fault.count
                break
        at += rng.uniform(0.5, 1.5) * params.mean_gap_s
    ordered = sorted(placed, key=lambda f: (f.start_s, f.id))
    return Schedule(params, tuple(replace(f, id=i) for i, f in enumerate(ordered)))


def _draw(
    rng: random.Random,
    kind: FaultKind,
    at: float,
    fault_id: int,
    placed: list[Fault],
    partitions: dict[str, int],
    params: ScheduleParams,
) -> Fault | None:
    """A fault of `kind` starting at `at` on the first target where it fits, or None."""
    session = params.session_timeout_s
    bounds = {
        "worker-kill": (1.0, 12.0),
        "worker-pause-long": (1.5 * session, 3.0 * session),
        "worker-pause-short": (0.15 * session, 0.5 * session),
        "controller-kill": (2.0, 12.0),
        "source-broker-kill": (5.0, 25.0),
        "destination-broker-kill": (5.0, 25.0),
        "zookeeper-kill": (1.0, params.coordination_max_down_s),
        "coordinator-kill": (5.0, 25.0),
        "coordinator-pause": (1.0, params.coordination_max_down_s),
        "topic-readd": (2.0, 15.0),
    }.get(kind)
    # Lengths in tenths of a second, rounded down so that no bound is crossed by rounding.
    end = round(at + math.floor(rng.uniform(*bounds) * 10) / 10, 1) if bounds else None
    count = 0
    burst_partitions: tuple[int, ...] = ()
    targets: list[str]
    if kind in WORKER_KINDS:
        targets = [f"w{n}" for n in range(1, params.workers + 1)]
    elif kind == "controller-kill":
        targets = ["leader"]
    elif kind in BROKER_KINDS:
        cluster = "src" if kind == "source-broker-kill" else "dst"
        targets = [f"{cluster}/{b}" for b in range(2, params.brokers + 1)]
    elif kind == "zookeeper-kill":
        targets = ["zookeeper"]
    elif kind in COORDINATOR_KINDS:
        targets = ["coordinator"]
    else:
        targets = list(params.topics)
    rng.shuffle(targets)
    if kind == "burst":
        count = rng.randint(*params.burst_records)
    for target in targets:
        if kind == "partition-expand":
            count = min(params.max_partitions, partitions[target] + rng.randint(1, 2))
            if count <= partitions[target]:
                continue
        if kind == "burst":
            burst_partitions = tuple(sorted(rng.sample(range(partitions[target]), min(2, partitions[target]))))
        fault = _shape(Fault(fault_id, kind, target, at, end, count, burst_partitions))
        if _fits(fault, placed, params):
            return fault
    return None


def _shape(fault: Fault) -> Fault:
    """The fault with the resources it holds while in effect."""
    exclusive: set[str] = set()
    shared: set[str] = set()
    kind, target = fault.kind, fault.target
    if kind in WORKER_KINDS:
        exclusive.add(f"worker:{target}")
        if kind == "worker-kill":
            shared.add("coordination")  # its restart registers in the store
    elif kind == "controller-kill":
        exclusive.add("controller")
        shared.add("coordination")
    elif kind in BROKER_KINDS:
        exclusive.add("broker:" + target.split("/")[0])
    elif kind == "zookeeper-kill":
        exclusive.add("coordination")
    elif kind in COORDINATOR_KINDS:
        # The coordinating cluster is the destination: its one broker down at a time.
        exclusive.add("broker:dst")
        if kind == "coordinator-pause":
            # A frozen leader keeps its partitions until the cluster fences it: the store is out.
            exclusive.add("coordination")
    elif kind in ("partition-expand", "topic-readd", "topic-add"):
        exclusive.add(f"topic:{target}")
        if kind == "partition-expand":
            shared.add("broker:src")  # new replicas need every source broker up
        else:
            shared.add("coordination")  # a REST call the controller writes to the store
    return replace(fault, exclusive=frozenset(exclusive), shared=frozenset(shared))


def _fits(fault: Fault, placed: list[Fault], params: ScheduleParams) -> bool:
    if fault.start_s < params.warmup_s:
        return False
    if (fault.end_s if fault.end_s is not None else fault.start_s + INSTANT_S) > params.horizon_s:
        return False
    if any(fault.conflicts(other) for other in placed):
        return False
    if fault.kind in WORKER_KINDS:
        # At least one worker is never faulted: count the worker faults in effect with this one.
        others = [o for o in placed if o.kind in WORKER_KINDS and _overlap(fault, o)]
        if 1 + _most_at_once(others, fault) >= params.workers:
            return False
    return True


def _overlap(a: Fault, b: Fault) -> bool:
    return a.start_s < b.busy_until and b.start_s < a.busy_until


def _most_at_once(others: list[Fault], fault: Fault) -> int:
    """The most of `others` in effect at one moment of `fault`'s window."""
    points = {fault.start_s, *(o.start_s for o in others if o.start_s > fault.start_s)}
    return max((sum(1 for o in others if o.start_s <= p < o.busy_until) for p in points), default=0)
