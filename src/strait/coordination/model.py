"""Immutable pictures of the coordination state, as the controller and workers see it.

Each control cycle reads one `ClusterSnapshot`, decides, then writes with a version check:
nothing here does I/O, so decisions made from a snapshot are pure and testable.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

Start = Literal["earliest", "latest"]
Origin = Literal["api", "pattern"]


class PartitionKey(NamedTuple):
    """One source partition of one route: the unit the controller assigns to a worker."""

    route: str
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.route}/{self.topic}/{self.partition}"

    @classmethod
    def parse(cls, text: str) -> PartitionKey:
        return _parse_key(text)


def _ranges(numbers: list[int]) -> str:
    """Sorted partition numbers as "0-99,105,200-201"."""
    parts: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n == prev + 1:
            prev = n
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = n
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def encode_keys(keys: Iterable[PartitionKey]) -> list[list[str]]:
    """A set of partitions, compactly: ``[[route, topic, "0-99,105"], ...]`` (sorted).

    The coordination store keeps assignments and holdings in this form: 100,000 partitions
    one string per partition ran past ZooKeeper's 1 MB node limit, as ranges they take a few
    bytes per topic when a worker holds runs of partitions."""
    grouped: dict[tuple[str, str], list[int]] = {}
    for route, topic, partition in keys:  # unpacked: a named field's lookup costs more, per key
        numbers = grouped.get((route, topic))
        if numbers is None:
            numbers = grouped[(route, topic)] = []
        numbers.append(int(partition))
    # A worker of a large fleet holds one or two partitions of most topics: no sort for one.
    # The (route, topic) pairs are sorted alone (string tuples take the sort's fast compare).
    out: list[list[str]] = []
    for route, topic in sorted(grouped):
        ps = grouped[(route, topic)]
        out.append([route, topic, str(ps[0]) if len(ps) == 1 else _ranges(sorted(set(ps)))])
    return out


def describe_keys(keys: Iterable[PartitionKey], limit: int = 5) -> str:
    """Partitions for a log line: ``route/topic[0-1], ...``, the first ``limit`` topics, then
    how many more."""
    entries = encode_keys(keys)
    shown = ", ".join(f"{route}/{topic}[{ranges}]" for route, topic, ranges in entries[:limit])
    more = len(entries) - limit
    return f"{shown} and {more} more topics" if more > 0 else shown


def decode_keys(entries: Iterable[Any]) -> frozenset[PartitionKey]:
    """The partitions of :func:`encode_keys`' output (entries may repeat a topic: unioned).

    Memoised: every control cycle reads every worker's nodes again, mostly unchanged, and
    building 100,000 keys each time took seconds of the cycle."""
    return _decode(tuple((str(e[0]), str(e[1]), str(e[2])) for e in entries))


@functools.lru_cache(maxsize=64)
def _decode(entries: tuple[tuple[str, str, str], ...]) -> frozenset[PartitionKey]:
    keys: set[PartitionKey] = set()
    for route, topic, ranges in entries:
        for part in ranges.split(","):
            if not part:
                continue
            low, _, high = part.partition("-")
            keys.update(PartitionKey(route, topic, p) for p in range(int(low), int(high or low) + 1))
    return frozenset(keys)


def split_encoded(entries: list[list[str]], limit: int) -> list[list[list[str]]]:
    """:func:`encode_keys` output cut into pieces of at most about `limit` bytes of JSON each
    (a topic whose ranges alone are longer is cut between ranges). Always at least one piece."""
    pieces: list[list[list[str]]] = [[]]
    size = 0
    for route, topic, ranges in entries:
        overhead = len(route) + len(topic) + 12
        while True:
            room = max(64, limit - size - overhead)
            if len(ranges) <= room:
                head, ranges = ranges, ""
            else:
                cut = ranges.rfind(",", 0, room)
                if cut <= 0:
                    if pieces[-1]:
                        pieces.append([])
                        size = 0
                        continue
                    cut = ranges.find(",")
                    cut = len(ranges) if cut < 0 else cut
                head, ranges = ranges[:cut], ranges[cut + 1 :]
            pieces[-1].append([route, topic, head])
            size += overhead + len(head)
            if not ranges:
                break
            pieces.append([])
            size = 0
        if size >= limit:
            pieces.append([])
            size = 0
    if len(pieces) > 1 and not pieces[-1]:
        pieces.pop()
    return pieces


@functools.lru_cache(maxsize=1 << 18)
def _parse_key(text: str) -> PartitionKey:
    # Cached: the controller parses every partition of every stats report on each cycle.
    route, topic, partition = text.split("/")
    return PartitionKey(route, topic, int(partition))


class WorkerState(enum.StrEnum):
    """A worker's lifecycle, set only by automation (the worker itself and the controller)."""

    JOINING = "joining"  # registered, has not applied its first assignment yet
    ACTIVE = "active"  # copying what it is assigned
    DRAINING = "draining"  # handing its partitions to others before leaving
    LEFT = "left"  # finished draining and deregistered
    DEAD = "dead"  # its ZooKeeper session ended without a clean exit


