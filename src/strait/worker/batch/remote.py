"""The backlog's batch pipeline in a process of its own, behind the copier's pipeline protocol.

A ``copy: batch`` route drains lagging partitions through its batch pipeline, a Python loop that
keeps a core busy for as long as the backlog lasts. In the worker's process it would share one
interpreter lock with the realtime copy loops, whose records would wait for each hand-over. Run
in a child process, the operating system schedules it like any other process: the realtime loop
keeps its latency and the backlog drains at the speed of an idle core.

:class:`BacklogProcess` is what the copier and its moves see (``add``, ``release``, ``stop``,
``crashed``, and ``share`` for the pace). The child (:mod:`strait.worker.batch.child`) runs a
:class:`~strait.worker.batch.pipeline.BatchPipeline` on partition states of its own and reports
their progress now and then; a relay thread here applies each report to the copier's
:class:`~strait.worker.pipeline.PartitionState` (:mod:`strait.worker.batch.relay`). The worker
keeps committing the checkpoints, from the acknowledged positions the child reported, so a
checkpoint never covers a record the destination has not acknowledged. If the child dies,
:meth:`BacklogProcess.crashed` says so and the worker's handling of a dead pipeline applies; its
partitions resume from their checkpoints elsewhere. If the worker dies, the child's pipe closes
and it exits.

The child is a fresh interpreter (``python -m strait.worker.batch.child``), not a fork: the
worker is multi-threaded (librdkafka's threads, the copier's locks), and a forked copy would
inherit locks held by threads it does not have. Unlike multiprocessing's ``spawn``, it does not
run the worker's main module again (a script embedding a copier needs no ``__main__`` guard)
and imports only what the batch pipeline needs. A socket pair carries pickled commands and
reports (:class:`multiprocessing.connection.Connection`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from strait.config import BatchSharingConfig
from strait.worker.batch.budget import Sharing
from strait.worker.batch.child import Spec
from strait.worker.batch.relay import Command, Progress, RelayedTracker, Report, apply, replay
from strait.worker.origin import OriginRule
from strait.worker.pipeline import PartitionState, PipelineSettings

log = logging.getLogger(__name__)

# How long a stopped child may take beyond its flush timeout before it is killed.
EXIT_GRACE_S = 10.0
# The copier asks every turn whether to hold; the child hears it at least this often, well within
# its strait.worker.batch.child.WORKER_SILENCE_S, and holds fetching when it does not.
KEEPALIVE_S = 0.25


@dataclass
class Slot:
    """One ``add`` of a partition to the child: its state here and what the child said last."""

    state: PartitionState
    last: Progress | None = None
    released: threading.Event | None = None


class BacklogProcess:
    """A batch pipeline run in a child process (see the module's docstring).

    Takes the batch pipeline's keyword arguments; ``sharing`` sets the backlog's pace next to
    realtime partitions (strait.worker.batch.budget) and the child's nice value; ``lanes`` and
    ``origin`` (two-way routes) are the batch pipeline's. Accepts and ignores the record
    pipeline's other keyword arguments.
    """

    def __init__(
        self,
        *,
        name: str,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        group_id: str,
        client_id: str,
        settings: PipelineSettings = PipelineSettings(),
        observer: Any = None,
        sharing: BatchSharingConfig | None = None,
        lanes: int | None = None,
        origin: OriginRule | None = None,
        **_record_options: Any,
    ) -> None:
        self.name = name
        self._observer = observer
        config = sharing or BatchSharingConfig()
        spec = Spec(
            name=name,
            source=dict(source),
            destination=dict(destination),
            group_id=group_id,
            client_id=client_id,
            settings=settings,
            options={"lanes": lanes, "origin": origin},
            observed=observer is not None,
            nice=config.nice,
            log_level=logging.getLogger().getEffectiveLevel(),
        )
        self._spec = spec
        ours, theirs = socket.socketpair()
        self._conn = Connection(ours.detach())
        self._child_fd: int | None = theirs.detach()
        self._process: subprocess.Popen[bytes] | None = None
        self._relay = threading.Thread(target=self._run_relay, name=f"strait-relay-{client_id}-{name}", daemon=True)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()  # the slots: the copier's thread adds, the relay's applies
        self._slots: dict[int, Slot] = {}
        self._next_slot = 0
        self._fetched = 0
        self._stopping = threading.Event()
        self._ended = threading.Event()  # the child is gone (stopped, or died)
        from strait.worker.copier import REALTIME, REALTIME_BATCH

        realtime_latency = getattr(observer, "end_to_end_of", None)
        by_topic = getattr(observer, "end_to_end_by_topic", None)
        self._sharing = Sharing(
            config,
            latency=None if realtime_latency is None else partial(realtime_latency, REALTIME, REALTIME_BATCH),
            latency_by_topic=None if by_topic is None else partial(by_topic, REALTIME, REALTIME_BATCH),
            fetched=lambda: self._fetched,
        )
        self._pace: float | None = None  # the rate the child was last given
        self._hold_sent: tuple[bool, float] | None = None  # the last hold command and when

    @property
    def pid(self) -> int | None:
        """The child's process id once started."""
        return None if self._process is None else self._process.pid

    # -- the Pipeline protocol (any thread) ----------------------------------------------------

    def start(self) -> None:
        """Start the child and the relay."""
        fd = self._child_fd
        assert fd is not None
        # The worker's import path, as multiprocessing gives its children (a worker run from a
        # source tree finds the same modules).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "strait.worker.batch.child", str(fd)],
            pass_fds=(fd,),
            env=env,
            stdin=subprocess.DEVNULL,
        )
        self._close_child_end()  # the child's end lives in the child: its death closes the pipe
        self._send(self._spec)
        self._relay.start()

    def _close_child_end(self) -> None:
        fd, self._child_fd = self._child_fd, None
        if fd is not None:
            os.close(fd)

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        """Start copying ``state``'s partition from exactly ``offset`` in the child."""
        if self._stopping.is_set() or self._ended.is_set():
            state.error = f"pipeline {self.name} is not running"
            return
        state.tracker = RelayedTracker(offset)
        state.pipeline = self.name
        state.rewind_at = None
        state.mode = "batch"
        with self._lock:
            slot = self._next_slot
            self._next_slot += 1
            self._slots[slot] = Slot(state)
        self._send(("add", slot, state.task, offset))

    def release(self, state: PartitionState) -> threading.Event:
        """Stop fetching the partition; the event is set once the child reported it released
        with nothing in flight (at once if the child is gone: nothing will answer)."""
        done = threading.Event()
        with self._lock:
            found = next((n for n, s in self._slots.items() if s.state is state and s.released is None), None)
            if found is not None and not self._ended.is_set():
                self._slots[found].released = done
        if found is None or self._ended.is_set():
            state.fetching = False
            done.set()
            return done
        self._send(("release", found))
        return done

    def hold(self, on: bool) -> None:
        """Fetch nothing new while ``on``: the child's pipeline holds (see Pipeline.hold).

        The copier asks every turn; the child hears it on a change and at least every
        KEEPALIVE_S, and holds on its own when it hears nothing (a frozen or starved worker)."""
        now = time.monotonic()
        last = self._hold_sent
        if last is not None and last[0] == on and now - last[1] < KEEPALIVE_S:
            return
        self._hold_sent = (on, now)
        self._send(("hold", on))

    def abandon(self, state: PartitionState) -> threading.Event | None:
        """As a release nobody waits for: the backlog copies at least once."""
        self.release(state)
        return None

    def stop(self, timeout_s: float) -> None:
        """Stop the child; it waits up to ``timeout_s`` for what is in flight to be acknowledged,
        and its last report is applied before this returns."""
        self._stopping.set()
        process = self._process
        if process is None:
            self._close_child_end()
            self._conn.close()
            return
        self._send(("stop", timeout_s))
        self._relay.join(timeout_s + EXIT_GRACE_S)
        try:
            process.wait(EXIT_GRACE_S if self._relay.is_alive() else 1.0)
        except subprocess.TimeoutExpired:
            log.warning("pipeline %s: backlog process did not stop; killing it", self.name)
            process.kill()
            process.wait(5)
        self._conn.close()

    def crashed(self) -> bool:
        """The child ended without being asked to stop."""
        return self._ended.is_set() and not self._stopping.is_set()

    def share(
        self,
        realtime: bool,
        *,
        settled: bool = False,
        arriving: frozenset[str] = frozenset(),
        leaving: bool = False,
    ) -> None:
        """The worker's realtime pipelines hold partitions (True) or none: while they do, the
        child's fetches are paced (strait.worker.batch.budget.Sharing). ``settled``: the realtime
        partitions have every record they know of acknowledged; ``arriving``: the destination
        topics of those that came from a backlog lately and are finishing it; ``leaving``: a
        realtime partition fell behind by a backlog and is moving out."""
        self._sharing.share(realtime, settled=settled, arriving=arriving, leaving=leaving)
        rate = self._sharing.rate
        if rate != self._pace:
            self._pace = rate
            self._send(("pace", rate))

    # -- the relay (its own thread) ------------------------------------------------------------

    def _send(self, command: Command) -> None:
        try:
            with self._send_lock:
                self._conn.send(command)
        except (OSError, ValueError):
            # The child is gone (the relay marks it); a closed pipe raises ValueError.
            pass

    def _run_relay(self) -> None:
        try:
            while True:
                try:
                    report: Report = self._conn.recv()
                except (EOFError, OSError):
                    break
                self._take(report)
                if report.final:
                    break
        except Exception:
            log.exception("pipeline %s: relay failed", self.name)
            if self._process is not None:
                self._process.kill()
        finally:
            self._end()

    def _take(self, report: Report) -> None:
        with self._lock:
            for progress in report.partitions:
                slot = self._slots.get(progress.slot)
                if slot is None:
                    continue
                apply(progress, slot.state, slot.last)
                slot.last = progress
                if progress.released:
                    del self._slots[progress.slot]
                    if slot.released is not None:
                        slot.released.set()
            self._fetched = report.fetched_bytes
        if self._observer is not None and report.events:
            replay(report.events, self._observer)

    def _end(self) -> None:
        """The child is gone: its partitions copy nothing more here; a release waiting for it
        ends now (the child's last report was applied)."""
        code: int | None = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self._process.wait(1.0)
        with self._lock:
            self._ended.set()
            slots, self._slots = list(self._slots.values()), {}
        crashed = not self._stopping.is_set()
        if crashed:
            log.error("pipeline %s: backlog process ended (exit code %s)", self.name, code)
        for slot in slots:
            if crashed:
                slot.state.error = slot.state.error or (
                    f"pipeline {self.name} crashed: backlog process exit code {code}"
                )
            slot.state.fetching = False
            if slot.released is not None:
                slot.released.set()
