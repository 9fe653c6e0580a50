"""The sliding window: which moves may start now, given what is already in flight.

Meituan's point: never wait for a whole batch. A move starts as soon as it fits under every cap
(moves in flight overall, data flowing into and out of each broker, copies touching each disk),
so one long-tail partition holds one slot, not the whole run. Pending moves are offered biggest
first, and a move that does not fit is skipped over rather than blocking smaller ones behind it.
A move must also find room on its destination disks (`strait.balancer.headroom`) when the
executor holds capacity limits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from strait.balancer.headroom import Block, Headroom
from strait.balancer.plan import InterBrokerMove, Move


@dataclass(frozen=True, kw_only=True)
class Caps:
    """Concurrency limits. `in_flight` also sets the batch size in batch mode."""

    in_flight: int = 8
    broker_in: int = 2
    broker_out: int = 2
    disk: int = 2

    def __post_init__(self) -> None:
        for name in ("in_flight", "broker_in", "broker_out", "disk"):
            if getattr(self, name) < 1:
                raise ValueError(f"cap {name} must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Footprint:
    """What a move loads while it runs: brokers receiving data, brokers losing a replica, disks copied to or from."""

    brokers_in: tuple[int, ...] = ()
    brokers_out: tuple[int, ...] = ()
    disks: tuple[tuple[int, str], ...] = ()


def footprint(move: Move, source_dirs: dict[int, str] | None = None) -> Footprint:
    """The load of `move`. `source_dirs` (broker -> dir of the replica being removed) adds the
    source disks of an inter-broker move when known."""
    if isinstance(move, InterBrokerMove):
        disks = [(b, d) for b, d in sorted(move.target_dirs.items())]
        disks += [(b, d) for b, d in sorted((source_dirs or {}).items()) if b in move.removing]
        return Footprint(move.adding, move.removing, tuple(disks))
    return Footprint((), (), ((move.broker, move.source_dir), (move.broker, move.target_dir)))


@dataclass
class Window:
    """The moves in flight and the load they put on brokers and disks."""

    caps: Caps
    running: dict[str, Footprint] = field(default_factory=dict)
    _in: Counter[int] = field(default_factory=Counter)
    _out: Counter[int] = field(default_factory=Counter)
    _disk: Counter[tuple[int, str]] = field(default_factory=Counter)
    verdicts: dict[str, Block | None] = field(default_factory=dict)

    def fits(self, fp: Footprint) -> bool:
        if len(self.running) >= self.caps.in_flight:
            return False
        if any(self._in[b] >= self.caps.broker_in for b in fp.brokers_in):
            return False
        if any(self._out[b] >= self.caps.broker_out for b in fp.brokers_out):
            return False
        return all(self._disk[d] < self.caps.disk for d in fp.disks)

    def add(self, move_id: str, fp: Footprint) -> None:
        self.running[move_id] = fp
        self._in.update(fp.brokers_in)
        self._out.update(fp.brokers_out)
        self._disk.update(fp.disks)

    def remove(self, move_id: str) -> None:
        fp = self.running.pop(move_id, None)
        if fp is None:
            return
        self._in.subtract(fp.brokers_in)
        self._out.subtract(fp.brokers_out)
        self._disk.subtract(fp.disks)

    def admit(
        self,
        pending: Iterable[Move],
        busy: set[tuple[str, int]],
        source_dirs: dict[tuple[str, int], dict[int, str]] | None = None,
        room: Headroom | None = None,
    ) -> list[Move]:
        """Moves from `pending` (already in priority order) that fit now; they are added to the window.

        `busy` holds partitions that must not start (a move of ours or another tool's runs on
        them); admitted partitions are added to it, so one partition never has two moves at once.
        With `room`, a move must also fit on its destination disks (see `strait.balancer.headroom`);
        what `room` said of each move it judged is left in `verdicts` (None: it had room).
        """
        started: list[Move] = []
        self.verdicts = {}
        for move in pending:
            if len(self.running) >= self.caps.in_flight:
                break
            if move.key in busy:
                continue
            fp = footprint(move, (source_dirs or {}).get(move.key))
            if not self.fits(fp):
                continue
            if room is not None:
                block = self.verdicts[move.id] = room.blocker(move)
                if block is not None:
                    continue
                room.reserve(move)
            self.add(move.id, fp)
            busy.add(move.key)
            started.append(move)
        return started
