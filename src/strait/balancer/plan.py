"""A plan: the list of moves that turns the cluster model into the balanced one.

Two kinds of move. An inter-broker move gives a partition a new replica list (and says on which
log dir each new replica should land); an intra-broker move sends one replica to another log dir
of the same broker. Both carry the bytes they copy, so the executor can start big ones early and
the report can compare bytes moved with the minimum.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from strait.balancer.errors import PlanError, StalePlanError
from strait.balancer.model import ClusterModel, LogDir, Partition, PartitionKey

PLAN_FORMAT = 1


@dataclass(frozen=True, slots=True)
class InterBrokerMove:
    """Give a partition a new replica list; `target_dirs` places the replicas it adds."""

    topic: str
    partition: int
    source: tuple[int, ...]
    target: tuple[int, ...]
    target_dirs: Mapping[int, str]
    bytes: int

    kind = "inter"

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)

    @property
    def id(self) -> str:
        return f"inter:{self.topic}:{self.partition}"

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.target if b not in self.source)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.source if b not in self.target)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "partition": self.partition,
            "source": list(self.source),
            "target": list(self.target),
            "target_dirs": {str(b): d for b, d in sorted(self.target_dirs.items())},
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class IntraBrokerMove:
    """Send the replica of a partition on `broker` from `source_dir` to `target_dir`."""

    topic: str
    partition: int
    broker: int
    source_dir: str
    target_dir: str
    bytes: int

    kind = "intra"

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)

    @property
    def id(self) -> str:
        return f"intra:{self.topic}:{self.partition}:{self.broker}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "partition": self.partition,
            "broker": self.broker,
            "source_dir": self.source_dir,
            "target_dir": self.target_dir,
            "bytes": self.bytes,
        }


Move = InterBrokerMove | IntraBrokerMove


@dataclass(frozen=True)
class Plan:
    """What to do, why it is needed, and what could not be done."""

    operation: str
    moves: tuple[Move, ...]
    cluster_id: str = ""
    goals: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    # The disk sizes the plan was made with, "broker:path" -> bytes; the executor holds the
    # capacity limit against them while moves run (see `strait.balancer.headroom`).
    capacities: Mapping[str, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.moves)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "operation": self.operation,
            "cluster_id": self.cluster_id,
            "goals": dict(self.goals),
            "moves": [m.to_dict() for m in self.moves],
            "bytes": self.bytes,
            "warnings": list(self.warnings),
            "stats": dict(self.stats),
            "capacities": dict(self.capacities),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """Parse a plan, refusing anything malformed with a message that names the bad entry."""
        if not isinstance(data, Mapping):
            raise PlanError("plan must be a JSON object")
        if data.get("format") != PLAN_FORMAT:
            raise PlanError(f"plan format {data.get('format')!r} is not supported (expected {PLAN_FORMAT})")
        raw_moves = data.get("moves")
        if not isinstance(raw_moves, list):
            raise PlanError("plan has no 'moves' list")
        moves = tuple(_parse_move(i, m) for i, m in enumerate(raw_moves))
        seen: set[str] = set()
        for m in moves:
            if m.id in seen:
                raise PlanError(f"plan moves partition {m.topic}-{m.partition} twice ({m.id})")
            seen.add(m.id)
        return cls(
            operation=str(data.get("operation", "rebalance")),
            moves=moves,
            cluster_id=str(data.get("cluster_id", "")),
            goals=dict(data.get("goals") or {}),
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
            stats=dict(data.get("stats") or {}),
            capacities=_parse_capacities(data.get("capacities")),
        )

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(f"plan is not valid JSON: {exc}") from exc
        return cls.from_dict(data)


def _parse_capacities(raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PlanError("plan 'capacities' must map 'broker:path' to bytes")
    try:
        return {str(k): int(v) for k, v in raw.items()}
    except (TypeError, ValueError) as exc:
        raise PlanError(f"plan 'capacities' must map 'broker:path' to bytes ({exc})") from exc


def disk_key(broker: int, path: str) -> str:
    """How a disk is named in a plan's `capacities`."""
    return f"{broker}:{path}"


def _parse_move(index: int, raw: Any) -> Move:
    where = f"move #{index}"
    try:
        topic = str(raw["topic"])
        partition = int(raw["partition"])
        where = f"move #{index} ({topic}-{partition})"
        size = int(raw["bytes"])
        if raw["kind"] == "inter":
            source = tuple(int(b) for b in raw["source"])
            target = tuple(int(b) for b in raw["target"])
            if not target or len(set(target)) != len(target):
                raise PlanError(f"{where}: target replicas {list(target)} must be distinct and non-empty")
            if len(target) != len(source):
                raise PlanError(f"{where}: target has {len(target)} replicas, source has {len(source)}")
            dirs = {int(b): str(d) for b, d in dict(raw.get("target_dirs") or {}).items()}
            return InterBrokerMove(topic, partition, source, target, dirs, size)
        if raw["kind"] == "intra":
            return IntraBrokerMove(
                topic, partition, int(raw["broker"]), str(raw["source_dir"]), str(raw["target_dir"]), size
            )
        raise PlanError(f"{where}: unknown move kind {raw['kind']!r}")
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PlanError(f"{where}: malformed ({exc!r})") from exc


