"""Kafka transactions for raw record batches: a pure model of one transactional producer session.

A session is one transactional id with one producer id and epoch (InitProducerId). It runs
transactions one after the other; each one writes whole record batches to destination
partitions and may commit consumer-group offsets (the source checkpoints) with them, then ends
with EndTxn (commit or abort). :class:`TransactionModel` holds the state and says which request
is due next (:meth:`TransactionModel.due`) given the answers so far; it sends nothing itself
(:mod:`strait.worker.batch.txnsession` does the I/O) and reads the clock only as ``now``
arguments, so it is tested over generated answer sequences.

The order of one transaction, as the Java producer's ``TransactionManager`` orders it:

1. ``AddPartitionsToTxn`` (to the transaction coordinator) for every partition the
   transaction writes, before the first Produce to it; one request in flight at a time, all
   partitions written meanwhile go in the next one.
2. ``Produce`` of each batch to the partition's leader, once its partition was added (the
   broker verifies it with the coordinator and refuses a batch of a partition not in the
   transaction). Sequences continue per partition across the transactions of one epoch, at
   most ``max_in_flight`` batches in flight per partition (one until the partition appended a
   batch of the epoch), retried batches keep their sequence. An abort that wrote anything ends
   the epoch: InitProducerId again, sequences from 0.
3. ``AddOffsetsToTxn`` (transaction coordinator) for each consumer group whose offsets the
   transaction commits, then ``FindCoordinator`` of the group and ``TxnOffsetCommit`` to the
   group coordinator.
4. ``EndTxn`` once every request of the transaction was answered (and for a commit, every batch
   was appended and every offset committed). A transaction that sent nothing to the coordinator
   ends without a request.

Errors: ``COORDINATOR_LOAD_IN_PROGRESS`` and ``CONCURRENT_TRANSACTIONS`` (the previous
transaction's markers still being written) are retried after a backoff, the latter's first
retry after only CONCURRENT_BACKOFF_S (it answers every transaction's first AddPartitionsToTxn
that comes sooner than the markers are written, a few milliseconds on a healthy cluster, and a
transaction waits for it: a longer backoff is paid by every transaction); ``NOT_COORDINATOR``
and ``COORDINATOR_NOT_AVAILABLE`` look the coordinator up again first. Fencing
(``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``: another session took the transactional id)
and errors no retry can mend (``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``, an invalid transaction
state) end the session: :class:`SessionDead` (:class:`ProducerFenced` for fencing), and nothing
is sent after it. Errors that spoil only the current transaction (a batch refused for good, a
topic or group not authorized) raise :class:`TransactionAbortable`: only an abort is possible.

Every request carries a deadline (its answer is due by then, else it counts as failed and is
retried); :meth:`TransactionModel.next_wakeup` is the earliest moment something is due.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strait.worker.batch.outcomes import Outcome, error_name, produce_outcome
from strait.worker.batch.sequences import ProducerIdentity, increment_sequence

Key = tuple[str, int]

TRANSACTION_COORDINATOR = 1  # FindCoordinator key types
GROUP_COORDINATOR = 0

# Error codes by their Kafka names.
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
REQUEST_TIMED_OUT = 7
NETWORK_EXCEPTION = 13
DUPLICATE_SEQUENCE_NUMBER = 46
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90

_RETRY = {COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT, NETWORK_EXCEPTION}
CONCURRENT_BACKOFF_S = 0.005
_MOVED = {COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
_FENCED = {PRODUCER_FENCED, INVALID_PRODUCER_EPOCH}
_DEAD = {TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING}


class TransactionError(RuntimeError):
    """A transaction could not go on; ``code`` is the broker's error code (-1: none)."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


class TransactionAbortable(TransactionError):
    """The current transaction cannot commit; abort it (the session can run the next one)."""


class SessionDead(TransactionError):
    """The session can send nothing more: start a new one (with the same transactional id,
    which fences this one and aborts its open transaction)."""


class ProducerFenced(SessionDead):
    """Another session took the transactional id (a newer producer epoch): this one is a zombie."""


class Kind(enum.Enum):
    FIND_COORDINATOR = "FindCoordinator"
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    PRODUCE = "Produce"
    ADD_OFFSETS = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"


