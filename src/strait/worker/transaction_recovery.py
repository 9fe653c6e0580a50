"""What a failed, hung or fenced transaction does to the exactly-once pipeline.

:class:`TransactionRecovery` is mixed into :class:`strait.worker.transactional.TransactionalPipeline`,
which owns the clients, the partitions, the loop and the commit. Here is everything that ends
a transaction any other way:

- an abort (a failed record, an abortable error): every partition in the transaction goes back
  to its last committed checkpoint (:attr:`PartitionState.durable`) and is fetched again;
- a transaction call that is refused, retried in vain or hangs past its deadline
  (librdkafka #5456/#5511): a new producer of the same transactional id fences the old one and
  settles its transaction; after a commit whose outcome is unknown its partitions stay held
  until then, and restart from the checkpoints the destination holds;
- a fatal error (``_FENCED``): the pipeline's partitions stop for good.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from strait.worker.backlog import Key, Run
from strait.worker.checkpoint import AckTracker
from strait.worker.deadline import CallHung
from strait.worker.pipeline import ACCESS_RETRY_S, PartitionState, describe_error
from strait.worker.source_partitions import SourcePartitions

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_S = 60.0
# Retriable transaction errors in a row before the producer is replaced.
MAX_RETRIES = 5
# The producer is done for: produce() reports a fatal state as _FATAL without the fatal flag.
FATAL_CODES = frozenset({KafkaError._FENCED, KafkaError._FATAL, KafkaError.PRODUCER_FENCED})


class TransactionRecovery:
    """Abort, replace the producer, settle an unknown outcome, fence (see the module doc)."""

    name: str
    _producer: Any
    _source: SourcePartitions
    _transactional_id: str
    _destination_props: Mapping[str, Any]
    _states: dict[Key, PartitionState]
    _draining: list[tuple[PartitionState, threading.Event]]
    _backlog: deque[Run]
    _in_txn: dict[Key, PartitionState]
    _unresolved: dict[Key, PartitionState]
    _hung_producers: list[Any]
    _commit_offsets: dict[Any, int] | None
    _fenced: str | None
    _initialised: bool
    _txn_open: bool
    _txn_started: float
    _abort_needed: bool
    _commit_soon: bool
    _retries: int

    def _make_producer(self, destination: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def _fail(self, state: PartitionState, reason: str) -> None:
        raise NotImplementedError

    def _purge(self, key: Key) -> None:
        raise NotImplementedError

    def _reposition(self, key: Key, offset: int) -> None:
        raise NotImplementedError

    def _finish_releases(self) -> None:
        raise NotImplementedError

    def _transaction_call(self, method: Any, *args: Any) -> Any:
        """A transaction call with a deadline (strait.worker.deadline); CallHung past it."""
        raise NotImplementedError

    def _renew_producer(self, reason: str) -> None:
        """A producer that never took the id (its init hung) is swapped for a fresh one."""
        log.error(
            "pipeline %s: %s; taking transactional id %s with a new producer", self.name, reason, self._transactional_id
        )
        self._hung_producers.append(self._producer)
        self._producer = self._make_producer(self._destination_props)
        self._initialised = False

    def _replace_producer(self, reason: str, *, outcome_known: bool) -> None:
        """Start over with a new producer of the same transactional id.

        Its ``init_transactions`` (next loop turn) fences the old producer and completes its
        open transaction, so nothing more of it can change. A transaction that was never asked
        to commit is aborted then: its partitions resume from their last committed checkpoints
        at once. One that was asked to commit (``outcome_known=False``) may complete either
        way: its partitions stay held (a release waits) until the new producer is ready, then
        stop with a ``fenced:`` error, so the worker starts them again from the checkpoints the
        destination holds, whichever way it went. The old producer stays referenced: a helper
        thread may still be blocked inside it.
        """
        log.error(
            "pipeline %s: %s; replacing producer %s: %d partition(s) resume from their %scheckpoints",
            self.name,
            reason,
            self._transactional_id,
            len(self._in_txn),
            "" if outcome_known else "committed (re-read) ",
        )
        self._hung_producers.append(self._producer)
        self._producer = self._make_producer(self._destination_props)
        self._initialised = False
        self._txn_open = False
        self._abort_needed = False
        self._commit_offsets = None
        self._retries = 0
        self._txn_started = time.monotonic()
        if not outcome_known:
            self._unresolved = {**self._unresolved, **self._in_txn}
            for key, state in self._unresolved.items():
                if self._states.get(key) is state and state.fetching:
                    self._purge(key)
                    self._source.pause(key)
            return
        for key, state in list(self._in_txn.items()):
            self._restart_from_durable(key, state)
        self._in_txn.clear()
        self._finish_releases()

    def _resolved(self) -> None:
        """The new producer is ready: the unknown outcome is settled, on the destination."""
        for key, state in self._unresolved.items():
            if self._in_txn.get(key) is state:
                del self._in_txn[key]
            state.runs.rollback()
            if state.durable is not None:
                state.tracker = AckTracker(state.durable)
            self._fail(state, "fenced: the outcome of a transaction is unknown; restart from the committed checkpoint")
        self._unresolved = {}
        self._finish_releases()

    def _abort(self, reason: str) -> None:
        if self._commit_offsets is not None:
            # Its commit was asked for and not answered yet (a retry is due): it may have
            # happened, and an abort now (refused, or a no-op) cannot tell. Resending from the
            # last checkpoint seen committed would copy the whole transaction again; only a new
            # producer settles it, and the partitions restart from what the destination holds.
            self._replace_producer(f"{reason} while a commit was unanswered", outcome_known=False)
            return
        log.warning("pipeline %s: aborting the transaction (%s); resending from the checkpoints", self.name, reason)
        self._abort_needed = False
        if self._txn_open:
            try:
                self._transaction_call(self._producer.abort_transaction, TRANSACTION_TIMEOUT_S)
            except KafkaException as exc:
                self._on_transaction_error(exc.args[0], "aborting")
                return
            except CallHung as exc:
                # The abort never returned: a new producer's init aborts that transaction.
                self._replace_producer(f"{exc} (a librdkafka hang)", outcome_known=True)
                return
        self._txn_open = False
        self._commit_offsets = None
        self._retries = 0
        self._txn_started = time.monotonic()
        for key, state in list(self._in_txn.items()):
            self._restart_from_durable(key, state)
        self._in_txn.clear()

    def _restart_from_durable(self, key: Key, state: PartitionState) -> None:
        """Forget everything after the last committed checkpoint and fetch from there again."""
        state.runs.rollback()
        durable = state.durable if state.durable is not None else (state.tracker.position if state.tracker else 0)
        state.tracker = AckTracker(durable)
        state.rewinds += 1
        state.rewind_at = None
        if self._states.get(key) is state and state.fetching:
            if state.waiting is not None:
                # Refused by the cluster: the loop's rewind seeks to the checkpoint later.
                self._purge(key)
                self._source.pause(key)
                state.rewind_at = time.monotonic() + ACCESS_RETRY_S
                return
            self._reposition(key, durable)
            self._source.resume_at(key, durable)

    def _on_transaction_error(self, error: KafkaError, doing: str) -> None:
        if error.fatal() or error.code() in FATAL_CODES:
            self._fence(f"{describe_error(error)} while {doing}")
        elif error.txn_requires_abort():
            self._abort(f"{describe_error(error)} while {doing}")
        elif error.retriable() and self._retries < MAX_RETRIES:
            # The same call is tried again on the next turn: an abort stays an abort, and a
            # commit whose offsets were sent only asks to commit again.
            self._retries += 1
            log.warning("pipeline %s: %s while %s; trying again", self.name, describe_error(error), doing)
            if doing == "aborting":
                self._abort_needed = True
            else:
                self._commit_soon = True
        else:
            # Not retriable (e.g. a call refused in the producer's current state), or retried
            # in vain: only a new producer settles the transaction. If a commit was asked for,
            # it may have happened.
            self._replace_producer(f"{describe_error(error)} while {doing}", outcome_known=self._commit_offsets is None)

    def _fence(self, reason: str) -> None:
        log.error("pipeline %s: producer %s can write no more: %s", self.name, self._transactional_id, reason)
        self._fenced = reason
        for state in {*self._states.values(), *self._in_txn.values(), *(s for s, _ in self._draining)}:
            self._fail(state, f"fenced: {reason}")
            state.runs.rollback()
            # The fenced producer's open transaction is aborted: none of its records will ever
            # be acknowledged, and none is in flight for us any more. A release must not wait
            # for them (the producer may be replaced before they are reported).
            tracker = state.tracker
            durable = state.durable if state.durable is not None else (tracker.position if tracker else None)
            if durable is not None:
                state.tracker = AckTracker(durable)
        self._in_txn.clear()
        self._unresolved = {}
        self._commit_offsets = None
        self._backlog.clear()
        self._txn_open = False
        self._finish_releases()