class SessionState(enum.StrEnum):
    """What the coordination session can be trusted for."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost, session may still exist: do not act on it
    LOST = "lost"  # session expired: ephemeral nodes (leadership, registration) are gone


@dataclass(frozen=True)
class TopicSpec:
    """A topic replicated on a route, with the settings it was added with."""

    route: str
    topic: str
    destination_topic: str
    start: Start = "earliest"
    origin: Origin = "api"
    partitions: int = 0  # source partition count last seen by the controller
    # Partition count when the topic was added: `start` applies to those partitions only.
    # Partitions the source grows later start at their earliest offset, or every record
    # written to them before a worker picks them up would be skipped.
    initial_partitions: int = 0

    def start_of(self, partition: int) -> Start:
        """Where a partition without a checkpoint starts copying."""
        return self.start if partition < self.initial_partitions else "earliest"

    def settings(self) -> tuple[str, str]:
        """The user-chosen settings; two specs with equal settings are the same request."""
        return (self.destination_topic, self.start)

    def to_json(self) -> dict[str, Any]:
        return {
            "destination_topic": self.destination_topic,
            "start": self.start,
            "origin": self.origin,
            "partitions": self.partitions,
            "initial_partitions": self.initial_partitions,
        }

    @classmethod
    def from_json(cls, route: str, topic: str, data: Mapping[str, Any]) -> TopicSpec:
        return cls(
            route=route,
            topic=topic,
            destination_topic=str(data.get("destination_topic") or topic),
            start="latest" if data.get("start") == "latest" else "earliest",
            origin="pattern" if data.get("origin") == "pattern" else "api",
            partitions=int(data.get("partitions", 0)),
            # Specs written before the field existed: their count at the last growth is the
            # best floor known (new partitions above it still start at earliest).
            initial_partitions=int(data.get("initial_partitions", data.get("partitions", 0))),
        )


@dataclass(frozen=True)
class WorkerRecord:
    """A worker as registered in the store.

    `holding` is what the worker is really copying right now; it lags the assignment while a
    hand-over is in progress, and the controller gives a partition to a new owner only once
    no live worker holds it any more (clean hand-over: no duplicates).
    """

    id: str
    state: WorkerState
    live: bool = True
    host: str = ""
    pid: int = 0
    holding: frozenset[PartitionKey] = frozenset()
    drain_requested: bool = False
    pool: str = "default"  # the worker pool it joined; routes may be limited to some pools
    # Not live: when it was last seen live or left (seconds since the epoch), if known.
    gone_since: float | None = None

    def to_json(self, *, legacy_holding: bool = False) -> dict[str, Any]:
        """`held` lists the holding as ranges (small at any scale); `legacy_holding` adds the
        one-string-per-partition list that controllers before the split layout read."""
        data: dict[str, Any] = {
            "state": self.state.value,
            "host": self.host,
            "pid": self.pid,
            "pool": self.pool,
            "held": encode_keys(self.holding),
        }
        if legacy_holding:
            data["holding"] = sorted(str(k) for k in self.holding)
        return data

    @classmethod
    def gone(cls, worker_id: str, known: Mapping[str, Any], *, drain: bool) -> WorkerRecord:
        """A worker with no live session, from its last known record: left if it said so, else dead."""
        state = WorkerState.LEFT if known.get("state") == WorkerState.LEFT.value else WorkerState.DEAD
        return cls(
            id=worker_id,
            state=state,
            live=False,
            host=str(known.get("host", "")),
            pid=int(known.get("pid", 0)),
            drain_requested=drain,
            pool=str(known.get("pool") or "default"),
            # When it left; a dead worker's death is timed by the controller that sees it.
            gone_since=float(known["updated"]) if state is WorkerState.LEFT and "updated" in known else None,
        )

    @classmethod
    def from_json(cls, worker_id: str, data: Mapping[str, Any], *, live: bool, drain: bool) -> WorkerRecord:
        try:
            state = WorkerState(data.get("state", "joining"))
        except ValueError:
            state = WorkerState.JOINING
        return cls(
            id=worker_id,
            state=state,
            live=live,
            host=str(data.get("host", "")),
            pid=int(data.get("pid", 0)),
            holding=(
                decode_keys(data["held"])
                if "held" in data
                else frozenset(PartitionKey.parse(k) for k in data.get("holding", []))
            ),
            drain_requested=drain,
            pool=str(data.get("pool") or "default"),
        )

    @property
    def assignable(self) -> bool:
        """Whether the controller may give this worker partitions."""
        return self.live and not self.drain_requested and self.state in (WorkerState.JOINING, WorkerState.ACTIVE)


@dataclass(frozen=True)
class Assignment:
    """partition -> worker id, as written; `None` marks a partition waiting for its old owner to
    release it. `version` is the store's version of the node, for compare-and-set."""

    owners: Mapping[PartitionKey, str | None] = field(default_factory=dict)
    version: int = -1

    def of_worker(self, worker_id: str) -> frozenset[PartitionKey]:
        return frozenset(k for k, w in self.owners.items() if w == worker_id)


@dataclass(frozen=True)
class LeaderInfo:
    """The controller currently holding leadership."""

    id: str
    api_url: str


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a control cycle decides from, read at one moment."""

    topics: Mapping[tuple[str, str], TopicSpec]
    removed: frozenset[tuple[str, str]]
    workers: Mapping[str, WorkerRecord]
    stats: Mapping[str, Mapping[str, Any]]
    assignment: Assignment
    leader: LeaderInfo | None

    def live_workers(self) -> dict[str, WorkerRecord]:
        return {w.id: w for w in self.workers.values() if w.live}

    def partitions(self) -> set[PartitionKey]:
        keys: set[PartitionKey] = set()
        for spec in self.topics.values():
            keys.update(_topic_keys(spec.route, spec.topic, spec.partitions))
        return keys


@functools.lru_cache(maxsize=1 << 16)
def _topic_keys(route: str, topic: str, count: int) -> tuple[PartitionKey, ...]:
    # Cached: every control cycle lists every partition (100,000 keys built anew took seconds).
    return tuple(PartitionKey(route, topic, p) for p in range(count))