class Phase(enum.Enum):
    INITIALIZING = "initializing"  # finding the coordinator, InitProducerId
    READY = "ready"  # no transaction open
    OPEN = "open"  # writing
    COMMITTING = "committing"  # EndTxn(commit) due once everything is answered
    ABORTING = "aborting"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Request:
    """One request due to be sent: ``node`` is the coordinator it goes to (None for Produce:
    the partition's leader); answer by ``deadline`` (the model's clock)."""

    id: int
    kind: Kind
    deadline: float
    node: int | None = None
    transactional_id: str = ""
    producer: ProducerIdentity | None = None
    coordinator_key: str = ""  # FindCoordinator
    coordinator_type: int = TRANSACTION_COORDINATOR
    partitions: tuple[Key, ...] = ()  # AddPartitionsToTxn
    key: Key | None = None  # Produce
    base_sequence: int = -1
    record_count: int = 0
    payload: Any = None
    group: str = ""  # AddOffsetsToTxn, TxnOffsetCommit
    offsets: tuple[tuple[Key, int], ...] = ()
    commit: bool = False  # EndTxn


@dataclass(frozen=True, slots=True)
class Answer:
    """A broker's answer, read into plain values: the request's error code; per partition ones
    for AddPartitionsToTxn and TxnOffsetCommit (``errors``); the coordinator found; the producer
    id and epoch InitProducerId gave."""

    error: int = NONE
    errors: Mapping[Key, int] = field(default_factory=dict)
    node: int | None = None
    producer: ProducerIdentity | None = None
    offset: int = -1  # Produce: the base offset the broker gave the batch (-1: none reported)


class _Batch:
    __slots__ = ("base_sequence", "payload", "record_count", "request", "retry")

    def __init__(self, base_sequence: int, record_count: int, payload: Any) -> None:
        self.base_sequence = base_sequence
        self.record_count = record_count
        self.payload = payload
        self.request: int | None = None  # in flight in this request
        self.retry = False  # failed retriably: sent again once nothing of its partition is in flight


class _Group:
    __slots__ = ("added", "adding", "committing", "unsent")

    def __init__(self) -> None:
        self.added = False  # AddOffsetsToTxn answered
        self.adding: int | None = None
        self.unsent: dict[Key, int] = {}
        self.committing: tuple[int, dict[Key, int]] | None = None


