"""The exactly-once pipeline: records and their checkpoints commit or abort together.

Same fetch loop as :class:`strait.worker.fetch.RecordPipeline` (the same backlog, gap rule,
release protocol, fast path of stretches and delivery reports settled in bulk), with a
transactional producer on the destination; copies carry exactly the source record's key,
value, headers and timestamp. Every ``transaction_interval_s`` (or sooner: after
``transaction_max_bytes``, when a partition is released, or once ``transaction_linger_s`` old with
every fetched record sent and no more ready at the consumer) the open
transaction is flushed,
the source offsets it covers are added to it with
``send_offsets_to_transaction`` (group ``strait.<route>`` on the destination), and it commits:
records and checkpoints become visible to ``read_committed`` readers at once, or not at all.
The offset map's runs of those records go into the same transaction (``map_route``), written
once the records are acknowledged and before the commit, so the map never maps an aborted copy.

- A failed record or an abortable error aborts the transaction; every partition in it goes
  back to its last committed checkpoint (:attr:`PartitionState.durable`) and is fetched again.
- A fatal error (``_FENCED``: the controller fenced this worker after its ZooKeeper session
  ended, or the same worker id started elsewhere) stops the pipeline's partitions for good;
  the producer is re-created (a new epoch) only when a partition is added again, which only
  happens after a fresh assignment.

Aborts, replaced producers and fencing are :mod:`strait.worker.transaction_recovery`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from strait import clients
from strait.access_errors import explain
from strait.offsetmap.store import TransactionMap
from strait.worker.checkpoint import AckTracker
from strait.worker.deadline import CallHung, DeadlineRunner
from strait.worker.fetch import Key, RecordPipeline
from strait.worker.lease import always
from strait.worker.pipeline import (
    ACCESS_DENIED,
    PartitionState,
    client_call,
    delivery_error_is_permanent,
    describe_error,
)
from strait.worker.transaction_recovery import FATAL_CODES, TRANSACTION_TIMEOUT_S, TransactionRecovery
from strait.worker.transactional_checkpoints import group_metadata, transaction_offsets

log = logging.getLogger(__name__)

_message_value = Message.value
_message_key = Message.key

# A transaction call still blocked this long after its own timeout never returns.
HUNG_AFTER_S = TRANSACTION_TIMEOUT_S + 10.0


class TransactionalPipeline(RecordPipeline, TransactionRecovery):
    """Copies records inside destination transactions that also carry their checkpoints."""

    # Records that continue a partition's stream take the record pipeline's fast path (one
    # tracker call and one delivery-book entry per stretch, strait.worker.sending); the first
    # record of a transaction, and any record sent while one is being aborted or committed,
    # take the per-record path (_produce).
    _stretch_hooks = True

    def __init__(
        self,
        *,
        transactional_id: Callable[[str], str],
        checkpoint_group: str,
        transaction_interval_s: float = 0.1,
        transaction_linger_s: float = 0.02,
        transaction_max_bytes: int = 16 * 1024 * 1024,
        lease: Callable[[], bool] = always,
        map_route: str | None = None,
        **kwargs: Any,
    ) -> None:
        self._lease = lease
        # The route whose offset map this pipeline's transactions carry (None: no map).
        # Its cost is counted on the route's observer (strait.offsetmap.cost), when there is one.
        cost = getattr(kwargs.get("observer"), "offset_map", None)
        self._map = TransactionMap(kwargs["destination"], map_route, cost=cost) if map_route else None
        self._transactional_id = transactional_id(kwargs["name"])
        self._checkpoint_group = checkpoint_group
        self._interval_s = transaction_interval_s
        self._linger_s = min(transaction_linger_s, transaction_interval_s)
        self._max_bytes = transaction_max_bytes
        self._destination_props: Mapping[str, Any] = kwargs["destination"]
        self._metadata: Any = None
        self._initialised = False
        self._fenced: str | None = None
        # Partitions with records or a checkpoint in the open transaction.
        self._in_txn: dict[Key, PartitionState] = {}
        self._txn_open = False
        self._txn_started = 0.0
        self._txn_bytes = 0
        self._commit_soon = False
        self._abort_needed = False
        self._calls = DeadlineRunner(f"strait-txn-{kwargs['name']}")
        self._hung_producers: list[Any] = []
        # Offsets sent with the transaction being committed (None before they are sent).
        self._commit_offsets: dict[Any, int] | None = None
        self._retries = 0
        # Partitions of a transaction whose outcome is unknown until the new producer is ready.
        self._unresolved: dict[Key, PartitionState] = {}
        super().__init__(**kwargs)

    # -- clients -------------------------------------------------------------------------------

    def _make_producer(self, destination: Mapping[str, Any]) -> Any:
        settings = self._producer_settings(destination)
        settings["transactional.id"] = self._transactional_id
        # librdkafka requires message.timeout.ms <= transaction.timeout.ms.
        timeout_ms = int(TRANSACTION_TIMEOUT_S * 1000)
        settings["transaction.timeout.ms"] = timeout_ms
        settings["message.timeout.ms"] = min(int(settings.get("message.timeout.ms", timeout_ms)), timeout_ms)
        return clients.producer(destination, **settings)

    def _initialise(self) -> None:
        """Take the transactional id over: aborts what an earlier incarnation left open."""
        if self._metadata is None:
            self._metadata = group_metadata(self._destination_props, self._checkpoint_group)
        # With a deadline like the other transaction calls. In a short chaos run a flush hung
        # and was replaced, and the pipeline then served no release any more (revokes held
        # with nothing unacknowledged): the new producer's init, the next call to meet the
        # coordinator that hung the flush, is the likeliest place (not confirmed by a stack).
        self._transaction_call(self._producer.init_transactions, TRANSACTION_TIMEOUT_S)
        self._initialised = True
        log.info("pipeline %s: transactional id %s ready", self.name, self._transactional_id)
        if self._unresolved:
            self._resolved()

    # -- loop hooks ----------------------------------------------------------------------------

    def _step(self) -> None:
        if self._fenced is not None:
            # Nothing may be written any more: serve releases (they complete at once) and wait
            # for a fresh assignment to add a partition again.
            self._run_commands()
            self._finish_releases()
            time.sleep(0.05)
            return
        if not self._initialised:
            if not self._lease():
                # Taking the transactional id claims every partition of this pipeline: not while
                # this worker may have lost them unawares (its session ended while a hung call
                # was being replaced, say). The agent confirms the lease again, or releases them.
                self._run_commands()
                self._finish_releases()
                time.sleep(0.05)
                return
            try:
                self._initialise()
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or error.code() in FATAL_CODES:
                    self._fence(f"{describe_error(error)} while initialising")
                else:
                    # Taking the id over is safe to repeat (a coordinator may be away for long).
                    log.warning("pipeline %s: %s while initialising; trying again", self.name, describe_error(error))
                    self._run_commands()
                    time.sleep(0.5)
                return
            except CallHung as exc:
                # Nothing was written by this producer: another one takes the id over, and the
                # partitions held for an unknown outcome stay held until one is ready.
                self._renew_producer(f"{exc} (a librdkafka hang)")
                self._run_commands()
                return
        try:
            super()._step()
        except KafkaException as exc:
            # A transactional producer raises its fatal errors (fenced) from poll() as well.
            self._on_transaction_error(exc.args[0], "serving acknowledgements")

    def _add_moved(self, state: PartitionState, offset: int) -> None:
        if self._fenced is not None:
            # Only a fresh assignment, read through a live session, may take a fenced id back.
            # A move between this worker's pipelines is no such thing: a worker frozen past its
            # session wakes up and moves a partition before it notices that the partition is
            # someone else's now (the 30-minute chaos run: two writers, a checkpoint 15,000
            # records behind the data). Stop it; the agent restarts it if it is still ours.
            self._fail(state, f"fenced: not moved into pipeline {self.name}, fenced earlier ({self._fenced})")
            return
        self._add(state, offset)

    def _add(self, state: PartitionState, offset: int) -> None:
        if self._fenced is not None and not self._lease():
            # Queued before this worker froze past its session, perhaps: the partition may be
            # someone else's by now. The agent restarts it once it confirmed it is still ours.
            self._fail(state, f"fenced: not taken back without a confirmed lease ({self._fenced})")
            return
        if self._fenced is not None:
            # Added again after being fenced: only a fresh assignment does that, so this worker
            # owns the partition again and may take its transactional id back.
            log.warning("pipeline %s: re-creating the producer fenced earlier (%s)", self.name, self._fenced)
            self._producer = self._make_producer(self._destination_props)
            self._fenced = None
            self._initialised = False
            self._txn_open = False
            self._in_txn.clear()
        earlier = self._in_txn.get((state.task.topic, state.task.partition))
        if earlier is not None and earlier is not state:
            # The partition was let go without waiting for its transaction (a worker cut off
            # from ZooKeeper abandons its partitions) and comes back before that transaction
            # committed. Its records there run past the new start offset, which came from the
            # last committed checkpoint: committing them now would copy them twice (seen in
            # the 30-minute chaos run). Abort; every partition in it resumes from its checkpoint.
            self._abort(f"{state.task} added again while its earlier copy was in the open transaction")
        super()._add(state, offset)
        # The start offset becomes the durable checkpoint in the next transaction, so that a
        # later owner resolves `latest` or `earliest` no more.
        state.durable = offset
        self._in_txn[(state.task.topic, state.task.partition)] = state
        self._commit_soon = True

    def _release(self, state: PartitionState, done: Any) -> None:
        if (state.task.topic, state.task.partition) in self._in_txn:
            self._commit_soon = True  # a released partition ends with a committed transaction
        super()._release(state, done)

    def abandon(self, state: PartitionState) -> threading.Event | None:
        """Stop the partition and abort the open transaction that holds it, instead of the
        commit a release asks for; the event is set once that transaction can no longer commit.

        Why wait: a cut-off worker that gets the partition back soon restarts it from the
        checkpoint it reads then. A transaction of the earlier copy still committing after
        that read puts its records on the destination twice (the same transactional id cannot
        fence itself). An abort whose commit was already asked for settles with a new producer,
        as any commit of unknown outcome does."""
        done = threading.Event()
        if self._loop_ended():
            state.fetching = False
            done.set()
            return done
        self._commands.put(partial(self._abandon, state, done))
        return done

    def _abandon(self, state: PartitionState, done: threading.Event) -> None:
        if self._in_txn.get((state.task.topic, state.task.partition)) is state and self._fenced is None:
            self._abort(f"{state.task} abandoned: the worker is cut off from coordination")
        RecordPipeline._release(self, state, done)

    def _released(self, state: PartitionState) -> bool:
        if self._fenced is not None:
            return True
        key = (state.task.topic, state.task.partition)
        return super()._released(state) and self._in_txn.get(key) is not state

    def _produce(
        self, state: PartitionState, tracker: AckTracker, message: Message, offset: int, *, source_gap: bool
    ) -> bool:
        if self._abort_needed or self._commit_offsets is not None:
            # Nothing more goes into a transaction that will be aborted, or that was asked to
            # commit (librdkafka refuses records then); they wait in the backlog.
            return False
        if not self._txn_open:
            try:
                # librdkafka waits for its main thread's answer to this one without a bound.
                self._transaction_call(self._producer.begin_transaction)
            except KafkaException as exc:
                self._on_transaction_error(exc.args[0], "beginning a transaction")
                return True
            except CallHung as exc:
                self._replace_producer(f"{exc} (a librdkafka hang)", outcome_known=True)
                return True
            self._txn_open = True
            self._txn_started = time.monotonic()
            self._txn_bytes = 0
        if not super()._produce(state, tracker, message, offset, source_gap=source_gap):
            return False
        value, key = message.value(), message.key()
        self._txn_bytes += (len(value) if value else 0) + (len(key) if key else 0)
        self._in_txn[(state.task.topic, state.task.partition)] = state
        return True

    def _stretch_ready(self) -> bool:
        # The open transaction takes more records: none while it is to be aborted or was asked
        # to commit, and the first record of a transaction goes alone (it begins it).
        return self._txn_open and not self._abort_needed and self._commit_offsets is None

    def _stretch_sent(self, state: PartitionState, messages: list[Any], first: int, count: int) -> None:
        chosen = messages[first : first + count]
        self._txn_bytes += sum(map(len, filter(None, map(_message_value, chosen)))) + sum(
            map(len, filter(None, map(_message_key, chosen)))
        )
        self._in_txn[(state.task.topic, state.task.partition)] = state

    def _begin_rewind(self, state: PartitionState, backoff_s: float) -> None:
        # Records after the rewind point may already sit acknowledged in the open transaction:
        # resending them inside it would duplicate them. Abort, and start over from the
        # committed checkpoints.
        self._abort_needed = True

    def _delivered(
        self,
        state: PartitionState,
        tracker: AckTracker,
        offset: int,
        size: int,
        error: KafkaError | None,
        message: Message,
    ) -> None:
        if error is None:
            super()._delivered(state, tracker, offset, size, error, message)
            return
        tracker.failed(offset)
        if state.tracker is not tracker or self._fenced is not None:
            return  # a record of a transaction already aborted, or of a fenced producer
        if error.fatal() or error.code() in FATAL_CODES:
            self._fence(describe_error(error))
            return
        if error.code() in ACCESS_DENIED and state.error is None:
            # Our _begin_rewind aborts the transaction; the restart waits ACCESS_RETRY_S.
            self._wait_for_access(state, explain(self._destination_props, error, state.task.destination_topic))
        elif delivery_error_is_permanent(error) and error.code() not in (KafkaError._PURGE_QUEUE, KafkaError._DESTROY):
            # _DESTROY: librdkafka dropped the partition's queue (teardown, or the partition left
            # its metadata); the restart after the abort says which.
            self._fail(state, self._produce_failure(state, error))
        if not self._abort_needed:
            log.warning("partition %s: delivery failed (%s); aborting the transaction", state.task, error)
            self._abort_needed = True

    def _produce_error(self, state: PartitionState, error: KafkaError) -> None:
        if error.fatal() or error.code() in FATAL_CODES:
            self._fence(f"{describe_error(error)} while producing")
        elif error.txn_requires_abort():
            self._abort_needed = True
        else:
            super()._produce_error(state, error)

    def _after_poll(self) -> None:
        now = time.monotonic()
        if self._abort_needed:
            self._abort("a record failed")
            return
        if self._txn_open:
            age = now - self._txn_started
            caught_up = self._drained and not self._backlog and age >= self._linger_s
            due = self._commit_soon or caught_up or age >= self._interval_s or self._txn_bytes >= self._max_bytes
        else:
            due = self._commit_soon or (now - self._txn_started >= self._interval_s and self._moved_without_records())
        if due:
            self._commit()

    def _moved_without_records(self) -> bool:
        """Checkpoints that moved over offsets holding no record (transaction markers)."""
        moved = False
        for key, state in self._states.items():
            tracker = state.tracker
            durable = state.durable
            if tracker is not None and not tracker.pending and durable is not None and tracker.position > durable:
                self._in_txn[key] = state
                moved = True
        if not moved:
            self._txn_started = time.monotonic()  # look again one interval later
        return moved

    # -- transactions --------------------------------------------------------------------------

    def _commit(self) -> None:
        self._commit_soon = False
        if not self._in_txn and not self._txn_open:
            return
        stage = "committing"
        try:
            if not self._txn_open:
                self._transaction_call(self._producer.begin_transaction)
                self._txn_open = True
            if self._commit_offsets is None:
                # Every record of the transaction acknowledged (or failed) first: the offsets
                # sent with it must be exactly the end of what it holds.
                self._bounded_flush()
                self._book.settle()  # the reports the flush served
                if self._abort_needed or any(
                    s.tracker is None or s.tracker.in_flight or s.tracker.blocked for s in self._in_txn.values()
                ):
                    self._abort("records of the transaction were not acknowledged")
                    return
                if not self._write_runs():
                    return
                offsets = {s.task: s.tracker.position for s in self._in_txn.values() if s.tracker is not None}
                # Both calls may block past their timeout when a coordinator went away (deadline.py).
                self._calls.call(
                    self._producer.send_offsets_to_transaction,
                    transaction_offsets(offsets),
                    self._metadata,
                    TRANSACTION_TIMEOUT_S,
                    deadline_s=HUNG_AFTER_S,
                )
                # Sent: a retry after a timeout only asks to commit again (librdkafka refuses new
                # offsets once a commit was asked for), with exactly these offsets.
                self._commit_offsets = offsets
            stage = "ending"
            self._calls.call(self._producer.commit_transaction, TRANSACTION_TIMEOUT_S, deadline_s=HUNG_AFTER_S)
        except KafkaException as exc:
            self._on_transaction_error(exc.args[0], stage)
            return
        except CallHung as exc:
            # A commit that never returned may still have committed: its outcome is unknown.
            self._replace_producer(f"{exc} (a librdkafka hang)", outcome_known=stage != "ending")
            return
        offsets, self._commit_offsets = self._commit_offsets or {}, None
        self._txn_open = False
        self._txn_started = time.monotonic()
        self._retries = 0
        for state in self._in_txn.values():
            state.runs.keep()
            if state.task in offsets:
                state.durable = offsets[state.task]
        self._in_txn.clear()

    def _transaction_call(self, method: Any, *args: Any) -> Any:
        return self._calls.call(method, *args, deadline_s=HUNG_AFTER_S)

    def _bounded_flush(self) -> None:
        """``flush()`` inside a transaction, with a deadline: at it the producer is replaced
        (CallHung). In two runs of test_a_frozen_worker_past_its_session, a worker woken from
        SIGSTOP past its session was fenced while the offset map's runs were being added to its
        transaction, and its pipeline went silent for minutes (no error, no release served)
        while partitions were assigned to it: the map's flush is the call it was in then, by
        the log's order (not confirmed by a stack), though flush's own timeout is 60 s."""
        producer = self._producer

        def flush() -> int:  # (named: CallHung's message says which call hung)
            return int(client_call(producer.flush, TRANSACTION_TIMEOUT_S))

        self._calls.call(flush, deadline_s=HUNG_AFTER_S)

    def _write_runs(self) -> bool:
        """Put the runs of the transaction's records into it (all acknowledged: their
        destination offsets are known). False when they could not be and it was aborted."""
        runs = [
            (s.task.topic, s.task.partition, s.task.destination_topic, run)
            for s in self._in_txn.values()
            for run in s.runs.take()  # taken even without a map: a route without one keeps none
        ]
        if self._map is None:
            return True
        failure = self._map.put(self._producer, runs, self._bounded_flush)
        if failure is not None:
            self._abort(f"the offset map's runs were not written: {failure}")
        return failure is None

    def _flush_on_stop(self, timeout_s: float) -> int:
        if self._fenced is None and self._initialised:
            self._commit()
        return 0

    def _close_producer(self, unacknowledged: int) -> None:
        # close() would abort an open transaction and flush without a bound: a live producer
        # left mid-transaction is left to the garbage collector instead. A fenced one can do
        # nothing more (its abort fails at once): what it still holds is dropped, then it closes.
        if self._fenced is not None:
            super()._close_producer(1)
        elif not self._txn_open:
            super()._close_producer(unacknowledged)
