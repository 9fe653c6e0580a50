"""Traffic without JMX: per-partition rates from two samples, and the load each broker carries.

A sample is what the admin APIs say at one moment: each partition's log-start and log-end
offsets (ListOffsets), its size on disk (DescribeLogDirs) and the offsets consumer groups have
committed. Two samples a window apart give each partition's write rate (bytes/s and records/s)
and read rate (consumed bytes/s over every group). `strait.balancer.sampler` takes samples;
everything here is pure.

A broker's load follows from where replicas and leaders are (the preferred leader, first
replica, is the one a plan controls):

    net in        every replica of a partition receives its writes: the leader from producers,
                  the followers by fetching, so a broker takes in the sum of its replicas' rates
    leader in     the write rate of the partitions it leads (what producers send it)
    net out       what it leads, sent to each follower (rate x (replicas - 1)) and to consumers
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strait.balancer.model import ClusterModel, Partition, PartitionKey

RESOURCES = ("net_in", "net_out", "leader_in")
RESOURCE_TITLES = {"net_in": "net in", "net_out": "net out", "leader_in": "leader bytes in"}


@dataclass(frozen=True, slots=True)
class PartitionSample:
    """One partition at one moment: log-start and log-end offsets, and bytes on its largest replica."""

    start: int
    end: int
    size: int


@dataclass(frozen=True)
class Sample:
    """Every partition (and every group's committed offset) at monotonic time `at` (seconds)."""

    at: float
    partitions: Mapping[PartitionKey, PartitionSample]
    committed: Mapping[tuple[str, str, int], int] = field(default_factory=dict)  # (group, topic, partition)


@dataclass(frozen=True, slots=True)
class Rate:
    """A partition's traffic: bytes and records written per second, bytes consumed per second."""

    bytes_in: float = 0.0
    records_in: float = 0.0
    bytes_read: float = 0.0


@dataclass(frozen=True)
class Traffic:
    """Rates of the partitions measured over `window_s` seconds; partitions not listed are idle."""

    rates: Mapping[PartitionKey, Rate]
    window_s: float = 0.0

    def rate(self, key: PartitionKey) -> Rate:
        return self.rates.get(key, _IDLE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": round(self.window_s, 3),
            "partitions": [
                {
                    "topic": t,
                    "partition": p,
                    "bytes_in": round(r.bytes_in, 3),
                    "records_in": round(r.records_in, 3),
                    "bytes_read": round(r.bytes_read, 3),
                }
                for (t, p), r in sorted(self.rates.items())
                if r.bytes_in or r.records_in or r.bytes_read
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Traffic:
        rates = {
            (str(x["topic"]), int(x["partition"])): Rate(
                float(x.get("bytes_in", 0)), float(x.get("records_in", 0)), float(x.get("bytes_read", 0))
            )
            for x in data.get("partitions", ())
        }
        return cls(rates, float(data.get("window_s", 0.0)))


_IDLE = Rate()


def rates(before: Sample, after: Sample) -> Traffic:
    """Each partition's rates between two samples.

    Bytes written are the growth of the partition's size; where the log start moved (retention
    deleted a segment, so size growth understates writes) or the size shrank, the records written
    are priced at the partition's bytes per record. Offsets that went backwards (a recreated
    topic) count as no traffic. Consumed bytes are the committed offsets' progress over every
    group present in both samples, priced the same way.
    """
    dt = after.at - before.at
    if dt <= 0:
        raise ValueError(f"samples must be taken in order, {dt:.3f}s apart")
    per_record: dict[PartitionKey, float] = {}
    found: dict[PartitionKey, Rate] = {}
    for key, new in after.partitions.items():
        old = before.partitions.get(key)
        held = new.end - new.start
        per_record[key] = new.size / held if held > 0 and new.size > 0 else 0.0
        if old is None:
            continue
        records = new.end - old.end
        if records <= 0:
            continue
        grown = new.size - old.size
        written = grown if grown > 0 and new.start == old.start else records * per_record[key]
        found[key] = Rate(written / dt, records / dt)
    consumed: dict[PartitionKey, int] = {}
    for (group, topic, partition), offset in after.committed.items():
        was = before.committed.get((group, topic, partition))
        if was is not None and offset > was:
            consumed[(topic, partition)] = consumed.get((topic, partition), 0) + offset - was
    for key, records in consumed.items():
        r = found.get(key, _IDLE)
        found[key] = Rate(r.bytes_in, r.records_in, records * per_record.get(key, 0.0) / dt)
    return Traffic(found, dt)


# ---- broker loads --------------------------------------------------------------------------------


def broker_loads(model: ClusterModel, traffic: Traffic) -> dict[str, dict[int, float]]:
    """Bytes/s per broker for each resource in `RESOURCES`, every broker of the model listed."""
    return loads_of(model.brokers, model.partitions, traffic)


def loads_of(
    brokers: Iterable[int], partitions: Mapping[PartitionKey, Partition], traffic: Traffic
) -> dict[str, dict[int, float]]:
    """`broker_loads` of a placement given as its brokers and partitions."""
    loads = {res: dict.fromkeys(brokers, 0.0) for res in RESOURCES}
    net_in, net_out, leader_in = loads["net_in"], loads["net_out"], loads["leader_in"]
    for key, r in traffic.rates.items():  # only written or read partitions add load
        p = partitions.get(key)
        if p is None or not p.replicas:
            continue
        for b in p.replicas:
            net_in[b] = net_in.get(b, 0.0) + r.bytes_in
        lead = p.replicas[0]
        leader_in[lead] = leader_in.get(lead, 0.0) + r.bytes_in
        net_out[lead] = net_out.get(lead, 0.0) + r.bytes_in * (len(p.replicas) - 1) + r.bytes_read
    return loads


def load_spread(loads: Mapping[int, float], brokers: Iterable[int]) -> float:
    """Largest minus smallest load over `brokers` (bytes/s); zero for none."""
    values = [loads.get(b, 0.0) for b in brokers]
    return max(values) - min(values) if values else 0.0


def spreads(model: ClusterModel, traffic: Traffic, excluded: Iterable[int] = ()) -> dict[str, float]:
    """Max-min load over the brokers that stay (not `excluded`), per resource."""
    out = set(excluded)
    kept = [b for b in model.brokers if b not in out]
    loads = broker_loads(model, traffic)
    return {res: round(load_spread(loads[res], kept), 3) for res in RESOURCES}


def net_in_skew(model: ClusterModel, traffic: Traffic) -> tuple[float, float]:
    """(largest minus smallest network in, mean network in) over the brokers the model lists,
    bytes/s: what the watch mode judges traffic by. A broker gone from the model counts not."""
    net_in = broker_loads(model, traffic)["net_in"]
    values = [net_in[b] for b in model.brokers]
    if not values:
        return 0.0, 0.0
    return max(values) - min(values), sum(values) / len(values)
