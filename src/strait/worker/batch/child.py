"""The backlog process: a batch pipeline of its own, driven over a pipe by the worker
(:mod:`strait.worker.batch.remote`).

It runs a :class:`~strait.worker.batch.pipeline.BatchPipeline` on partition states of its own,
serves the worker's commands (add, release, pace, stop) and reports every partition's progress
every REPORT_INTERVAL_S while anything changed (:mod:`strait.worker.batch.relay`). It commits
nothing and talks to no coordination store: the worker holds the lease and commits the
checkpoints its reports allow. It exits when the worker goes away (the pipe closes, or it is
given to another parent), and never outlives it by more than one interval. While the worker says
nothing (frozen by SIGSTOP or a paused VM, or starved), nothing it could commit: the process holds
fetching until the worker speaks again (:class:`WorkerWord`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from strait.worker.batch.relay import RecordingObserver, Report, RunDeltas, new_state, progress
from strait.worker.pipeline import PartitionState, PipelineSettings

log = logging.getLogger("strait.worker.batch.child")  # (run as __main__)

# How often progress goes to the worker: each report moves the checkpoint the worker may commit
# (strait.worker.commits) and the lag its moves judge; small next to both, large next to one
# loop turn of the batch pipeline.
REPORT_INTERVAL_S = 0.01

# The worker's copier speaks at least every strait.worker.batch.remote.KEEPALIVE_S while it runs.
# Silent this long, it is frozen or starved: its copier neither commits the checkpoints these
# reports allow nor holds fetching when its lease lapses, so whatever is copied meanwhile would
# be copied again by the next owner (and a frozen worker's partitions may have one already).
WORKER_SILENCE_S = 2.0


class WorkerWord:
    """Whether the backlog process may fetch: the worker did not ask it to hold, and was heard
    from within ``silence_s`` (pure: the caller passes the time)."""

    def __init__(self, now: float, silence_s: float = WORKER_SILENCE_S) -> None:
        self._heard = now
        self._silence_s = silence_s
        self.asked = False  # the worker's last hold command
        self.silent = False  # as last judged by held()

    def heard(self, now: float, *, hold: bool | None = None) -> None:
        """A command came from the worker (``hold``: it was a hold command saying so)."""
        self._heard = now
        if hold is not None:
            self.asked = hold

    def held(self, now: float) -> bool:
        self.silent = now - self._heard > self._silence_s
        return self.asked or self.silent


@dataclass(frozen=True)
class Spec:
    """What the backlog process needs to build its pipeline (picklable)."""

    name: str
    source: dict[str, Any]
    destination: dict[str, Any]
    group_id: str
    client_id: str
    settings: PipelineSettings
    options: dict[str, Any] = field(default_factory=dict)  # BatchPipeline's other keyword arguments
    observed: bool = True  # the worker has an observer: the stage figures travel with the reports
    nice: int = 0  # added to the process's nice value: the realtime copy loop comes first
    log_level: int = logging.INFO


@dataclass
class Held:
    """One partition the backlog process copies."""

    state: PartitionState
    runs: RunDeltas
    released: threading.Event | None = None
    seen: tuple[object, ...] | None = None  # signature() at the last report


def main(fd: int) -> None:
    """The backlog process's entry point: ``fd`` is its end of the socket pair to the worker,
    whose first message is the :class:`Spec`."""
    from strait.logformat import configure, from_environment

    conn = Connection(fd)
    spec: Spec = conn.recv()

    configure(spec.log_level, from_environment())
    if spec.nice > 0:
        try:
            os.nice(spec.nice)
        except OSError as exc:
            log.info("backlog process keeps its priority (%s)", exc)
    if not Backlog(conn, spec).serve():
        sys.exit(1)


class Backlog:
    """The command loop around one batch pipeline."""

    def __init__(self, conn: Connection, spec: Spec) -> None:
        from strait.worker.batch.pipeline import BatchPipeline

        self._conn = conn
        self._observer = RecordingObserver()
        self._pipeline = BatchPipeline(
            name=spec.name,
            source=spec.source,
            destination=spec.destination,
            group_id=spec.group_id,
            client_id=spec.client_id,
            settings=spec.settings,
            observer=self._observer if spec.observed else None,
            **spec.options,
        )
        self._held: dict[int, Held] = {}
        self._parent = os.getppid()
        self._word = WorkerWord(time.monotonic())
        self._holding = False

    def serve(self) -> bool:
        """Copy until told to stop (True), or until the worker is gone or the pipeline died."""
        self._pipeline.start()
        flush_s = 0.0
        try:
            while True:
                stop = self._commands()
                if stop is not None:
                    flush_s = stop
                    break
                if os.getppid() != self._parent:
                    log.warning("backlog process: the worker is gone; stopping")
                    return False
                self._hold()
                self._report()
                if self._pipeline.crashed():
                    return False  # (the pipeline logged why; the worker sees the process end)
        except (EOFError, OSError):
            log.warning("backlog process: the worker is gone; stopping")
            return False
        self._pipeline.stop(flush_s)
        self._report(final=True)
        return True

    def _commands(self) -> float | None:
        """Serve what the worker asked since the last turn (waiting up to one interval for the
        first); a stop's flush timeout once asked to stop."""
        conn = self._conn
        if not conn.poll(REPORT_INTERVAL_S):
            return None
        while conn.poll():
            command = conn.recv()
            kind = command[0]
            self._word.heard(time.monotonic(), hold=bool(command[1]) if kind == "hold" else None)
            if kind == "add":
                _, slot, task, offset = command
                state = new_state(task)
                self._held[slot] = Held(state, RunDeltas())
                self._pipeline.add(state, offset)
            elif kind == "release":
                held = self._held.get(command[1])
                if held is not None and held.released is None:
                    held.released = self._pipeline.release(held.state)
            elif kind == "pace":
                self._pipeline.set_pace(command[1])
            elif kind == "stop":
                return float(command[1])
        return None

    def _hold(self) -> None:
        held = self._word.held(time.monotonic())
        if held == self._holding:
            return
        self._holding = held
        if held and self._word.silent:
            log.warning(
                "backlog process: no word from the worker for %.1fs; fetching held until it speaks", WORKER_SILENCE_S
            )
        elif not held:
            log.info("backlog process: fetching resumes")
        self._pipeline.hold(held)

    def _report(self, *, final: bool = False) -> None:
        partitions = []
        for slot, held in list(self._held.items()):
            # Released and nothing in flight: checked before the state is read, so this
            # report is the partition's last word.
            done = final or (held.released is not None and held.released.is_set())
            seen = signature(held.state)
            if not done and seen == held.seen:
                continue  # (most turns, for most partitions: nothing to build or send)
            held.seen = seen
            partitions.append(progress(slot, held.state, held.runs.new(held.state.runs.take()), released=done))
            if done:
                del self._held[slot]
        events = self._observer.take()
        if partitions or events or final:
            self._conn.send(Report(tuple(partitions), events, fetched_bytes=self._pipeline.fetched_bytes, final=final))


def signature(state: PartitionState) -> tuple[object, ...]:
    """What changes whenever anything a report carries does (the runs change with ``records``)."""
    tracker = state.tracker
    return (
        None if tracker is None else (tracker.position, tracker.next_offset, tracker.in_flight),
        state.records,
        state.source_end,
        state.fetching,
        state.mode,
        state.error,
        state.waiting,
        state.rewinds,
        state.batches_fetched,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
