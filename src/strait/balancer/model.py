"""The cluster as the planner sees it: brokers, their log dirs, and where every replica lives.

The model is a plain snapshot with no I/O; `strait.balancer.gateway` is the one place that
loads it from a live cluster. Planning never mutates a model; it works on its own copy and
the plan is the difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Broker:
    """A broker and the rack (top-of-rack switch) it sits under; `None` means no rack is set."""

    id: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class LogDir:
    """One disk of one broker. `capacity` and `used` are bytes.

    `total` and `free` are what the broker reported for the dir's filesystem (-1: not reported);
    `configured` says whether `capacity` came from a rule given by people rather than `total`.
    """

    broker: int
    path: str
    capacity: int
    used: int
    total: int = -1
    free: int = -1
    configured: bool = False

    @property
    def ratio(self) -> float:
        """Fraction of the disk in use; a disk of unknown (zero) size counts as full."""
        return self.used / self.capacity if self.capacity > 0 else 1.0


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition's replica list (preferred leader first), the log dir of each replica, and its size."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    dirs: tuple[str, ...]
    size: int
    leader: int | None = None

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def dir_of(self, broker: int) -> str:
        return self.dirs[self.replicas.index(broker)]


@dataclass(frozen=True)
class ClusterModel:
    """An immutable snapshot of one cluster.

    `log_dirs` maps broker id to that broker's dirs, sorted by path so that iteration (and so
    every plan) is deterministic.
    """

    brokers: Mapping[int, Broker]
    log_dirs: Mapping[int, tuple[LogDir, ...]]
    partitions: Mapping[PartitionKey, Partition]
    cluster_id: str = ""
    _dir_index: dict[tuple[int, str], LogDir] = field(init=False, repr=False, compare=False)
    _racks: frozenset[str | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {(d.broker, d.path): d for dirs in self.log_dirs.values() for d in dirs}
        object.__setattr__(self, "_dir_index", index)
        object.__setattr__(self, "_racks", frozenset(b.rack for b in self.brokers.values()))

    @classmethod
    def build(
        cls,
        brokers: Iterable[Broker],
        log_dirs: Iterable[LogDir],
        partitions: Iterable[Partition],
        cluster_id: str = "",
    ) -> ClusterModel:
        """Build a model, sorting everything so equal inputs give equal models."""
        by_broker: dict[int, list[LogDir]] = {}
        for d in log_dirs:
            by_broker.setdefault(d.broker, []).append(d)
        broker_map = {b.id: b for b in sorted(brokers, key=lambda b: b.id)}
        dirs = {b: tuple(sorted(by_broker.get(b, []), key=lambda d: d.path)) for b in broker_map}
        parts = {p.key: p for p in sorted(partitions, key=lambda p: p.key)}
        return cls(brokers=broker_map, log_dirs=dirs, partitions=parts, cluster_id=cluster_id)

    def log_dir(self, broker: int, path: str) -> LogDir | None:
        return self._dir_index.get((broker, path))

    def all_dirs(self) -> Iterator[LogDir]:
        for b in self.brokers:
            yield from self.log_dirs.get(b, ())

    def racks(self) -> frozenset[str | None]:
        return self._racks

    def rack_of(self, broker: int) -> str | None:
        known = self.brokers.get(broker)
        return known.rack if known is not None else None

    def replica_count(self) -> int:
        return sum(len(p.replicas) for p in self.partitions.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, used to save a snapshot next to a plan and in tests."""
        return {
            "cluster_id": self.cluster_id,
            "brokers": [{"id": b.id, "rack": b.rack} for b in self.brokers.values()],
            "log_dirs": [
                {
                    "broker": d.broker,
                    "path": d.path,
                    "capacity": d.capacity,
                    "used": d.used,
                    "total": d.total,
                    "free": d.free,
                    "configured": d.configured,
                }
                for d in self.all_dirs()
            ],
            "partitions": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "replicas": list(p.replicas),
                    "dirs": list(p.dirs),
                    "size": p.size,
                    "leader": p.leader,
                }
                for p in self.partitions.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterModel:
        return cls.build(
            brokers=[Broker(int(b["id"]), b.get("rack")) for b in data["brokers"]],
            log_dirs=[
                LogDir(
                    int(d["broker"]),
                    str(d["path"]),
                    int(d["capacity"]),
                    int(d["used"]),
                    int(d.get("total", -1)),
                    int(d.get("free", -1)),
                    bool(d.get("configured", False)),
                )
                for d in data["log_dirs"]
            ],
            partitions=[
                Partition(
                    topic=str(p["topic"]),
                    partition=int(p["partition"]),
                    replicas=tuple(int(r) for r in p["replicas"]),
                    dirs=tuple(str(x) for x in p["dirs"]),
                    size=int(p["size"]),
                    leader=p.get("leader"),
                )
                for p in data["partitions"]
            ],
            cluster_id=str(data.get("cluster_id", "")),
        )


def max_per_rack(replication_factor: int, rack_count: int) -> int:
    """How many replicas of one partition a single rack may hold.

    With at least as many racks as replicas that is one; with fewer racks the replicas must be
    spread as evenly as possible, as Kafka's own rack-aware assignment does.
    """
    racks = max(rack_count, 1)
    return -(-replication_factor // racks)


def rack_violations(model: ClusterModel, partition: Partition) -> list[str | None]:
    """Racks holding more replicas of `partition` than `max_per_rack` allows."""
    limit = max_per_rack(len(partition.replicas), len(model.racks()))
    counts: dict[str | None, int] = {}
    for b in partition.replicas:
        rack = model.rack_of(b)
        counts[rack] = counts.get(rack, 0) + 1
    return [rack for rack, n in counts.items() if n > limit]
