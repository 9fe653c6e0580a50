"""Room on the destination disks: the capacity limit held while moves run, not only at the end.

A plan only promises that every disk is within its limit once all moves are done. While they
run, a disk holds its old data, the partial copies coming in, and (until a move out of it ends)
the data leaving too. So a move may start only if every disk it writes to can hold, within its
limit (capacity x `capacity_limit`):

    the bytes on the disk now (partial copies included)
  + what the moves already in flight to it still have to copy
  + the partition this move copies there.

Otherwise the move waits (the reason is recorded and shown by `status`) while others that fit
go ahead; moves out of the disk, when they end, make the room. Pure: the executor reads the
usage (`Gateway.disk_usage`) and passes it in.

Conservative where it cannot be exact: a move in flight counts its full size, though the bytes
it has copied are in "used" already (usage is read at most every few seconds, so subtracting
them could count a copy's newest bytes nowhere); a new replica whose dir the plan does not name
may land on any dir of its broker, so it must fit on each. Growth of the partitions themselves
while they move is left to the limit's margin.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel
from strait.balancer.plan import InterBrokerMove, Move, Plan, disk_key
from strait.balancer.units import human

DiskKey = tuple[int, str]


@dataclass(frozen=True)
class Block:
    """Why a move cannot start now: the first disk it writes to that has no room for it."""

    disk: DiskKey
    used: int
    incoming: int
    size: int
    limit: int

    def __str__(self) -> str:
        broker, path = self.disk
        return (
            f"no room yet on broker {broker} dir {path}: {human(self.used)} there + {human(self.incoming)} "
            f"moving in + {human(self.size)} for this move would pass its limit {human(self.limit)}"
        )


def limits_of(plan: Plan) -> dict[DiskKey, int]:
    """Bytes each disk may hold while the plan runs: its capacity (from the plan) x `capacity_limit`."""
    fraction = float(plan.goals.get("capacity_limit", Goals().capacity_limit))
    limits: dict[DiskKey, int] = {}
    for key, capacity in plan.capacities.items():
        broker, _, path = key.partition(":")
        limits[(int(broker), path)] = int(capacity * fraction)
    return limits


def with_capacities(plan: Plan, model: ClusterModel) -> dict[str, int]:
    """The capacities to run `plan` with: configured now (CLI or config file), else those the plan was
    made with, else what the brokers report."""
    sizes = dict(plan.capacities)
    for d in model.all_dirs():
        key = disk_key(d.broker, d.path)
        if d.configured or key not in sizes:
            sizes[key] = d.capacity
    return sizes


def landing(move: Move, dirs_of: Mapping[int, Iterable[str]]) -> list[tuple[DiskKey, int]]:
    """The disks `move` writes to, with the bytes each receives."""
    if not isinstance(move, InterBrokerMove):
        return [((move.broker, move.target_dir), move.bytes)]
    adding = move.adding
    per_replica = move.bytes // len(adding) if adding else 0
    out: list[tuple[DiskKey, int]] = []
    for b in adding:
        chosen = move.target_dirs.get(b)
        paths = [chosen] if chosen else sorted(dirs_of.get(b, ()))
        out += [((b, p), per_replica) for p in paths]
    return out


def destination_brokers(moves: Iterable[Move], limits: Mapping[DiskKey, int]) -> set[int]:
    """Brokers whose disk usage is needed to judge `moves` (those with a limit)."""
    dirs_of: dict[int, list[str]] = {}
    for b, path in limits:
        dirs_of.setdefault(b, []).append(path)
    return {disk[0] for m in moves for disk, _ in landing(m, dirs_of) if disk in limits}


@dataclass
class Headroom:
    """The room left on each disk with a known limit, given its usage and the moves in flight."""

    limits: Mapping[DiskKey, int]
    used: Mapping[DiskKey, int]
    incoming: Counter[DiskKey] = field(default_factory=Counter)
    dirs_of: dict[int, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for b, path in self.limits:
            self.dirs_of.setdefault(b, []).append(path)

    @classmethod
    def build(cls, limits: Mapping[DiskKey, int], used: Mapping[DiskKey, int], in_flight: Iterable[Move]) -> Headroom:
        """`in_flight`: the moves still copying."""
        room = cls(limits, used)
        for move in in_flight:
            room.reserve(move)
        return room

    def reserve(self, move: Move) -> None:
        for disk, size in landing(move, self.dirs_of):
            self.incoming[disk] += size

    def blocker(self, move: Move) -> Block | None:
        """The first disk `move` would take past its limit, or None if it may start now."""
        for disk, size in landing(move, self.dirs_of):
            limit = self.limits.get(disk)
            if limit is None:
                continue  # a disk the plan has no size for: nothing to hold
            used = self.used.get(disk, 0)
            if used + self.incoming[disk] + size > limit:
                return Block(disk, used, self.incoming[disk], size, limit)
        return None


class RoomKeeper:
    """Hands the executor's window a `Headroom` each tick, reading disk usage only when needed.

    `read(brokers)` returns the bytes on each dir of those brokers (the executor passes
    `Gateway.disk_usage`). Usage is read again after `interval` seconds, and whenever a move has
    ended since the last read (its bytes moved from "incoming" into "used"); in between, the moves
    started since the read are covered by their reservations.
    """

    def __init__(
        self,
        plan: Plan,
        read: Callable[[set[int]], Mapping[DiskKey, int]],
        clock: Callable[[], float],
        interval: float,
    ) -> None:
        self.limits = limits_of(plan)
        self.brokers = destination_brokers(plan.moves, self.limits)
        self.read = read
        self.clock = clock
        self.interval = interval
        self.used: dict[DiskKey, int] | None = None
        self.read_at = 0.0

    def moved(self) -> None:
        """A move ended: read usage afresh before judging the next one."""
        self.used = None

    def room(self, in_flight: Iterable[Move]) -> Headroom | None:
        """The room now, or None when the plan holds no limits on the disks it writes to."""
        if not self.brokers:
            return None
        if self.used is None or self.clock() - self.read_at >= self.interval:
            self.used = dict(self.read(self.brokers))
            self.read_at = self.clock()
        return Headroom.build(self.limits, self.used, in_flight)
