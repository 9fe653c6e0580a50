"""Checkpoint commits on a thread of their own, and when a copier commits.

A commit is a round trip to the route group's coordinator on the source. librdkafka's
synchronous commit has no deadline: while that coordinator moves (its broker killed, its log
still loading) the call waits. On the copier's control thread the wait held up everything else
the thread does: starts, revokes, holds, moves. Here the control thread hands over what is due
and goes on; a :class:`Committer` sends one request at a time on its own thread, with the newest
checkpoint of each partition in it (a later hand-over replaces an earlier one still waiting and
never lowers it), and checks the lease right before each request, since a worker may have lost
its partitions between the hand-over and the request.

When to commit is :func:`commit_due`: once a partition's acknowledged progress since its last
commit reaches a batch's worth of records, or once the commit interval passed, whichever comes
first, and never while a request is still out. What a fault makes a successor copy again is
then what was acknowledged since the last commit (at most about a batch or an interval of the
partition's traffic) plus what was in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from strait.worker.pipeline import PartitionState
from strait.worker.source_checkpoints import CheckpointStore
from strait.worker.task import PartitionTask

log = logging.getLogger(__name__)

# How long a partition's revoke waits for its final commit before it lets the partition go at
# the checkpoint committed before (the next owner copies the difference again; a commit that
# lands later covers only acknowledged records, so it cannot lose any).
FINAL_COMMIT_TIMEOUT_S = 15.0
# A request out this long is reported (once): acknowledged progress is piling up uncommitted.
COMMIT_OVERDUE_S = 30.0


def commit_due(
    now: float,
    next_commit: float,
    progress: Iterable[int],
    *,
    after_records: int,
    busy: bool,
) -> bool:
    """Whether the copier should commit now.

    ``progress`` is, per partition, how far its checkpoint moved past its last commit;
    ``next_commit`` is when the interval since the last commit ends; ``busy`` says a request is
    still out or waiting (what is acknowledged meanwhile goes into the next one).
    """
    if busy:
        return False
    return now >= next_commit or any(p >= after_records for p in progress)


@dataclass
class Ticket:
    """One hand-over of checkpoints: done once a request that covers them was answered (or
    refused for want of a lease); ``failed`` lists the partitions not committed by it."""

    offsets: dict[PartitionTask, int]
    created: float
    done: threading.Event = field(default_factory=threading.Event)
    failed: set[PartitionTask] = field(default_factory=set)

    def settled(self, now: float, timeout_s: float = FINAL_COMMIT_TIMEOUT_S) -> bool:
        """Answered, or waited on for longer than ``timeout_s``."""
        return self.done.is_set() or now - self.created >= timeout_s


Committed = Callable[[list[tuple[PartitionState, int]], float], None]


class Committer:
    """Sends a copier's checkpoint commits, one request at a time, on its own thread.

    ``on_committed(committed, seconds)`` runs on that thread after each request, with the
    partitions (state, offset) it committed and how long it took.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        route: str,
        lease: Callable[[], bool],
        on_committed: Committed,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._route = route
        self._lease = lease
        self._on_committed = on_committed
        self._clock = clock
        self._cond = threading.Condition()
        # Waiting to be sent: the newest offset (and its state) per partition, and the tickets
        # the next request answers.
        self._pending: dict[PartitionTask, tuple[PartitionState, int]] = {}
        self._tickets: list[Ticket] = []
        self._sending_since: float | None = None
        self._reported_since: float | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    def submit(self, due: Iterable[tuple[PartitionState, int]]) -> Ticket:
        """Hand checkpoints over for the next request; returns at once."""
        due = list(due)
        with self._cond:
            ticket = Ticket({state.task: offset for state, offset in due}, self._clock())
            for state, offset in due:
                earlier = self._pending.get(state.task)
                if earlier is None or earlier[0] is not state or earlier[1] <= offset:
                    self._pending[state.task] = (state, offset)
            self._tickets.append(ticket)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"strait-commits-{self._route}", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return ticket

    def busy(self) -> bool:
        """A request is out, or checkpoints wait for the next one."""
        with self._cond:
            return self._sending_since is not None or bool(self._tickets)

    def sending_for(self) -> float | None:
        """How long the request now out has been waiting for its answer (None: none is out)."""
        since = self._sending_since
        return None if since is None else self._clock() - since

    def report_overdue(self, after_s: float = COMMIT_OVERDUE_S) -> None:
        """Log, once per request, a request out for longer than ``after_s``."""
        since = self._sending_since
        if since is None or since == self._reported_since or self._clock() - since < after_s:
            return
        self._reported_since = since
        log.warning(
            "copier %s: a checkpoint commit has waited %.0fs for the group coordinator; acknowledged "
            "progress stays uncommitted until it answers",
            self._route,
            self._clock() - since,
        )

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until everything handed over so far was answered; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._sending_since is not None or self._tickets:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def stop(self, timeout_s: float) -> bool:
        """Send what is waiting, then stop; False if a request was still out after ``timeout_s``
        (its thread is left to finish or die with the process)."""
        idle = self.wait_idle(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and idle:
            thread.join(max(0.1, timeout_s))
        return idle and (thread is None or not thread.is_alive())

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._tickets and not self._stopping:
                    self._cond.wait()
                if not self._tickets:
                    return
                batch, tickets = self._pending, self._tickets
                self._pending, self._tickets = {}, []
                self._sending_since = self._clock()
            failed: set[PartitionTask] = set()
            try:
                failed = self._send(batch)
            except Exception:  # an answer must reach every ticket, whatever went wrong
                log.exception("copier %s: committing checkpoints failed", self._route)
                failed = set(batch)
            finally:
                with self._cond:
                    self._sending_since = None
                    for ticket in tickets:
                        ticket.failed = {t for t in ticket.offsets if t in failed}
                        ticket.done.set()
                    self._cond.notify_all()

    def _send(self, batch: Mapping[PartitionTask, tuple[PartitionState, int]]) -> set[PartitionTask]:
        if not batch:
            return set()
        if not self._lease():
            # Cut off, or frozen past the session: the partitions may be someone else's now,
            # and a checkpoint committed from here could move the new owner's back.
            log.warning("copier %s: lease not confirmed; %d checkpoint(s) left uncommitted", self._route, len(batch))
            return set(batch)
        started = self._clock()
        try:
            failed = self._store.commit({task: offset for task, (_, offset) in batch.items()})
        except KafkaException as exc:
            log.warning("copier %s: committing %d checkpoint(s) failed: %s", self._route, len(batch), exc)
            return set(batch)
        if failed:
            log.warning("copier %s: checkpoint commit failed for %s", self._route, sorted(map(str, failed)))
        committed = [(state, offset) for task, (state, offset) in batch.items() if task not in failed]
        for state, offset in committed:
            if state.committed is None or offset > state.committed:
                state.committed = offset
        self._on_committed(committed, self._clock() - started)
        return failed
