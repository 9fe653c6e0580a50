"""What an execution reports: the states of its moves, its options, and progress snapshots.

Plain data, shared by the executor (which writes progress to the state topic), `status`, the
REST layer and the progress bar; nothing here talks to Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from strait.balancer.plan import Move, Plan
from strait.balancer.state import Execution
from strait.balancer.window import Caps

PENDING, RUNNING, PLACING, DONE, FAILED, CANCELLED, SKIPPED = (
    "pending",
    "running",
    "placing",
    "done",
    "failed",
    "cancelled",
    "skipped",
)
ACTIVE = (RUNNING, PLACING)
FINAL = (DONE, FAILED, CANCELLED, SKIPPED)


@dataclass(frozen=True, kw_only=True)
class Options:
    """How to run an execution."""

    mode: str = "pipeline"
    caps: Caps = field(default_factory=Caps)
    throttle: int | None = None
    poll_interval: float = 0.5
    heartbeat_interval: float = 2.0
    elect_leaders: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("pipeline", "batch"):
            raise ValueError(f"mode must be 'pipeline' or 'batch', got {self.mode!r}")
        if self.throttle is not None and self.throttle <= 0:
            raise ValueError(f"throttle must be a positive rate in bytes/s, got {self.throttle}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Options:
        values = dict(data)
        values["caps"] = Caps(**dict(values.get("caps") or {}))
        return cls(**values)


@dataclass
class Snapshot:
    """Progress at one moment, for progress bars, `status` and the REST layer."""

    execution_id: str
    status: str
    total: int
    done: int
    failed: int
    in_flight: int
    pending: int
    # Pending moves held back because a destination disk has no room for them yet.
    waiting: int
    bytes_total: int
    bytes_done: int
    moves: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_of(execution: Execution) -> Snapshot:
    """Progress of a stored execution, read from the state topic alone."""
    plan = Plan.from_dict(execution.plan)
    states = dict(execution.progress.get("moves") or {})
    return make_snapshot(execution.id, execution.status, plan.moves, states)


def make_snapshot(
    execution_id: str, status: str, moves: Iterable[Move], states: Mapping[str, Mapping[str, Any]]
) -> Snapshot:
    total = done = failed = in_flight = pending = waiting = 0
    bytes_total = bytes_done = 0
    for m in moves:
        total += 1
        bytes_total += m.bytes
        state = states.get(m.id, {}).get("state", PENDING)
        if state == DONE:
            done += 1
            bytes_done += m.bytes
        elif state == FAILED:
            failed += 1
        elif state in ACTIVE:
            in_flight += 1
        elif state == PENDING:
            pending += 1
            waiting += 1 if states.get(m.id, {}).get("waiting") else 0
    return Snapshot(
        execution_id,
        status,
        total,
        done,
        failed,
        in_flight,
        pending,
        waiting,
        bytes_total,
        bytes_done,
        {k: dict(v) for k, v in states.items()},
    )
