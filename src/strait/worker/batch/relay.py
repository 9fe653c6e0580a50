"""What the backlog process and the worker tell each other, and how a report lands (no I/O).

The backlog pipeline (:mod:`strait.worker.batch.remote`) copies its partitions in a process of
its own; the worker keeps the partitions' :class:`~strait.worker.pipeline.PartitionState`, which
the copier reads and commits checkpoints from. The backlog process reports each partition's
progress as a :class:`Progress` now and then (not per record) and the worker applies it
(:func:`apply`): the acknowledged position moves only forward, so a checkpoint the worker commits
never covers a record the destination has not acknowledged. The stage figures the batch loop
reports to its observer travel as :data:`Event` tuples (:class:`RecordingObserver`) and are
replayed on the route's observer (:func:`replay`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strait.offsetmap.runs import Run
from strait.worker.checkpoint import AckTracker
from strait.worker.pipeline import PartitionState
from strait.worker.startup import ASSIGNED, finish, mark
from strait.worker.task import PartitionTask

# Parent to child: the child.Spec first, then ("add", slot, task, offset), ("release", slot), ("pace", bytes/s or None),
# ("stop", flush timeout). Child to parent: Report.
Command = Any
# An observer call: ("fetched", pipeline, wait_s), ("queued", pipeline, seconds, count),
# ("acked", pipeline, topic, partition, ack_s, timestamp_ms, count), ("gap", kind),
# ("stats", role, payload).
Event = tuple[Any, ...]


@dataclass(frozen=True)
class Progress:
    """One partition as the backlog process last saw it; ``slot`` names one ``add`` of it.

    ``runs`` are the offset-map runs acknowledged since the previous report (new stretches
    only, see :class:`RunDeltas`); ``released``: the partition was released and nothing of it
    is in flight, this is its last report."""

    slot: int
    position: int
    next_offset: int
    in_flight: int
    source_end: int | None
    records: int
    bytes: int
    last_progress: float | None
    rewinds: int
    mode: str
    mode_reason: str
    error: str | None
    waiting: str | None
    fetching: bool
    batches_fetched: int
    batch_records_fetched: int
    batch_bytes_fetched: int
    batches_merged_fetched: int
    runs: tuple[Run, ...] = ()
    released: bool = False


@dataclass(frozen=True)
class Report:
    """What the backlog process sends now and then: its partitions' progress, the observer
    calls since the last report, and the source bytes it fetched so far (the latency pace)."""

    partitions: tuple[Progress, ...]
    events: tuple[Event, ...]
    fetched_bytes: int
    final: bool = False  # the pipeline stopped: nothing follows


class RelayedTracker(AckTracker):
    """The worker's copy of an :class:`AckTracker` kept in the backlog process: its position,
    fetch position and records in flight as last reported. The position never moves back."""

    __slots__ = ("_relayed_in_flight",)

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self._relayed_in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._relayed_in_flight

    def relay(self, position: int, next_offset: int, in_flight: int) -> None:
        """Take what the backlog process reported."""
        if position > self._position:
            self._position = position
        self._last_sent = max(self._last_sent, next_offset - 1)
        self._relayed_in_flight = in_flight


class RunDeltas:
    """Turns a :class:`~strait.offsetmap.runs.RunRecorder`'s ``take`` (closed runs, and the open
    one again whenever it grew) into new stretches only, so the worker's recorder, fed them with
    ``note_many``, ends up with the same runs."""

    def __init__(self) -> None:
        self._open: Run | None = None  # the last run taken, as taken

    def new(self, taken: list[Run]) -> list[Run]:
        fresh: list[Run] = []
        for run in taken:
            known = self._open
            if known is not None and (run.source, run.destination) == (known.source, known.destination):
                if run.count > known.count:
                    fresh.append(Run(run.source + known.count, run.destination + known.count, run.count - known.count))
            else:
                fresh.append(run)
            self._open = run
        return fresh


def progress(slot: int, state: PartitionState, runs: list[Run], *, released: bool = False) -> Progress:
    """``state`` (in the backlog process) as a report; ``runs`` from its :class:`RunDeltas`."""
    tracker = state.tracker
    position = tracker.position if tracker is not None else 0
    return Progress(
        slot=slot,
        position=position,
        next_offset=tracker.next_offset if tracker is not None else position,
        in_flight=tracker.in_flight if tracker is not None else 0,
        source_end=state.source_end,
        records=state.records,
        bytes=state.bytes,
        last_progress=state.last_progress,
        rewinds=state.rewinds,
        mode=state.mode,
        mode_reason=state.mode_reason,
        error=state.error,
        waiting=state.waiting,
        fetching=state.fetching,
        batches_fetched=state.batches_fetched,
        batch_records_fetched=state.batch_records_fetched,
        batch_bytes_fetched=state.batch_bytes_fetched,
        batches_merged_fetched=state.batches_merged_fetched,
        runs=tuple(runs),
        released=released,
    )


def apply(report: Progress, state: PartitionState, base: Progress | None) -> None:
    """Apply one partition's report to the worker's ``state`` (whose tracker is a
    :class:`RelayedTracker`). ``base`` is the partition's previous report of this slot: counts
    are added as differences, so counts of the partition's earlier pipelines stay. The mode is
    taken only when the backlog process handed the partition to record mode: while it copies,
    the copier owns the reason."""
    tracker = state.tracker
    if isinstance(tracker, RelayedTracker):
        tracker.relay(report.position, report.next_offset, report.in_flight)
    if report.source_end is not None and report.source_end > (state.source_end or 0):
        state.source_end = report.source_end
    before = base
    state.records += report.records - (before.records if before else 0)
    state.bytes += report.bytes - (before.bytes if before else 0)
    state.rewinds += report.rewinds - (before.rewinds if before else 0)
    if report.last_progress is not None:
        state.last_progress = report.last_progress
    state.batches_fetched += report.batches_fetched - (before.batches_fetched if before else 0)
    state.batch_records_fetched += report.batch_records_fetched - (before.batch_records_fetched if before else 0)
    state.batch_bytes_fetched += report.batch_bytes_fetched - (before.batch_bytes_fetched if before else 0)
    state.batches_merged_fetched += report.batches_merged_fetched - (before.batches_merged_fetched if before else 0)
    for run in report.runs:
        state.runs.note_many(run.source, run.destination, run.count)
    if report.mode == "record" and state.mode != "record":
        state.mode, state.mode_reason = "record", report.mode_reason
    if report.error is not None and state.error is None:
        state.error = report.error
    state.waiting = report.waiting
    state.fetching = report.fetching and not report.released
    # The start trace stays here: its steps up to the hand-over are the worker's.
    if report.fetching:
        mark(state, ASSIGNED)
    if report.records:
        finish(state)


class RecordingObserver:
    """The backlog process's stand-in for the route's observer: it keeps the calls the batch loop
    makes (any thread) until :meth:`take` ships them in a report."""

    def __init__(self) -> None:
        self._events: deque[Event] = deque()

    def fetched(self, pipeline: str, wait_s: float) -> None:
        self._events.append(("fetched", pipeline, wait_s))

    def queued(self, pipeline: str, seconds: float, count: int = 1) -> None:
        self._events.append(("queued", pipeline, seconds, count))

    def acked(
        self, pipeline: str, topic: str, partition: int, ack_s: float | None, timestamp_ms: int, count: int = 1
    ) -> None:
        self._events.append(("acked", pipeline, topic, partition, ack_s, timestamp_ms, count))

    def offset_gap(self, kind: str) -> None:
        self._events.append(("gap", kind))

    def client_stats(self, role: str) -> Callable[[str], None]:
        def receive(payload: str) -> None:
            self._events.append(("stats", role, payload))

        return receive

    def take(self) -> tuple[Event, ...]:
        """The calls since the last take, oldest first."""
        taken: list[Event] = []
        events = self._events
        while events:
            taken.append(events.popleft())
        return tuple(taken)


def replay(events: tuple[Event, ...], observer: Any) -> None:
    """Make the calls the backlog process's :class:`RecordingObserver` kept on ``observer``."""
    receivers: dict[str, Callable[[str], None]] = {}
    for event in events:
        kind = event[0]
        if kind == "fetched":
            observer.fetched(event[1], event[2])
        elif kind == "queued":
            observer.queued(event[1], event[2], count=event[3])
        elif kind == "acked":
            observer.acked(event[1], event[2], event[3], event[4], event[5], count=event[6])
        elif kind == "gap":
            observer.offset_gap(event[1])
        elif kind == "stats":
            receive = receivers.get(event[1])
            if receive is None:
                receive = receivers[event[1]] = observer.client_stats(event[1])
            receive(event[2])


def new_state(task: PartitionTask) -> PartitionState:
    """The backlog process's own state of a partition it is given (no start trace: the worker
    keeps that one)."""
    state = PartitionState(task)
    state.trace = None
    return state
