"""The worker's data path for one route: copy a changing set of source partitions to the destination.

The worker agent tells the copier which partitions it owns (:meth:`Copier.assign`,
:meth:`Copier.revoke`); the copier never joins a consumer group, so ownership changes touch only
the partitions that change (no rebalance, uReplicator's fix for MirrorMaker). Checkpoints are
the route group's committed offsets on the *source* cluster, so standard Kafka tooling shows
replication lag, and they only cover records the destination acknowledged.

Threads: one control thread (starting partitions, hand-overs, moves between pipelines,
checkpoint commits) and one thread per fetch pipeline (see :mod:`strait.worker.fetch`).
Starting partitions is in :mod:`strait.worker.starts`, the choice of pipeline and the moves
between pipelines in :mod:`strait.worker.moves`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal

from strait.metrics.stages import CopyObserver
from strait.offsetmap.store import MapWriter
from strait.worker.checkpoint import checkpoint_violation
from strait.worker.commits import FINAL_COMMIT_TIMEOUT_S, Committer, Ticket, commit_due
from strait.worker.destination import DestinationTopics
from strait.worker.entries import DestinationManager, Entry, PartitionStats, snapshot
from strait.worker.fetch import RecordPipeline
from strait.worker.lease import always
from strait.worker.moves import Moves
from strait.worker.origin import OriginRule
from strait.worker.pipeline import CATCHUP_SETTINGS, PartitionState, Pipeline, PipelineSettings
from strait.worker.source_checkpoints import ADMIN_TIMEOUT_S, CheckpointStore, EarlyStarts, SourceCheckpoints
from strait.worker.starts import PartitionStarts
from strait.worker.task import PartitionTask

log = logging.getLogger(__name__)

REALTIME = "realtime"
CATCHUP = "catchup"
BATCH = "batch"
REALTIME_BATCH = "realtime-batch"  # a batch route's caught-up partitions, in batch mode
# The longest fetch gathering window of the realtime batch pipeline (PipelineSettings.fetch_gather_ms,
# strait.worker.batch.gathering): it runs only while caught-up partitions bring thousands of
# records a second (realtime_copy: auto).
GATHER_MS = 5
# A revoke still waiting for the destination's answers this long is logged; the partition stays
# held until every record in flight was acknowledged or failed.
REVOKE_OVERDUE_S = 30.0

CopyMode = Literal["record", "batch"]
RealtimeCopy = Literal["record", "batch", "auto"]

PipelineFactory = Callable[..., Pipeline]

__all__ = ["Copier", "CopyMode", "DestinationManager", "PartitionStats"]


class Copier(PartitionStarts):
    """Copies the partitions assigned to this worker for one route (source → destination cluster).

    ``source``/``destination`` are librdkafka property maps of the two clusters. Checkpoints are
    committed every ``commit_interval_s`` to ``group_id`` on the source. Partitions whose fetch
    lag exceeds ``catchup_lag_threshold`` records are copied by a separate catch-up pipeline
    (``None`` puts every partition in one pipeline); with ``copy="batch"`` that is the batch
    pipeline, and caught-up partitions are copied record by record (:mod:`strait.worker.moves`).
    ``pipeline_factory(name=..., settings=...,
    source=..., destination=..., group_id=..., client_id=...)`` replaces the record-by-record
    copy loop; it also receives ``observer=``. ``observer`` (a
    :class:`strait.metrics.stages.CopyObserver`, e.g. ``WorkerMetrics.route(route)``) receives
    per-stage latencies: fetch wait, queueing, produce acknowledgement, checkpoint commits.
    """

    def __init__(
        self,
        *,
        route: str,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        group_id: str,
        worker_id: str,
        replication_factor: int | None = None,
        commit_interval_s: float = 1.0,
        commit_after_records: int = 1_000,
        catchup_lag_threshold: int | None = 10_000,
        realtime_settings: PipelineSettings = PipelineSettings(),
        catchup_settings: PipelineSettings = CATCHUP_SETTINGS,
        pipeline_factory: PipelineFactory | None = None,
        observer: CopyObserver | None = None,
        checkpoints: CheckpointStore | None = None,
        destinations: DestinationManager | None = None,
        offset_map: MapWriter | None = None,
        lease: Callable[[], bool] = always,
        origin: OriginRule | None = None,
        copy: CopyMode = "record",
        copy_reason: str = "",
        batch_factory: PipelineFactory | None = None,
        backlog_factory: PipelineFactory | None = None,
        realtime_copy: RealtimeCopy = "auto",
    ) -> None:
        self.route = route
        self._copy_reason = copy_reason
        self.group_id = group_id
        self.worker_id = worker_id
        self._commit_interval_s = commit_interval_s
        self._commit_after_records = commit_after_records
        self._offset_map = offset_map
        self._lease = lease
        self._source_props, self._destination_props = source, destination
        self._catchup_lag_threshold = catchup_lag_threshold
        self._observer = observer
        self._destinations: DestinationManager = destinations or DestinationTopics(
            source=source, destination=destination, replication_factor=replication_factor
        )
        client_id = f"strait-{route}-{worker_id}"
        self._checkpoints: CheckpointStore = checkpoints or SourceCheckpoints(
            source=source, group_id=group_id, client_id=client_id
        )
        # A store whose reads may come early (see SourceCheckpoints.reads_early) reads a new
        # partition's start offsets while its destination topic is made ready.
        self._early = EarlyStarts(self._checkpoints) if getattr(self._checkpoints, "reads_early", False) else None
        self._committer = Committer(self._checkpoints, route=route, lease=lease, on_committed=self._committed)
        factory: PipelineFactory = pipeline_factory or RecordPipeline
        common: dict[str, Any] = {
            "source": source,
            "destination": destination,
            "group_id": group_id,
            "client_id": client_id,
            "observer": observer,
        }
        if origin is not None:
            common["origin"] = origin
        self._realtime = factory(name=REALTIME, settings=realtime_settings, **common)
        self._catchup = (
            factory(name=CATCHUP, settings=catchup_settings, **common) if catchup_lag_threshold is not None else None
        )
        # copy: batch: lagging partitions run in the batch pipeline, caught-up ones in a second,
        # realtime batch pipeline (record by record with realtime_copy: record), every one in the
        # batch pipeline without a threshold; one whose batches cannot pass unchanged moves to
        # the record pipelines for good (strait.worker.moves).
        self._batch: Pipeline | None = None
        realtime_batch: Pipeline | None = None
        two_way = origin is not None and copy == "batch"
        if two_way:
            # A two-way route's record pipelines cannot tell the opposite route's whole-batch
            # copies (no header) from user records: its partitions stay in batch pipelines,
            # caught up or not, and leave them only when their batches cannot pass (moves.py).
            realtime_copy = "batch"
        if copy == "batch":
            # The backlog's pipeline runs in a process of its own (strait.worker.batch.remote),
            # the realtime one here; ``batch_factory`` alone (tests) makes both.
            if backlog_factory is None and batch_factory is None:
                from strait.worker.batch.remote import BacklogProcess

                backlog_factory = BacklogProcess
            if batch_factory is None:
                from strait.worker.batch.pipeline import BatchPipeline

                batch_factory = BatchPipeline
            self._batch = (backlog_factory or batch_factory)(name=BATCH, settings=catchup_settings, **common)
            if realtime_copy != "record" and catchup_lag_threshold is not None:
                gathering = replace(realtime_settings, fetch_gather_ms=realtime_settings.fetch_gather_ms or GATHER_MS)
                realtime_batch = batch_factory(name=REALTIME_BATCH, settings=gathering, **common)
        self._moves = Moves(
            realtime=self._realtime,
            catchup=self._catchup,
            batch=self._batch,
            threshold=catchup_lag_threshold,
            copy_reason=copy_reason,
            realtime_batch=realtime_batch,
            auto=realtime_copy == "auto",
            keep_batches=two_way,
        )
        self._lock = threading.Lock()
        self._entries: dict[PartitionTask, Entry] = {}
        # Records, bytes and rewinds of the partitions' earlier assignments here (see PartitionStats).
        self._earlier: dict[tuple[str, int], tuple[int, int, int]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"strait-copier-{route}", daemon=True)
        self._started = False
        self._stopped = False
        self._next_commit = 0.0
        self._held = False  # fetching held by _hold_while_unconfirmed

    # -- public interface ------------------------------------------------------------------

    def start(self) -> None:
        """Start the pipelines and the control thread; partitions assigned before start begin now."""
        if self._started:
            return
        self._started = True
        for pipeline in self._moves.pipelines():
            pipeline.start()
        self._thread.start()

    def assign(self, tasks: Iterable[PartitionTask]) -> None:
        """Add partitions in place; other partitions are not disturbed. Returns at once.

        Each partition resumes from the route group's checkpoint, or from ``task.start`` if it
        has none. Raises ``ValueError`` for a task of another route, or for a partition that is
        already assigned with different settings (revoke it first).
        """
        tasks = list(tasks)
        added: list[PartitionTask] = []
        with self._lock:
            for task in tasks:
                if task.route != self.route:
                    raise ValueError(f"task {task} belongs to route {task.route!r}, not {self.route!r}")
                clash = next(
                    (e for t, e in self._entries.items() if (t.topic, t.partition) == (task.topic, task.partition)),
                    None,
                )
                if clash is not None and clash.revoke_deadline is not None:
                    # Still being handed over (its records in flight): it starts again from
                    # its checkpoint once that ends, never alongside its old self.
                    clash.successor = task
                    continue
                if task in self._entries:
                    continue
                if clash is not None:
                    raise ValueError(f"{task.topic}/{task.partition} is already assigned as {clash.state.task!r}")
                self._entries[task] = Entry(state=PartitionState(task))
                added.append(task)
        if added:
            # Their destination topics get ready meanwhile, while other partitions still start.
            wanted: dict[tuple[str, str], int] = {}
            for task in added:
                pair = (task.topic, task.destination_topic)
                wanted[pair] = max(wanted.get(pair, 0), task.partition + 1)
            self._destinations.prepare(wanted)
            if self._early is not None:
                self._early.ask(added)
        self._wake.set()

    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]:
        """Hand partitions over cleanly: stop fetching, wait for in-flight acks, commit, return.

        The next owner resumes exactly at the committed checkpoint: no loss, and duplicates only
        where a batch pipeline gave up a batch whose answer was lost (strait.worker.moves).
        Returns the partitions whose records are still in flight after ``timeout_s`` (a stalled
        destination): they stay held (:meth:`assigned` lists them) until every record was
        acknowledged or failed (at most the producer's delivery timeout), because a new owner
        starting earlier would write alongside them. ``timeout_s=0`` starts the revokes and
        returns at once (the worker's agent never waits: it publishes what it holds as revokes
        finish); a revoke still waiting after ``REVOKE_OVERDUE_S`` is logged.
        """
        now = time.monotonic()
        deadline = now + timeout_s
        overdue = now + max(timeout_s, REVOKE_OVERDUE_S)
        waiting: list[threading.Event] = []
        with self._lock:
            waiting_to_start = {e.successor: e for e in self._entries.values() if e.successor is not None}
            for task in tasks:
                if task in waiting_to_start:
                    # Given back while still being handed over, now taken away again: the
                    # agent no longer counts it as its own, so it must not start afterwards.
                    waiting_to_start[task].successor = None
                entry = self._entries.get(task)
                if entry is None:
                    continue
                if entry.revoke_deadline is None or entry.revoke_deadline > overdue:
                    entry.revoke_deadline = overdue
                waiting.append(entry.revoked)
        if not waiting:
            return set()
        if not self._started or self._stopped:
            self._drop_unstarted(waiting)
            return set()
        self._wake.set()
        for event in waiting:
            event.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return {task for task, entry in self._entries.items() if entry.revoked in waiting and entry.revoke_deadline}

    def abandon(self) -> None:
        """Stop copying every partition at once, without committing another checkpoint.

        For a worker cut off from coordination: its partitions may already belong to another
        worker, whose checkpoints a late commit of ours could move backwards. Records in
        flight may still land (duplicates for the next owner); nothing is lost, since the
        committed checkpoints only cover acknowledged records. Returns at once.
        """
        now = time.monotonic()
        with self._lock:
            for entry in self._entries.values():
                entry.abandoned = True
                entry.revoke_deadline = now
                # The agent forgets its whole assignment with this call: a partition given
                # back while it was being revoked must not start again once that ends, beside
                # the owner it is given to next and unknown to the agent that would revoke it.
                entry.successor = None
        self._wake.set()

    def fenced(self) -> set[PartitionTask]:
        """Partitions stopped because their transactional producer was fenced (exactly-once)."""
        with self._lock:
            entries = list(self._entries.items())
        return {t for t, e in entries if e.revoke_deadline is None and (e.state.error or "").startswith("fenced:")}

    def assigned(self) -> set[PartitionTask]:
        """The partitions this copier owns (until their revoke has returned)."""
        with self._lock:
            return set(self._entries)

    def stats(self) -> dict[PartitionTask, PartitionStats]:
        """Per assigned partition: progress, checkpoint, lag and state."""
        with self._lock:
            # The earlier counts under the same lock as the entries: a partition finishing its
            # revoke meanwhile is counted once, either as an entry or as earlier counts.
            entries = [(t, e, self._earlier.get((t.topic, t.partition))) for t, e in self._entries.items()]
        return {task: snapshot(entry, earlier) for task, entry, earlier in entries}

    def crashed(self) -> str | None:
        """The name of a pipeline whose loop died (its partitions, and any added to it later,
        copy nothing more), or None."""
        for pipeline in self._moves.pipelines():
            if pipeline.crashed():
                return pipeline.name
        return None

    def stop(self, drain: bool = True, timeout_s: float = 30) -> None:
        """Stop copying. ``drain=True`` hands every partition over cleanly first (see :meth:`revoke`).

        With ``drain=False`` the copier stops at once and commits what was acknowledged so far:
        the next owner may copy some records again, none is lost.
        """
        if self._stopped:
            return
        deadline = time.monotonic() + timeout_s
        if drain and self._started:
            self.revoke(self.assigned(), timeout_s)
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(max(1.0, deadline - time.monotonic()) + ADMIN_TIMEOUT_S)
        self._stopped = True
        flush_s = max(0.0, min(5.0, deadline - time.monotonic()))
        for pipeline in self._moves.pipelines():
            pipeline.stop(flush_s)
        with self._lock:
            remaining = [e for e in self._entries.values() if e.phase != "starting"]
        self._commit(remaining)
        commit_s = max(1.0, min(FINAL_COMMIT_TIMEOUT_S, deadline - time.monotonic()))
        if self._early is not None:
            self._early.close()
        if self._committer.stop(commit_s):
            self._checkpoints.close()
        else:
            # Closing the client under a request still waiting for its answer is not safe.
            log.error("copier %s: the last checkpoint commit is unanswered after %.0fs", self.route, commit_s)
        if self._offset_map is not None:
            self._offset_map.close()

    # -- control thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._tick()
            except Exception:
                log.exception("copier %s: control step failed", self.route)
            self._wake.wait(0.05)
            self._wake.clear()

    def _tick(self) -> None:
        now = time.monotonic()
        self._hold_while_unconfirmed()
        with self._lock:
            entries = list(self._entries.values())
        starting: list[Entry] = []
        released: list[Entry] = []
        finished: list[Entry] = []
        for entry in entries:
            if entry.revoke_deadline is not None:
                if entry.final_commit is not None:
                    if self._final_commit_settled(entry, now):
                        finished.append(entry)
                elif self._advance_revoke(entry, now):
                    released.append(entry)
            elif entry.phase == "starting":
                if now >= entry.next_attempt:
                    starting.append(entry)
            elif entry.phase == "moving":
                self._moves.advance(entry, now)
        if released:
            finished += self._commit_released(released)
        if finished:
            self._finish_revokes(finished)
        if starting and self._lease():
            # Starting claims the partition: not while this worker may have lost it unawares
            # (frozen past its session; see strait.worker.lease). The agent confirms soon.
            self._start_partitions(starting)
        self._committer.report_overdue()
        running = [e for e in entries if e.phase != "starting" and e.revoke_deadline is None]
        if commit_due(
            now,
            self._next_commit,
            (_progress(e.state) for e in running),
            after_records=self._commit_after_records,
            busy=self._committer.busy(),
        ):
            self._next_commit = now + self._commit_interval_s
            self._commit(running)
        self._moves.classify(entries, now)
        self._moves.to_record_mode(entries)

    def _hold_while_unconfirmed(self) -> None:
        """No fetching while the lease is not confirmed: no checkpoint can be committed then
        (see _commit), so whatever is copied meanwhile would be copied again by the next
        owner. A worker whose coordination session flaps thus copies at most what its pipelines
        had fetched past its last commit, not everything until the session is judged lost."""
        held = not self._lease()
        if held != self._held:
            self._held = held
            if held:
                log.warning("copier %s: lease not confirmed; fetching held until it is", self.route)
            else:
                log.info("copier %s: lease confirmed again; fetching resumes", self.route)
        # Every turn, not only on a change: the backlog process takes it as the sign that this
        # copier still runs, and holds on its own when it stops hearing it (strait.worker.batch.child).
        for pipeline in self._moves.pipelines():
            pipeline.hold(held)

    def _advance_revoke(self, entry: Entry, now: float) -> bool:
        """Move a revoke forward; True once the partition can be committed and dropped."""
        if entry.phase == "starting":
            return True
        if entry.abandoned:
            return self._advance_abandon(entry)
        if entry.phase == "running":
            if entry.pipeline is None:
                raise RuntimeError(f"{entry.state.task} runs without a pipeline")
            entry.released = entry.pipeline.release(entry.state)
            entry.phase = "releasing"
        # A partition in the middle of a move is already being released by its old pipeline.
        if entry.released is None or entry.revoke_deadline is None:
            raise RuntimeError(f"{entry.state.task} is revoked without a release in progress")
        if entry.released.is_set():
            return True
        if now >= entry.revoke_deadline and not entry.overdue_logged:
            entry.overdue_logged = True
            tracker = entry.state.tracker
            log.warning(
                "revoke of %s: %d records still unacknowledged long after the revoke began; holding the "
                "partition until the destination answers for each (a new owner must not write beside them)",
                entry.state.task,
                tracker.in_flight if tracker else 0,
            )
        return False

    @staticmethod
    def _advance_abandon(entry: Entry) -> bool:
        """An abandoned partition is dropped once its pipeline says nothing of it can still
        become visible past its checkpoint: at once at least once, after the abort of its open
        transaction exactly once (a successor assigned meanwhile starts only then)."""
        if not entry.abandon_asked:
            if entry.pipeline is None:
                raise RuntimeError(f"{entry.state.task} runs without a pipeline")
            # Running, moving (its old pipeline) or releasing: the pipeline it is still in.
            entry.abandon_asked = True
            entry.settling = entry.pipeline.abandon(entry.state)
            entry.phase = "releasing"
        return entry.settling is None or entry.settling.is_set()

    def _commit_released(self, released: list[Entry]) -> list[Entry]:
        """Hand the final checkpoints of released partitions to the committer; the entries with
        nothing to commit (abandoned, or committed already), which are finished now."""
        ticket = self._commit([e for e in released if not e.abandoned])
        waiting = set() if ticket is None else set(ticket.offsets)
        for entry in released:
            if entry.state.task in waiting:
                entry.final_commit = ticket
        return [e for e in released if e.state.task not in waiting]

    def _final_commit_settled(self, entry: Entry, now: float) -> bool:
        ticket = entry.final_commit
        if ticket is None or not ticket.settled(now):
            return False
        if not ticket.done.is_set():
            log.error(
                "revoke of %s: its final checkpoint commit is unanswered after %.0fs; letting it go at "
                "checkpoint %s (the next owner copies what was acknowledged after it again)",
                entry.state.task,
                FINAL_COMMIT_TIMEOUT_S,
                entry.state.committed,
            )
        elif entry.state.task in ticket.failed:
            log.error(
                "revoke of %s: its final checkpoint commit failed; letting it go at checkpoint %s",
                entry.state.task,
                entry.state.committed,
            )
        return True

    def _finish_revokes(self, finished: list[Entry]) -> None:
        with self._lock:
            for entry in finished:
                task = entry.state.task
                log.info(
                    "%s %s at checkpoint %s",
                    "abandoned" if entry.abandoned else "released",
                    task,
                    entry.state.committed,
                )
                if self._entries.get(task) is entry:
                    del self._entries[task]
                    key, state = (task.topic, task.partition), entry.state
                    records, size, rewinds = self._earlier.get(key, (0, 0, 0))
                    self._earlier[key] = (records + state.records, size + state.bytes, rewinds + state.rewinds)
                if self._early is not None and entry.phase == "starting":
                    self._early.forget([task])
                if entry.state.failed:
                    # The next assignment checks the destination again (it may have been deleted).
                    self._destinations.forget(task.destination_topic)
                if entry.successor is not None and not self._stopping.is_set():
                    self._entries[entry.successor] = Entry(state=PartitionState(entry.successor))
                entry.revoked.set()

    def _drop_unstarted(self, events: list[threading.Event]) -> None:
        with self._lock:
            for task, entry in list(self._entries.items()):
                if entry.revoked in events and entry.phase == "starting":
                    del self._entries[task]
                    if self._early is not None:
                        self._early.forget([task])
                    entry.revoked.set()

    def _commit(self, entries: list[Entry]) -> Ticket | None:
        """Hand the checkpoints that moved since their last commit to the committer (one request);
        its ticket, or None when there is nothing to commit or no lease to commit with."""
        due: list[tuple[PartitionState, int]] = []
        for entry in entries:
            state = entry.state
            tracker = state.tracker
            if tracker is None or entry.abandoned:
                continue
            checkpoint = state.checkpoint
            if checkpoint is None or checkpoint == state.committed:
                continue
            # Every commit path goes through here: refuse, count and report rather than commit
            # a checkpoint that breaks its promise (the acknowledged position is re-read, so a
            # value computed from anything else cannot slip through).
            violation = checkpoint_violation(state.committed, checkpoint, tracker.position)
            if violation is not None:
                log.error(
                    "%s: refusing checkpoint %d (%s; committed %s)", state.task, checkpoint, violation, state.committed
                )
                if self._observer is not None:
                    self._observer.checkpoint_refused(violation)
                continue
            due.append((state, checkpoint))
        if not due:
            return None
        if not self._lease():
            # Cut off, or frozen past the session: the partitions may be someone else's now,
            # and a checkpoint committed from here could move the new owner's back.
            log.warning("copier %s: lease not confirmed; %d checkpoint(s) left uncommitted", self.route, len(due))
            return None
        return self._committer.submit(due)

    def _committed(self, committed: list[tuple[PartitionState, int]], seconds: float) -> None:
        """After each commit request (on the committer's thread)."""
        if self._observer is not None:
            self._observer.committed(seconds)
        if self._offset_map is not None and committed:
            # Published with the checkpoint's rhythm; a record copied again later (a resend, a
            # successor) gets a later run, and translation prefers the latest copy.
            self._offset_map.publish(
                (s.task.topic, s.task.partition, s.task.destination_topic, s.runs) for s, _ in committed
            )


def _progress(state: PartitionState) -> int:
    """How far a partition's checkpoint moved past its last commit (records, roughly)."""
    checkpoint, committed = state.checkpoint, state.committed
    if checkpoint is None:
        return 0
    return checkpoint - (committed if committed is not None else checkpoint)