class TransactionModel:
    """The requests of one transactional session; see the module docstring."""

    def __init__(
        self,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        request_timeout_s: float,
        retry_backoff_s: float = 0.05,
        max_backoff_s: float = 1.0,
        max_in_flight: int = 5,
    ) -> None:
        if not transactional_id:
            raise ValueError("a transactional id is needed")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_in_flight = max_in_flight
        self.phase = Phase.INITIALIZING
        self.producer: ProducerIdentity | None = None
        self.failure: TransactionError | None = None  # SessionDead, or the open transaction's TransactionAbortable
        self.transactions = 0  # ended
        self._ids = itertools.count(1)
        self._in_flight: dict[int, Request] = {}
        self._not_before: dict[Hashable, float] = {}  # backoff per retried step
        self._failures: dict[Hashable, int] = {}
        self._coordinator: int | None = None
        self._group_coordinators: dict[str, int] = {}
        self._next_sequence: dict[Key, int] = {}  # per partition, for the whole epoch
        self._confirmed: set[Key] = set()  # partitions that appended a batch of this epoch
        self._new_transaction()

    def _new_transaction(self) -> None:
        self._batches: dict[Key, list[_Batch]] = {}  # unacknowledged, in sequence order
        # Batches of the open transaction appended since the last take_appended(): (partition,
        # payload, base offset), for the offset map's runs.
        self._appended: list[tuple[Key, Any, int]] = []
        self._added: set[Key] = set()
        self._to_add: set[Key] = set()
        self._adding: tuple[int, frozenset[Key]] | None = None
        self._groups: dict[str, _Group] = {}
        self._started = False  # the coordinator knows of the transaction (something was added)
        self._wrote = False  # a sequence was taken

    # -- the caller's operations -----------------------------------------------------------

    def begin(self) -> None:
        self._check()
        if self.phase is not Phase.READY:
            raise TransactionError(f"begin while {self.phase.value}")
        self._new_transaction()
        self.phase = Phase.OPEN

    def write(self, key: Key, record_count: int, payload: Any = None) -> int:
        """Queue one batch of ``record_count`` sequence numbers (its last offset delta + 1) for
        ``key``; ``payload`` comes back in its Produce request. Returns its base sequence."""
        self._check_open()
        if record_count < 1:
            raise ValueError("an empty batch takes no sequence")
        if key not in self._added:
            self._to_add.add(key)
        self._wrote = True
        base = self._next_sequence.get(key, 0)
        self._next_sequence[key] = increment_sequence(base, record_count)
        self._batches.setdefault(key, []).append(_Batch(base, record_count, payload))
        return base

    def take_appended(self) -> list[tuple[Key, Any, int]]:
        """The batches of the open transaction appended since the last call: (partition, the
        payload written, the base offset the broker gave it, -1 if it gave none)."""
        appended, self._appended = self._appended, []
        return appended

    def send_offsets(self, group: str, offsets: Mapping[Key, int]) -> None:
        """Commit ``offsets`` (next offset to read, per source partition) of ``group`` with the
        transaction; a later call for the same group and partition wins."""
        self._check_open()
        if offsets:
            self._groups.setdefault(group, _Group()).unsent.update(offsets)

    def commit(self) -> None:
        self._check_open()
        self.phase = Phase.COMMITTING

    def abort(self) -> None:
        """Abort the open transaction (also after :class:`TransactionAbortable`); batches not yet
        sent are dropped, those in flight answered first."""
        if self.phase is Phase.DEAD:
            raise self._failed()
        if self.phase not in (Phase.OPEN, Phase.COMMITTING, Phase.ABORTING):
            raise TransactionError(f"abort while {self.phase.value}")
        self.phase = Phase.ABORTING
        for batches in self._batches.values():
            batches[:] = [b for b in batches if b.request is not None]
            for b in batches:
                b.retry = False
        self._to_add.clear()
        for g in self._groups.values():
            g.unsent.clear()

    def give_up(self, why: str) -> None:
        """The caller's deadline passed: the session is dead (a commit's outcome is unknown; a new
        session with the same transactional id completes or aborts it)."""
        if self.phase is not Phase.DEAD:
            self._die(SessionDead(f"{self.transactional_id}: {why}"))

    @property
    def open_transaction_failed(self) -> TransactionAbortable | None:
        return self.failure if isinstance(self.failure, TransactionAbortable) else None

    def _check(self) -> None:
        if self.phase is Phase.DEAD:
            raise self._failed()

    def _check_open(self) -> None:
        self._check()
        if self.phase is not Phase.OPEN:
            raise TransactionError(f"no open transaction ({self.phase.value})")
        if self.failure is not None:
            raise self.failure

    def _failed(self) -> TransactionError:
        return self.failure if self.failure is not None else SessionDead("session dead")

    # -- what is due -----------------------------------------------------------------------

    @property
    def unacknowledged(self) -> int:
        """Batches of the open transaction not appended yet (sent or not)."""
        return sum(len(batches) for batches in self._batches.values())

    def in_flight(self) -> list[Request]:
        return list(self._in_flight.values())

    def due(self, now: float) -> list[Request]:
        """The requests to send now (counted in flight from here on)."""
        if self.phase is Phase.DEAD:
            return []
        out: list[Request] = []
        needs_coordinator = self.phase is Phase.INITIALIZING or self._coordinator_work()
        if needs_coordinator and self._coordinator is None:
            self._maybe(out, now, ("find", ""), Kind.FIND_COORDINATOR, coordinator_key=self.transactional_id)
            return out
        if self.phase is Phase.INITIALIZING:
            self._maybe(out, now, ("init",), Kind.INIT_PRODUCER_ID, node=self._coordinator)
            return out
        if self.phase is Phase.READY:
            return out
        producing = self.phase in (Phase.OPEN, Phase.COMMITTING) and self.failure is None
        if producing and self._to_add and self._adding is None:
            partitions = tuple(sorted(self._to_add))
            if self._maybe(out, now, ("add",), Kind.ADD_PARTITIONS, node=self._coordinator, partitions=partitions):
                self._adding = (out[-1].id, frozenset(partitions))
                self._to_add.clear()
                self._started = True
        if producing:
            for key in sorted(self._batches.keys() & self._added):
                self._produce(out, now, key)
            for group, g in sorted(self._groups.items()):
                self._offsets(out, now, group, g)
        if self._can_end():
            if self._started:
                self._maybe(
                    out, now, ("end",), Kind.END_TXN, node=self._coordinator, commit=self.phase is Phase.COMMITTING
                )
            else:
                self._ended()
                return out + self.due(now)  # InitProducerId, when the abort ended the epoch
        return out

    def _coordinator_work(self) -> bool:
        if self.phase not in (Phase.OPEN, Phase.COMMITTING, Phase.ABORTING):
            return False
        return bool(self._to_add) or any(g.unsent and not g.added for g in self._groups.values()) or self._can_end()

    def _produce(self, out: list[Request], now: float, key: Key) -> None:
        batches = self._batches[key]
        in_flight = sum(1 for b in batches if b.request is not None)
        # One batch at a time until the partition appended one of this epoch: a broker takes any
        # first sequence from a producer it does not know there, so a later batch could land
        # before a first one that failed retriably, which would then be out of order for good.
        limit = self.max_in_flight if key in self._confirmed else 1
        if any(b.retry for b in batches):
            if in_flight or now < self._not_before.get(("produce", key), 0.0):
                return
            for b in batches:
                b.retry = False
        for b in batches:
            if in_flight >= limit:
                break
            if b.request is None:
                request = self._request(
                    now,
                    Kind.PRODUCE,
                    key=key,
                    base_sequence=b.base_sequence,
                    record_count=b.record_count,
                    payload=b.payload,
                )
                b.request = request.id
                out.append(request)
                in_flight += 1

    def _offsets(self, out: list[Request], now: float, group: str, g: _Group) -> None:
        if not g.added:
            step = ("add_offsets", group)
            if (
                g.unsent
                and g.adding is None
                and self._maybe(out, now, step, Kind.ADD_OFFSETS, node=self._coordinator, group=group)
            ):
                g.adding = out[-1].id
                self._started = True
            return
        if not g.unsent or g.committing is not None:
            return
        node = self._group_coordinators.get(group)
        if node is None:
            self._maybe(
                out,
                now,
                ("find", group),
                Kind.FIND_COORDINATOR,
                coordinator_key=group,
                coordinator_type=GROUP_COORDINATOR,
            )
            return
        offsets = dict(g.unsent)
        if self._maybe(
            out,
            now,
            ("offsets", group),
            Kind.TXN_OFFSET_COMMIT,
            node=node,
            group=group,
            offsets=tuple(sorted(offsets.items())),
        ):
            g.committing = (out[-1].id, offsets)
            g.unsent.clear()

    def _can_end(self) -> bool:
        """EndTxn is due: commit or abort asked, and every request of the transaction answered
        (for a commit: every batch appended and every offset committed as well)."""
        if self.phase is Phase.COMMITTING:
            if self.failure is not None or self._to_add:
                return False
            if any(self._batches.values()) or any(g.unsent or not g.added for g in self._groups.values()):
                return False
        elif self.phase is not Phase.ABORTING:
            return False
        return not any(r.kind is not Kind.FIND_COORDINATOR for r in self._in_flight.values())

    def _maybe(self, out: list[Request], now: float, step: Hashable, kind: Kind, **fields: Any) -> bool:
        """Add a request for ``step`` unless one is in flight or its backoff has not passed."""
        if any(r.kind is kind and self._step(r) == step for r in self._in_flight.values()):
            return False
        if now < self._not_before.get(step, 0.0):
            return False
        out.append(self._request(now, kind, **fields))
        return True

    def _request(self, now: float, kind: Kind, **fields: Any) -> Request:
        request = Request(
            id=next(self._ids),
            kind=kind,
            deadline=now + self.request_timeout_s,
            transactional_id=self.transactional_id,
            producer=self.producer,
            **fields,
        )
        self._in_flight[request.id] = request
        return request

    @staticmethod
    def _step(r: Request) -> Hashable:
        if r.kind is Kind.FIND_COORDINATOR:
            return ("find", "" if r.coordinator_type == TRANSACTION_COORDINATOR else r.coordinator_key)
        if r.kind is Kind.INIT_PRODUCER_ID:
            return ("init",)
        if r.kind is Kind.ADD_PARTITIONS:
            return ("add",)
        if r.kind is Kind.ADD_OFFSETS:
            return ("add_offsets", r.group)
        if r.kind is Kind.TXN_OFFSET_COMMIT:
            return ("offsets", r.group)
        if r.kind is Kind.END_TXN:
            return ("end",)
        return ("produce", r.key)

    def next_wakeup(self, now: float) -> float | None:
        """The earliest deadline of a request in flight or end of a backoff still to come (None:
        nothing to wait for)."""
        times = [r.deadline for r in self._in_flight.values()]
        times += [t for t in self._not_before.values() if t > now]
        return min(times) if times else None

    def expire(self, now: float) -> None:
        """Requests past their deadline count as failed (no answer)."""
        for request in [r for r in self._in_flight.values() if r.deadline <= now]:
            self.failed(request.id, now, "no answer before the deadline")

    # -- answers ---------------------------------------------------------------------------

    def _backoff(self, step: Hashable, now: float, *, base_s: float | None = None) -> None:
        n = self._failures.get(step, 0)
        self._failures[step] = n + 1
        base = self.retry_backoff_s if base_s is None else min(base_s, self.retry_backoff_s)
        self._not_before[step] = now + min(self.max_backoff_s, base * 2**n)

    def _succeeded(self, step: Hashable) -> None:
        self._failures.pop(step, None)
        self._not_before.pop(step, None)

    def failed(self, request_id: int, now: float, why: str = "") -> None:
        """No answer to a request (connection lost, deadline): try again after a backoff; a
        coordinator request looks the coordinator up again first."""
        request = self._in_flight.get(request_id)
        if request is None:
            return
        code = NETWORK_EXCEPTION if request.node is None else NOT_COORDINATOR
        self.answered(request_id, Answer(error=code), now)

    def answered(self, request_id: int, answer: Answer, now: float) -> None:
        request = self._in_flight.pop(request_id, None)
        if request is None or self.phase is Phase.DEAD:
            return  # an answer after the deadline (already retried) or after the end
        if request.kind is Kind.PRODUCE:
            self._answer_produce(request, answer.error, now, answer.offset)
            return
        step = self._step(request)
        codes = [answer.error, *answer.errors.values()]
        worst = next((c for c in codes if c not in (NONE, OPERATION_NOT_ATTEMPTED)), NONE)
        if request.kind is Kind.FIND_COORDINATOR and worst == NONE and (answer.node is None or answer.node < 0):
            worst = COORDINATOR_NOT_AVAILABLE
        if worst in _FENCED:
            self._die(ProducerFenced(self._message(request, worst), worst))
            return
        if worst in _DEAD:
            self._die(SessionDead(self._message(request, worst), worst))
            return
        if worst in _MOVED or worst in _RETRY:
            if worst in _MOVED:
                self._forget_coordinator(request)
            self._backoff(step, now, base_s=CONCURRENT_BACKOFF_S if worst == CONCURRENT_TRANSACTIONS else None)
            self._retry(request)
            return
        if worst != NONE:
            self._abortable(request, worst)
            self._retry(request)  # never sent again: abort drops what is unsent
            return
        self._succeeded(step)
        self._done(request, answer)

    def _retry(self, request: Request) -> None:
        """Put back what ``request`` carried so it goes again (or is dropped by an abort)."""
        if request.kind is Kind.ADD_PARTITIONS:
            self._adding = None
            if self.phase is not Phase.ABORTING:
                self._to_add.update(request.partitions)
        elif request.kind is Kind.ADD_OFFSETS:
            self._groups[request.group].adding = None
        elif request.kind is Kind.TXN_OFFSET_COMMIT:
            g = self._groups[request.group]
            if g.committing is not None and self.phase is not Phase.ABORTING:
                g.unsent = {**g.committing[1], **g.unsent}
            g.committing = None

    def _done(self, request: Request, answer: Answer) -> None:
        kind = request.kind
        if kind is Kind.FIND_COORDINATOR:
            assert answer.node is not None
            if request.coordinator_type == TRANSACTION_COORDINATOR:
                self._coordinator = answer.node
            else:
                self._group_coordinators[request.coordinator_key] = answer.node
        elif kind is Kind.INIT_PRODUCER_ID:
            if answer.producer is None:
                raise ValueError("an InitProducerId answer without a producer id")
            self.producer = answer.producer
            self._next_sequence.clear()
            self._confirmed.clear()
            self.phase = Phase.READY
        elif kind is Kind.ADD_PARTITIONS:
            self._adding = None
            self._added.update(request.partitions)
        elif kind is Kind.ADD_OFFSETS:
            g = self._groups[request.group]
            g.adding = None
            g.added = True
        elif kind is Kind.TXN_OFFSET_COMMIT:
            self._groups[request.group].committing = None
        elif kind is Kind.END_TXN:
            self._ended()

    def _ended(self) -> None:
        """The transaction is over. After an abort that wrote anything the epoch ends too:
        batches dropped unsent or refused left gaps in the sequences, so InitProducerId is asked
        again (with the current producer id and epoch: a session fenced meanwhile gets
        PRODUCER_FENCED instead of taking the transactional id back), and sequences restart at 0."""
        self.transactions += 1
        self.failure = None
        renew = self.phase is Phase.ABORTING and self._wrote
        self._new_transaction()
        self.phase = Phase.INITIALIZING if renew else Phase.READY

    def _answer_produce(self, request: Request, code: int, now: float, offset: int = -1) -> None:
        assert request.key is not None
        batches = self._batches.get(request.key, [])
        batch = next((b for b in batches if b.request == request.id), None)
        if batch is None:
            return
        batch.request = None
        outcome = produce_outcome(code, transactional=True)
        if outcome.outcome is Outcome.OK:
            batches.remove(batch)
            self._confirmed.add(request.key)
            self._appended.append((request.key, batch.payload, offset))
            return
        if code in _FENCED or outcome.outcome is Outcome.FENCED:
            self._die(ProducerFenced(self._message(request, code), code))
            return
        if code in _DEAD - {INVALID_TXN_STATE}:
            self._die(SessionDead(self._message(request, code), code))
            return
        # Out of order behind an earlier batch not yet appended: it goes again after that one.
        earlier_unacknowledged = batches.index(batch) > 0
        retry = outcome.outcome is Outcome.RETRY or (code == OUT_OF_ORDER_SEQUENCE_NUMBER and earlier_unacknowledged)
        if retry and self.phase is not Phase.ABORTING:
            batch.retry = True
            self._backoff(("produce", request.key), now)
            return
        if self.phase is Phase.ABORTING:
            batches.remove(batch)  # not sent again: the transaction is being aborted
            return
        batch.retry = True  # kept unacknowledged: the transaction cannot commit
        self._abortable(request, code)

    def _forget_coordinator(self, request: Request) -> None:
        if request.kind is Kind.TXN_OFFSET_COMMIT or (
            request.kind is Kind.FIND_COORDINATOR and request.coordinator_type == GROUP_COORDINATOR
        ):
            self._group_coordinators.pop(request.group or request.coordinator_key, None)
        else:
            self._coordinator = None

    def _abortable(self, request: Request, code: int) -> None:
        """An error no retry mends: the open transaction can only abort. While initializing, or
        for a request the abort itself needs, the session is dead."""
        if self.phase in (Phase.OPEN, Phase.COMMITTING):
            if self.failure is None:
                self.failure = TransactionAbortable(self._message(request, code), code)
            self.phase = Phase.OPEN  # only abort() can follow
        elif self.phase is Phase.INITIALIZING or request.kind in (Kind.END_TXN, Kind.FIND_COORDINATOR):
            self._die(SessionDead(self._message(request, code), code))

    def _die(self, error: TransactionError) -> None:
        self.phase = Phase.DEAD
        self.failure = error
        self._in_flight.clear()
        self._not_before.clear()

    def _message(self, request: Request, code: int) -> str:
        where = f" {request.key[0]}-{request.key[1]}" if request.key else f" {request.group}" if request.group else ""
        return f"{self.transactional_id}: {request.kind.value}{where}: {error_name(code) or code}"
