"""The exactly-once batch pipeline: raw record batches and their checkpoints commit together.

:class:`TransactionalBatchPipeline` fetches like :class:`~strait.worker.batch.pipeline.BatchPipeline`
(the same :class:`~strait.worker.batch.fetching.Fetching` half and
:class:`~strait.worker.batch.partition.BatchPartition` per partition: ``read_committed``, the
source's aborted transactions dropped, control batches never copied, a partition whose batches
cannot pass unchanged handed to record mode) and writes the batches, unchanged apart from the
producer fields, into transactions of ONE transactional id through a
:class:`~strait.worker.batch.txnsession.TransactionalSession`.

One transaction, on the loop's thread:

1. the first batch (or a partition added or moved without one) begins it; every fetched batch
   is written (``write``, sent by the next ``pump``; small uncompressed ones merged, as
   at-least-once merges them) and registered with the partition's
   tracker, unacknowledged (batches fetched while the last transaction was committing, which
   fetches go on during, are written first);
2. every ``transaction_interval_s``, once ``transaction_max_bytes`` were written, when a
   partition of it is released, or once it is ``transaction_linger_s`` old with every partition
   caught up with its source (nothing queued, the last fetch at the last stable offset: waiting
   longer adds latency and no records): ``flush`` (every batch appended), ``send_offsets`` (per
   destination topic and partition, the next source offset, in the route's destination group,
   as :func:`~strait.worker.transactional_checkpoints.transaction_offsets` keys them),
   ``commit``; with an offset map (``map_route``), before the offsets: the runs of the
   transaction's batches (source offsets to the destination offsets the produce answers gave)
   go into it as one more batch to the map topic, so a ``read_committed`` reader of the map
   sees a run exactly when its records are committed (as record mode writes them:
   :class:`~strait.offsetmap.store.TransactionMap`);
3. only after the commit: the trackers acknowledge what the transaction held and
   :attr:`PartitionState.durable` moves to the committed offsets, so ``state.checkpoint`` never
   passes data a ``read_committed`` reader cannot see.

Errors: :class:`TransactionAbortable` aborts; every partition of the transaction goes back to
its durable offset and is fetched again. :class:`SessionDead` (:class:`ProducerFenced`
included) stops every partition with a ``fenced:`` error, as
:class:`~strait.worker.transaction_recovery.TransactionRecovery` does; so does a commit past
its deadline, whose outcome is unknown: the worker restarts the partitions from the checkpoint
the destination holds, and the new session's InitProducerId settles the transaction. Nothing
is written after a fence; only a fresh assignment (``add`` without ``move``) takes the
transactional id back with a new session.

The lease (``lease``, the worker's :class:`~strait.worker.lease.Lease`): without a valid one
the pipeline takes no transactional id (InitProducerId), begins no transaction and commits
none; fetched batches wait, an open transaction stays open until the lease is confirmed again
or the partitions are abandoned (its abort needs no lease). A worker frozen past its session
thus commits nothing it may no longer own, even before the controller's fence reaches it.

Every blocking call has a deadline: the session's calls ``call_timeout_s``, the link's polls
their timeout, the link's metadata reads its request timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from strait.offsetmap.store import TransactionMap
from strait.worker.batch.budget import PacedFetches
from strait.worker.batch.core import RETRY_BACKOFF_S
from strait.worker.batch.fetching import Fetching
from strait.worker.batch.leaders import LeaderCache
from strait.worker.batch.link import ClusterLink, Key, Links
from strait.worker.batch.merging import MERGED_MAX_BYTES
from strait.worker.batch.partition import BatchPartition
from strait.worker.batch.records import RecordBatch, new_batch
from strait.worker.batch.transactions import SessionDead, TransactionAbortable, TransactionError
from strait.worker.batch.txnsession import TransactionalSession
from strait.worker.checkpoint import AckTracker
from strait.worker.lease import always
from strait.worker.pipeline import PartitionState, PipelineLoop, PipelineSettings
from strait.worker.startup import ASSIGNED, mark
from strait.worker.transactional_checkpoints import transaction_offsets

log = logging.getLogger(__name__)

__all__ = ["Session", "TransactionalBatchPipeline"]

TRANSACTION_INTERVAL_S = 0.1
TRANSACTION_LINGER_S = 0.02
TRANSACTION_MAX_BYTES = 16 * 1024 * 1024
CALL_TIMEOUT_S = 30.0
TRANSACTION_TIMEOUT_MS = 60_000
TOPIC_CONFIGS_REUSE_S = 2.0


class Session(Protocol):
    """What the pipeline uses of :class:`TransactionalSession` (tests give a fake)."""

    def init(self, *, timeout_s: float) -> Any: ...
    def begin(self) -> None: ...
    def write(self, key: Key, batch: RecordBatch) -> int: ...
    def appended(self) -> list[tuple[Key, RecordBatch, int]]: ...
    def send_offsets(self, group: str, offsets: Mapping[Key, int]) -> None: ...
    def flush(self, *, timeout_s: float) -> None: ...
    def commit(self, *, timeout_s: float) -> None: ...
    def abort(self, *, timeout_s: float) -> None: ...
    def pump(self, timeout_s: float = 0.0) -> None: ...


class _Txn:
    """What the open transaction holds of one partition: the last offsets of the batches
    written or skipped in it (unacknowledged in the tracker until the commit)."""

    __slots__ = ("bytes", "lasts", "part", "records")

    def __init__(self, part: BatchPartition) -> None:
        self.part = part
        self.lasts: list[int] = []
        self.records = 0
        self.bytes = 0


class TransactionalBatchPipeline(Fetching, PipelineLoop):
    """Copies whole record batches inside destination transactions that carry their checkpoints.

    ``links`` and ``session_factory`` (a session for a link) replace the network clients in
    tests; the clock is ``time.monotonic`` otherwise. Accepts and ignores the record pipeline's
    other keyword arguments (the copier passes the same set to every pipeline).
    """

    def __init__(
        self,
        *,
        name: str,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        client_id: str,
        transactional_id: str,
        checkpoint_group: str,
        settings: PipelineSettings = PipelineSettings(),
        observer: Any = None,
        links: Links | None = None,
        session_factory: Callable[[ClusterLink], Session] | None = None,
        transaction_interval_s: float = TRANSACTION_INTERVAL_S,
        transaction_linger_s: float = TRANSACTION_LINGER_S,
        transaction_max_bytes: int = TRANSACTION_MAX_BYTES,
        merge_bytes: int = MERGED_MAX_BYTES,
        transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS,
        call_timeout_s: float = CALL_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        lease: Callable[[], bool] = always,
        map_route: str | None = None,
        offset_map: TransactionMap | None = None,
        **_record_options: Any,
    ) -> None:
        self.name = name
        # The offset map's runs go into the transactions of their batches (``offset_map``, or
        # ``map_route``'s; its cost counted on the route's observer when there is one).
        cost = getattr(observer, "offset_map", None)
        self._map = offset_map or (TransactionMap(destination, map_route, cost=cost) if map_route else None)
        self._lease = lease
        self._source_props, self._destination_props = source, destination
        self._client_id = f"{client_id}-{name}"
        self._transactional_id = transactional_id
        self._group = checkpoint_group
        self._settings = settings
        self._observer = observer
        self._links = links
        self._clock = clock
        self._interval_s = transaction_interval_s
        self._linger_s = min(transaction_linger_s, transaction_interval_s)
        self._max_bytes = transaction_max_bytes
        self._merge_bytes = merge_bytes
        self._transaction_timeout_ms = transaction_timeout_ms
        self._call_timeout_s = call_timeout_s
        self._session_factory = session_factory or self._new_session
        self._session: Session | None = None
        self._fenced: str | None = None
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._parts: dict[Key, BatchPartition] = {}
        self._leaving: list[BatchPartition] = []
        self._draining: list[tuple[PartitionState, threading.Event]] = []
        self._leaders = LeaderCache(
            self._lookup_leaders,
            refresh_s=RETRY_BACKOFF_S,
            missing_topic_s=settings.missing_topic_timeout_ms / 1000,
            clock=clock,
        )
        self._fetches: dict[int, tuple[Any, dict[Key, int], float]] = {}
        self._topic_configs: dict[tuple[str, str], tuple[Any, bool, float]] = {}
        self._pace = PacedFetches(clock=clock)
        # The open transaction: partitions it holds (by source key), when it began, its bytes.
        self._txn: dict[Key, _Txn] = {}
        self._open = False
        self._opened_at = 0.0
        self._txn_bytes = 0
        self._commit_soon = False
        self.transactions = 0  # committed
        self.aborts = 0
        self._stopping = threading.Event()
        self._flush_timeout_s = 0.0
        self._thread = threading.Thread(target=self._run, name=f"strait-copy-{client_id}-{name}", daemon=True)

    # -- the Pipeline protocol (any thread) ----------------------------------------------------

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        """Start copying ``state``'s partition from exactly ``offset`` (its durable checkpoint
        from now on: committed to the destination group with the next transaction)."""
        tracker = self._begin(state, offset)
        if tracker is not None:
            state.mode = "batch"
            state.durable = offset
            self._commands.put(partial(self._add, state, tracker, move))

    def abandon(self, state: PartitionState) -> threading.Event | None:
        """Stop the partition and abort the open transaction that holds it (instead of the
        commit a release asks for); the event is set once that transaction can no longer commit.
        A cut-off worker that gets the partition back restarts from the checkpoint it reads then;
        a transaction of the earlier copy still committing after that read would copy twice."""
        done = threading.Event()
        if self._loop_ended():
            state.fetching = False
            done.set()
            return done
        self._commands.put(partial(self._abandon, state, done))
        return done

    def _close_unstarted(self) -> None:
        if self._links is not None:
            self._links.close()

    # -- the loop (pipeline thread) ------------------------------------------------------------

    def _new_session(self, link: ClusterLink) -> Session:
        links = self._links
        return TransactionalSession(
            link,
            self._transactional_id,
            transaction_timeout_ms=self._transaction_timeout_ms,
            request_timeout_s=min(self._call_timeout_s, 30.0),
            poll=None if links is None else links.poll,
            meanwhile=self._fetch_ahead,
        )

    def _fetch_ahead(self) -> None:
        """While a commit waits on the destination: fetch the next transaction's batches (they
        are written once it is done), so the source and the destination work at the same time
        as they do for an at-least-once pipeline. Fetching reads only; what a commit settles
        (trackers, durable offsets) it leaves alone."""
        links = self._links
        if links is None or self._held or self._fenced is not None or not self._lease():
            return
        now = self._clock()
        self._take_fetches(now)
        self._start_fetches(links, now)

    def _run(self) -> None:
        try:
            while self._links is None and not self._stopping.is_set():
                self._connect()
            while not self._stopping.is_set():
                self._step()
        except Exception as exc:
            log.exception("pipeline %s crashed", self.name)
            for state in self._states():
                state.error = state.error or f"pipeline {self.name} crashed: {exc}"
                state.fetching = False
        finally:
            self._shutdown()

    def _connect(self) -> None:
        try:
            self._links = Links(self._source_props, self._destination_props, client_id=self._client_id)
        except Exception as exc:
            log.warning("pipeline %s: clusters unreachable (%s); trying again", self.name, exc)
            self._run_commands()
            self._stopping.wait(RETRY_BACKOFF_S * 10)

    def _step(self) -> None:
        """One turn of the loop; tests drive it directly."""
        links = self._links
        assert links is not None
        self._run_commands()
        now = self._clock()
        leased = self._lease()
        if not self._held and self._fenced is None and leased:
            self._start_fetches(links, now)
        # (Without the lease nothing is due: no spinning on a transaction waiting to commit.)
        links.poll(self._idle_s(now) if leased else 0.05)
        now = self._clock()
        self._take_fetches(now)
        try:
            if leased:
                self._write(now)
            if self._open and self._session is not None:
                self._session.pump(0)
            if leased and self._commit_due(self._clock()):
                self._commit()
        except TransactionAbortable as exc:
            self._abort(str(exc))
        except TransactionError as exc:  # SessionDead, or a call the session refused in its state
            self._fence(str(exc))
        self._finish_releases()

    def _idle_s(self, now: float) -> float:
        """How long the poll may wait for an answer: until the open transaction is due at most
        (any answer, fetched or produced, ends the wait sooner)."""
        due = self._commit_at(now)
        if due is None:
            return 0.05
        return max(0.0, min(0.05, due - now))

    def _shutdown(self) -> None:
        self._run_commands()
        for part in self._parts.values():
            part.stop()
            part.state.fetching = False
        if self._txn and self._fenced is None and self._flush_timeout_s > 0 and self._lease():
            try:
                self._commit(timeout_s=self._flush_timeout_s)
            except TransactionAbortable as exc:
                self._abort(str(exc), timeout_s=self._flush_timeout_s)
            except SessionDead as exc:
                self._fence(str(exc))
            except Exception:
                log.warning("pipeline %s: committing on stop failed", self.name, exc_info=True)
        if self._txn:
            log.warning("pipeline %s stopped with a transaction open: the coordinator aborts it", self.name)
        if self._links is not None:
            self._links.close()
        for _, done in self._draining:
            done.set()
        self._draining.clear()

    def _states(self) -> list[PartitionState]:
        states = {id(p.state): p.state for p in self._parts.values()}
        states.update({id(t.part.state): t.part.state for t in self._txn.values()})
        states.update({id(s): s for s, _ in self._draining})
        return list(states.values())

    # -- partitions ----------------------------------------------------------------------------

    def _add(self, state: PartitionState, tracker: AckTracker, move: bool) -> None:
        links = self._links
        task = state.task
        if self._fenced is not None:
            if not self._lease():
                # Queued before this worker froze past its session, perhaps: the partition may be
                # someone else's by now. The agent restarts it once it confirmed it is still ours.
                self._stop_fenced(state, f"fenced: not taken back without a confirmed lease ({self._fenced})")
                return
            if move:
                # A move between this worker's pipelines is no fresh assignment: the partition
                # may be someone else's by now. The agent restarts it if it is still ours.
                self._stop_fenced(
                    state, f"fenced: not moved into pipeline {self.name}, fenced earlier ({self._fenced})"
                )
                return
            log.warning("pipeline %s: taking the transactional id back after a fence (%s)", self.name, self._fenced)
            self._fenced = None
            self._session = None
        if links is None:
            state.mode, state.mode_reason = "record", "batch pipeline not connected"
            state.fetching = False
            return
        key = (task.topic, task.partition)
        earlier = self._txn.get(key)
        if earlier is not None and earlier.part.state is not state:
            # Let go without waiting for its transaction and back before it committed: its
            # batches there run past the new start offset. Abort; every partition resumes.
            self._abort(f"{task} added again while its earlier copy was in the open transaction")
            if self._fenced is not None:
                self._stop_fenced(state, f"fenced: {self._fenced}")
                return
        try:
            destination, compacted = self._configs(links, task.topic, task.destination_topic)
        except Exception as exc:
            log.info("%s: record mode (topic configs unavailable: %s)", task, exc)
            state.mode, state.mode_reason = "record", f"topic configs unavailable: {exc}"
            state.fetching = False
            return
        for _, asked, _ in self._fetches.values():
            if key in asked:
                asked[key] = -1  # an answer for an earlier copy of the partition: dropped
        part = BatchPartition(
            state, tracker, destination=destination, compacted=compacted, merge_bytes=self._merge_bytes
        )
        old = self._parts.get(key)
        if old is not None:
            old.stop()
        self._parts[key] = part
        state.fetching = True
        mark(state, ASSIGNED)
        # The start offset goes to the destination group with the next transaction.
        self._txn.setdefault(key, _Txn(part))
        self._commit_soon = True

    def _configs(self, links: Links, topic: str, destination_topic: str) -> tuple[Any, bool]:
        now = self._clock()
        known = self._topic_configs.get((topic, destination_topic))
        if known is not None and now - known[2] <= TOPIC_CONFIGS_REUSE_S:
            return known[0], known[1]
        destination = links.destination.destination_topic(destination_topic)
        compacted = links.source.compacted(topic)
        self._topic_configs[(topic, destination_topic)] = (destination, compacted, now)
        return destination, compacted

    def _release(self, state: PartitionState, done: threading.Event) -> None:
        key = (state.task.topic, state.task.partition)
        part = self._parts.get(key)
        if part is not None and part.state is state:
            part.stop()
            state.fetching = False
        txn = self._txn.get(key)
        if txn is not None and txn.part.state is state:
            self._commit_soon = True  # a released partition ends with a committed transaction
        state.fetching = False
        self._draining.append((state, done))
        self._finish_releases()

    def _abandon(self, state: PartitionState, done: threading.Event) -> None:
        key = (state.task.topic, state.task.partition)
        part = self._parts.get(key)
        if part is not None and part.state is state:
            part.stop()  # no checkpoint of it in any later transaction
        txn = self._txn.get(key)
        if txn is not None and txn.part.state is state and self._fenced is None:
            self._abort(f"{state.task} abandoned: the worker is cut off from coordination")
        if self._fenced is not None and txn is not None:
            # The abort did not complete: the coordinator aborts the transaction once its
            # timeout passed (or a new session with the id aborts it sooner).
            timer = threading.Timer(self._transaction_timeout_ms / 1000, done.set)
            timer.daemon = True
            timer.start()
            state.fetching = False
            return
        self._release(state, done)

    def _finish_releases(self) -> None:
        if not self._draining:
            return
        still = []
        for state, done in self._draining:
            key = (state.task.topic, state.task.partition)
            txn = self._txn.get(key)
            if txn is not None and txn.part.state is state:
                still.append((state, done))
                continue
            part = self._parts.get(key)
            if part is not None and part.state is state:
                del self._parts[key]
            done.set()
        self._draining = still

    # -- transactions --------------------------------------------------------------------------

    def _session_ready(self) -> Session:
        session = self._session
        if session is None:
            links = self._links
            assert links is not None
            session = self._session_factory(links.destination)
            session.init(timeout_s=self._call_timeout_s)
            self._session = session
        return session

    def _write(self, now: float) -> None:
        """Write every queued batch into the open transaction (beginning it)."""
        if self._fenced is not None:
            return
        for key, part in self._parts.items():
            if not part.active or not part.queue:
                continue
            tracker = part.tracker
            txn = self._txn.get(key)
            while part.queue:
                if self._txn_bytes >= self._max_bytes:
                    return  # the rest waits for the next transaction
                batch, produce, _ = part.queue.popleft()
                part.queued_bytes -= batch.size
                if batch.base_offset < tracker.next_offset:
                    continue
                if batch.base_offset > tracker.next_offset:
                    # Offsets missing between batches (a fetch answer dropped, the log cut): no
                    # batch may pass over them; record mode resumes at the checkpoint.
                    self._to_record_mode(
                        part, f"offset gap: {tracker.next_offset}..{batch.base_offset - 1} missing between batches"
                    )
                    break
                if txn is None:
                    txn = self._txn[key] = _Txn(part)
                if produce:
                    # One batch per partition per produce request, at most five in flight: small
                    # uncompressed batches go out merged, as at-least-once (strait.worker.batch.merging).
                    batch = part.merged_with_next(batch)
                    session = self._begin_txn(now)
                    session.write(part.destination, batch)
                    self._txn_bytes += batch.size
                    txn.records += batch.record_count
                    txn.bytes += batch.size
                # Unacknowledged until the commit: the checkpoint waits for it.
                tracker.sent(batch.last_offset, source_gap=True)
                txn.lasts.append(batch.last_offset)

    def _begin_txn(self, now: float) -> Session:
        session = self._session_ready()
        if not self._open:
            session.begin()
            self._open = True
            self._opened_at = now
        return session

    def _commit_due(self, now: float) -> bool:
        due = self._commit_at(now)
        return due is not None and now >= due

    def _commit_at(self, now: float) -> float | None:
        """When the open transaction is due to commit; None with nothing to commit."""
        if not self._txn or self._fenced is not None:
            return None
        if self._commit_soon or self._txn_bytes >= self._max_bytes:
            return now
        if not self._open:
            # Offsets only (skipped batches, a start offset): at the interval.
            self._opened_at = self._opened_at or now
            return self._opened_at + self._interval_s
        if self._caught_up():
            return self._opened_at + self._linger_s
        return self._opened_at + self._interval_s

    def _caught_up(self) -> bool:
        """Whether every partition copied here has written all the source holds (as far as its
        last fetch knew)."""
        return all(part.at_end and not part.queue for part in self._parts.values() if part.active)

    def _commit(self, timeout_s: float | None = None) -> None:
        """flush, send_offsets, commit; then the checkpoints move. Raises what the session
        raises (TransactionAbortable, SessionDead)."""
        self._commit_soon = False
        if not self._txn:
            return
        timeout = self._call_timeout_s if timeout_s is None else timeout_s
        asked = self._clock()
        session = self._begin_txn(asked)
        session.flush(timeout_s=timeout)
        self._write_runs(session, timeout)
        flushed = self._clock()
        offsets = {t.part.state.task: t.part.tracker.next_offset for t in self._txn.values()}
        keyed = {(tp.topic, tp.partition): tp.offset for tp in transaction_offsets(offsets)}
        session.send_offsets(self._group, keyed)
        try:
            session.commit(timeout_s=timeout)
        except SessionDead as exc:
            raise SessionDead(f"commit of unknown outcome: {exc}", exc.code) from exc
        # Committed: the batches are visible to read_committed readers with their offsets.
        log.debug(
            "pipeline %s: committed %d bytes of %d partitions (open %.3fs, flush %.3fs, commit %.3fs)",
            self.name,
            self._txn_bytes,
            len(self._txn),
            asked - self._opened_at,
            flushed - asked,
            self._clock() - flushed,
        )
        self._open = False
        self._txn_bytes = 0
        self.transactions += 1
        txns, self._txn = self._txn, {}
        self._opened_at = self._clock()
        for txn in txns.values():
            part, state = txn.part, txn.part.state
            for last in txn.lasts:
                part.tracker.acked(last)
            state.durable = offsets[state.task]
            state.runs.keep()
            if txn.records:
                state.records += txn.records
                state.bytes += txn.bytes
                state.last_progress = time.time()
                state.waiting = None

    def _write_runs(self, session: Session, timeout_s: float) -> None:
        """Put the offset map's runs of the transaction's batches (all appended now) into it.

        A map batch that cannot be appended aborts the transaction once (raised to the caller),
        then transactions go without runs for a while (:meth:`TransactionMap.failed`)."""
        appended = session.appended()
        if self._map is None:
            return
        parts = {txn.part.destination: txn.part for txn in self._txn.values()}
        for key, batch, base in sorted(appended, key=lambda a: a[1].base_offset):
            part = parts.get(key)
            if part is not None:
                part.state.runs.note_many(batch.base_offset, base, batch.last_offset_delta + 1)
        runs = [
            (t.part.state.task.topic, t.part.state.task.partition, t.part.state.task.destination_topic, run)
            for t in self._txn.values()
            for run in t.part.state.runs.take()
        ]
        if not runs:
            return
        if not self._map.writable():
            self._map.dropped(len(runs))
            return
        records = self._map.encoded(runs)
        session.write((self._map.topic, 0), new_batch(records, int(time.time() * 1000)))
        try:
            session.flush(timeout_s=timeout_s)
        except TransactionAbortable as exc:
            self._map.failed(str(exc))
            raise
        session.appended()  # the map's own batch
        self._map.appended(len(runs))

    def _abort(self, reason: str, timeout_s: float | None = None) -> None:
        """Abort the open transaction; its partitions go back to their durable offsets."""
        log.warning("pipeline %s: aborting the transaction: %s", self.name, reason)
        self._commit_soon = False
        if self._open and self._session is not None:
            try:
                self._session.abort(timeout_s=self._call_timeout_s if timeout_s is None else timeout_s)
            except SessionDead as exc:
                self._fence(f"{exc} (aborting: {reason})")
                return
        self.aborts += 1
        self._open = False
        self._txn_bytes = 0
        self._opened_at = self._clock()
        txns, self._txn = self._txn, {}
        for key, txn in txns.items():
            txn.part.state.runs.rollback()  # its records were aborted: no run maps them
            self._reposition(key, txn.part)

    def _reposition(self, key: Key, part: BatchPartition) -> None:
        """Back to the durable offset with a fresh tracker; fetched again if still copied."""
        state = part.state
        durable = state.durable if state.durable is not None else part.tracker.position
        tracker = AckTracker(durable)
        if state.tracker is part.tracker:
            state.tracker = tracker
        part.tracker = tracker
        part.generation += 1
        part.queue.clear()
        part.queued_bytes = 0
        part.fetch_offset = durable
        part.at_end = False
        part.fetch_pending = False
        state.rewinds += 1
        if part.active and self._parts.get(key) is part:
            self._txn[key] = _Txn(part)  # its durable offset goes with the next transaction

    def _fence(self, reason: str) -> None:
        """The session can write no more: every partition stops (``fenced:``) at its durable
        offset; the worker restarts them from the destination's checkpoints."""
        log.error("pipeline %s: transactional id %s can write no more: %s", self.name, self._transactional_id, reason)
        self._fenced = reason
        states = self._states()
        self._session = None
        self._open = False
        self._txn_bytes = 0
        for txn in self._txn.values():
            txn.part.state.runs.rollback()  # restarted from the destination's checkpoint
        self._txn.clear()
        for part in self._parts.values():
            part.stop()
        for state in states:
            self._stop_fenced(state, f"fenced: {reason}")

    def _stop_fenced(self, state: PartitionState, reason: str) -> None:
        if state.error is None:
            state.error = reason
        state.fetching = False
        tracker = state.tracker
        durable = state.durable if state.durable is not None else (tracker.position if tracker else None)
        if durable is not None:
            state.tracker = AckTracker(durable)
