"""Generated cluster models, seeded and deterministic, for the invariant tests and the benchmark."""

from __future__ import annotations

import random
from dataclasses import dataclass

from strait.balancer.model import Broker, ClusterModel, LogDir, Partition, PartitionKey
from strait.balancer.traffic import Rate, Traffic

GB = 1 << 30


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The cluster to generate.

    skew: 0 places replicas uniformly; closer to 1 piles them onto the first brokers and dirs.
    rack_violations: fraction of partitions deliberately placed with two replicas in one rack.
    empty_brokers: brokers added with no data (a freshly added broker).
    """

    brokers: int
    dirs_per_broker: int
    partitions: int
    replication: int = 3
    racks: int = 3
    dir_capacity: int = 1000 * GB
    mean_size: int = 2 * GB
    skew: float = 0.0
    rack_violations: float = 0.0
    empty_brokers: int = 0
    fill: float = 0.45


def generate(shape: Shape, seed: int) -> ClusterModel:
    """A cluster matching `shape`; the same (shape, seed) always yields the same model."""
    rng = random.Random(seed)
    racks = [f"rack-{i}" for i in range(max(shape.racks, 1))] if shape.racks else []
    brokers = [Broker(b, racks[b % len(racks)] if racks else None) for b in range(1, shape.brokers + 1)]
    hosting = brokers[: max(len(brokers) - shape.empty_brokers, 1)]
    by_rack: dict[str | None, list[int]] = {}
    for b in hosting:
        by_rack.setdefault(b.rack, []).append(b.id)
    rack_names = sorted(by_rack, key=lambda r: r or "")
    dirs = {b.id: [f"/data/d{i}" for i in range(shape.dirs_per_broker)] for b in brokers}

    # Sizes with a long tail, scaled so the average cluster fill is about `shape.fill`.
    raw = [rng.lognormvariate(0.0, 1.0) for _ in range(shape.partitions)]
    total_capacity = len(hosting) * shape.dirs_per_broker * shape.dir_capacity
    target = shape.fill * total_capacity / max(shape.replication, 1)
    scale = target / sum(raw) if raw else 0.0
    sizes = [max(1, int(x * scale)) for x in raw]

    def pick_broker(pool: list[int]) -> int:
        if shape.skew > 0 and rng.random() < shape.skew:
            return pool[min(int(rng.expovariate(4.0) * len(pool) / 4), len(pool) - 1)]
        return pool[rng.randrange(len(pool))]

    def pick_dir(broker: int) -> str:
        options = dirs[broker]
        if shape.skew > 0 and rng.random() < shape.skew:
            return options[0]
        return options[rng.randrange(len(options))]

    partitions: list[Partition] = []
    usage: dict[tuple[int, str], int] = {}
    rf = min(shape.replication, len(hosting))
    for i, size in enumerate(sizes):
        reps: list[int] = []
        violate = shape.rack_violations > 0 and rng.random() < shape.rack_violations
        start = rng.randrange(len(rack_names))
        for r in range(rf):
            rack = rack_names[start] if violate else rack_names[(start + r) % len(rack_names)]
            pool = by_rack[rack]
            if all(b in reps for b in pool):
                pool = [b.id for b in hosting]
            # Rejection sampling: a pool is large next to a replica list, so this ends fast.
            choice = pick_broker(pool)
            while choice in reps:
                choice = pool[rng.randrange(len(pool))]
            reps.append(choice)
        placed = tuple(pick_dir(b) for b in reps)
        for broker_id, path in zip(reps, placed, strict=True):
            usage[(broker_id, path)] = usage.get((broker_id, path), 0) + size
        partitions.append(Partition(f"t{i % 97}", i, tuple(reps), placed, size, reps[0]))
    log_dirs = [
        LogDir(broker_id, path, shape.dir_capacity, usage.get((broker_id, path), 0))
        for broker_id, paths in dirs.items()
        for path in paths
    ]
    return ClusterModel.build(brokers, log_dirs, partitions, cluster_id=f"synthetic-{seed}")


def traffic(model: ClusterModel, seed: int, *, active: float = 0.3, skew: float = 0.5) -> Traffic:
    """Write and read rates for a generated cluster: `active` of the partitions written, with a
    long tail; with `skew`, partitions led by the lower broker ids are written harder."""
    rng = random.Random(seed * 7919 + 1)
    top = max(model.brokers, default=1)
    rates: dict[PartitionKey, Rate] = {}
    for key, p in model.partitions.items():
        if rng.random() >= active:
            continue
        lead = p.replicas[0] if p.replicas else top
        boost = 1.0 + skew * 4.0 * (1.0 - lead / top)
        written = rng.lognormvariate(13.0, 1.2) * boost  # about 0.5 MB/s typical
        read = written * rng.choice((0.0, 1.0, 2.0))
        rates[key] = Rate(written, written / 1000.0, read)
    return Traffic(rates, 60.0)