def diff(before: ClusterModel, after: Mapping[PartitionKey, Partition]) -> list[Move]:
    """The moves that turn `before` into the placements in `after`, in partition order."""
    return diff_ordered(before, ((key, after.get(key)) for key in before.partitions))


def diff_ordered(before: ClusterModel, changed: Iterable[tuple[PartitionKey, Partition | None]]) -> list[Move]:
    """`diff` for the placements in `changed`, in the order given (the planner lists the partitions
    it touched in model order, so it need not go through every partition of the model)."""
    moves: list[Move] = []
    for key, new in changed:
        old = before.partitions[key]
        if new is None or (new.replicas == old.replicas and new.dirs == old.dirs):
            continue
        if new.replicas != old.replicas:
            added = {b: d for b, d in zip(new.replicas, new.dirs, strict=True) if b not in old.replicas}
            moves.append(
                InterBrokerMove(old.topic, old.partition, old.replicas, new.replicas, added, old.size * len(added))
            )
        for b, d in zip(new.replicas, new.dirs, strict=True):
            if b in old.replicas:
                old_dir = old.dir_of(b)
                if old_dir != d:
                    moves.append(IntraBrokerMove(old.topic, old.partition, b, old_dir, d, old.size))
    return moves


def validate(plan: Plan, model: ClusterModel) -> None:
    """Refuse a plan that does not fit the cluster as it is now, naming the first bad partition."""
    if plan.cluster_id and model.cluster_id and plan.cluster_id != model.cluster_id:
        raise PlanError(f"plan was made for cluster {plan.cluster_id}, this is cluster {model.cluster_id}")
    for m in plan.moves:
        current = model.partitions.get(m.key)
        name = f"{m.topic}-{m.partition}"
        if current is None:
            raise StalePlanError(f"partition {name} in the plan does not exist in the cluster")
        if isinstance(m, InterBrokerMove):
            if current.replicas != m.source:
                raise StalePlanError(
                    f"partition {name} has replicas {list(current.replicas)} now, "
                    f"the plan expected {list(m.source)}; make a new plan"
                )
            for b in m.target:
                if b not in model.brokers:
                    raise PlanError(f"partition {name}: target broker {b} is not in the cluster")
            for b, d in m.target_dirs.items():
                if model.log_dir(b, d) is None:
                    raise PlanError(f"partition {name}: broker {b} has no log dir {d}")
        else:
            if m.broker not in current.replicas:
                raise StalePlanError(f"partition {name} has no replica on broker {m.broker} now; make a new plan")
            if current.dir_of(m.broker) != m.source_dir:
                raise StalePlanError(
                    f"partition {name} on broker {m.broker} is in {current.dir_of(m.broker)} now, "
                    f"the plan expected {m.source_dir}; make a new plan"
                )
            if model.log_dir(m.broker, m.target_dir) is None:
                raise PlanError(f"partition {name}: broker {m.broker} has no log dir {m.target_dir}")


def apply(model: ClusterModel, moves: Iterable[Move]) -> ClusterModel:
    """The model after `moves` complete: what the before/after tables and the invariant checks use."""
    changed: dict[PartitionKey, Partition] = {}
    for m in moves:
        p = changed.get(m.key) or model.partitions[m.key]
        if isinstance(m, InterBrokerMove):
            dirs = tuple(
                p.dir_of(b) if b in p.replicas else m.target_dirs.get(b) or _first_dir(model, b) for b in m.target
            )
            leader = p.leader if p.leader in m.target else m.target[0]
            changed[m.key] = Partition(p.topic, p.partition, m.target, dirs, p.size, leader)
        else:
            dirs = tuple(m.target_dir if b == m.broker else d for b, d in zip(p.replicas, p.dirs, strict=True))
            changed[m.key] = Partition(p.topic, p.partition, p.replicas, dirs, p.size, p.leader)
    # Disk usage changes only where changed partitions left or arrived.
    delta: dict[tuple[int, str], int] = {}
    for key, new in changed.items():
        old = model.partitions[key]
        for b, d in zip(old.replicas, old.dirs, strict=True):
            delta[(b, d)] = delta.get((b, d), 0) - old.size
        for b, d in zip(new.replicas, new.dirs, strict=True):
            delta[(b, d)] = delta.get((b, d), 0) + new.size
    dirs_after = [replace(d, used=d.used + delta.get((d.broker, d.path), 0)) for d in model.all_dirs()]
    parts = dict(model.partitions)
    parts.update(changed)
    return ClusterModel(
        brokers=model.brokers, log_dirs=_group(dirs_after, model), partitions=parts, cluster_id=model.cluster_id
    )


def _group(dirs: Iterable[LogDir], model: ClusterModel) -> dict[int, tuple[LogDir, ...]]:
    by_broker: dict[int, list[LogDir]] = {b: [] for b in model.brokers}
    for d in dirs:
        by_broker.setdefault(d.broker, []).append(d)
    return {b: tuple(v) for b, v in by_broker.items()}


def _first_dir(model: ClusterModel, broker: int) -> str:
    dirs = model.log_dirs.get(broker, ())
    return dirs[0].path if dirs else ""


def order_for_execution(moves: Sequence[Move]) -> list[Move]:
    """Biggest moves first, so the long tail starts early; ties broken by id for determinism."""
    return sorted(moves, key=lambda m: (-m.bytes, m.id))
