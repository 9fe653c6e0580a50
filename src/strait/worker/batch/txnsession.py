"""A transactional session for raw record batches: the I/O of
:class:`strait.worker.batch.transactions.TransactionModel` over a :class:`ClusterLink`.

Batches are copied as they are (:func:`strait.worker.batch.records.rewrite` sets our producer
id, epoch and sequence and the transactional bit, and computes the new CRC; the records stay
byte for byte). Every blocking call (:meth:`TransactionalSession.init`, :meth:`commit`,
:meth:`abort`, :meth:`flush`) takes a deadline in seconds: past it the session is given up
(:class:`SessionDead`; a commit's outcome is then unknown, and a new session with the same
transactional id completes or aborts it). Each request also has its own deadline
(``request_timeout_s``), after which it counts as failed and is retried.

Protocol versions: the session speaks the transaction protocol of Kafka before KIP-890 part 2
("transaction version 1"), which every broker since 2.5 accepts, Kafka 4.x included whatever
its ``transaction.version`` feature says (the sandbox's Kafka 4.4 finalizes
``transaction.version=2`` and answers these versions the same):

- FindCoordinator v1-4 (key type 1 for the transactional id, 0 for a group);
- InitProducerId v3-4: v3 carries the current producer id and epoch, so a session renewing its
  epoch after an abort is refused (PRODUCER_FENCED) if another session took the id meanwhile;
- AddPartitionsToTxn v3, the last client version (v4+ are broker to broker, for verification);
- Produce v3-9, as the batch pipeline sends it (:data:`PRODUCE_MAX_VERSION`);
- AddOffsetsToTxn v3, TxnOffsetCommit v3 (generation -1, no member: a checkpoint group has no
  members), EndTxn v3-4.

Transaction version 2 would drop the AddPartitionsToTxn and AddOffsetsToTxn round trips (Produce
v12 and TxnOffsetCommit v5 add the partition and group implicitly), but EndTxn v5 bumps the
epoch with every transaction, so sequences restart at 0 each time, and it works only on clusters
whose ``transaction.version`` feature is 2 (a cluster upgraded from 3.x keeps 0 until its
operator finalizes it); the explicit requests cost one round trip per transaction for the
partitions it adds and work everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from strait.worker.batch.answers import produced_partitions
from strait.worker.batch.link import ClusterLink
from strait.worker.batch.outcomes import produce_outcome
from strait.worker.batch.records import RecordBatch, rewrite
from strait.worker.batch.sequences import ProducerIdentity
from strait.worker.batch.transactions import (
    Answer,
    Key,
    Kind,
    Phase,
    Request,
    SessionDead,
    TransactionModel,
)

__all__ = ["TransactionalSession"]


class TransactionalSession:
    """One transactional id's producer on ``link``'s cluster; see the module docstring.

    ``poll(timeout_s)`` drives the link's sockets (default: the link's own client; pass
    :meth:`Links.poll` when the link shares a selector with another).
    """

    def __init__(
        self,
        link: ClusterLink,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60_000,
        request_timeout_s: float = 30.0,
        poll: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        self.link = link
        self.model = TransactionModel(
            transactional_id, transaction_timeout_ms=transaction_timeout_ms, request_timeout_s=request_timeout_s
        )
        self._poll = poll if poll is not None else (lambda s: link.client.poll(timeout_ms=s * 1000))
        self._clock = clock
        # Called while a flush or a commit waits on the destination (the pipeline fetches the
        # next transaction's batches meanwhile); it may not call the session.
        self._meanwhile = meanwhile
        self._leaders: dict[str, dict[int, int]] = {}
        self._sent: list[tuple[tuple[Request, ...], Any]] = []  # model requests and the future of their answer

    @property
    def producer(self) -> ProducerIdentity | None:
        return self.model.producer

    # -- blocking --------------------------------------------------------------------------

    def init(self, *, timeout_s: float) -> ProducerIdentity:
        """Find the transaction coordinator and take the producer id and epoch of the
        transactional id (fencing any older session with it, whose open transaction the
        coordinator aborts)."""
        self._run_until(lambda: self.model.phase is Phase.READY, timeout_s, "InitProducerId")
        assert self.model.producer is not None
        return self.model.producer

    def flush(self, *, timeout_s: float) -> None:
        """Wait until every batch written so far was appended (raises what stops that:
        :class:`TransactionAbortable`, :class:`SessionDead`)."""
        self._run_until(
            lambda: self.model.unacknowledged == 0 or self.model.failure is not None,
            timeout_s,
            "flush",
            self._meanwhile,
        )
        self._raise_failure()

    def commit(self, *, timeout_s: float) -> None:
        """Commit the open transaction: its batches and offsets become visible together.

        Raises :class:`TransactionAbortable` when it cannot commit (call :meth:`abort`),
        :class:`SessionDead` (:class:`ProducerFenced`) when the session is over.
        """
        self._raise_failure()
        self.model.commit()
        self._run_until(lambda: self.model.phase is not Phase.COMMITTING, timeout_s, "commit", self._meanwhile)
        self._raise_failure()

    def abort(self, *, timeout_s: float) -> None:
        """Abort the open transaction; returns once the session can begin the next one."""
        self.model.abort()
        self._run_until(lambda: self.model.phase is Phase.READY, timeout_s, "abort")

    # -- non-blocking ----------------------------------------------------------------------

    def begin(self) -> None:
        self.model.begin()

    def write(self, key: Key, batch: RecordBatch) -> int:
        """Queue one source batch for destination partition ``key`` (sent by the next
        :meth:`pump` or blocking call); its base sequence."""
        if batch.is_control:
            raise ValueError(f"batch at {batch.base_offset} is a control batch: it is never produced")
        if batch.has_inner_gaps:
            raise ValueError(f"batch at {batch.base_offset} has offset gaps: a broker refuses it as a produced batch")
        return self.model.write(key, batch.last_offset_delta + 1, batch)

    def appended(self) -> list[tuple[Key, RecordBatch, int]]:
        """The batches of the open transaction appended since the last call, each with the base
        offset the destination gave it (-1 if none was reported)."""
        return self.model.take_appended()

    def send_offsets(self, group: str, offsets: Mapping[Key, int]) -> None:
        """Commit ``group``'s ``offsets`` (next offset to read) with the open transaction."""
        self.model.send_offsets(group, offsets)

    def pump(self, timeout_s: float = 0.0) -> None:
        """Send what is due, wait up to ``timeout_s`` for answers and read them."""
        self._step()
        self._poll(max(0.0, timeout_s))
        self._step()
        if self.model.phase is Phase.DEAD:
            self._raise_failure()

    # -- the loop --------------------------------------------------------------------------

    def _run_until(
        self, done: Callable[[], bool], timeout_s: float, what: str, meanwhile: Callable[[], None] | None = None
    ) -> None:
        deadline = self._clock() + timeout_s
        while True:
            self._step()
            if self.model.phase is Phase.DEAD:
                self._raise_failure()
            if done():
                return
            if meanwhile is not None:
                meanwhile()
            now = self._clock()
            if now >= deadline:
                self.model.give_up(f"{what} not done within {timeout_s:.1f}s")
                self._raise_failure()
            wake = self.model.next_wakeup(now)
            until = deadline if wake is None else min(deadline, wake)
            self._poll(min(max(0.0, until - now), 1.0))

    def _raise_failure(self) -> None:
        failure = self.model.failure
        if failure is not None:
            raise failure
        if self.model.phase is Phase.DEAD:
            raise SessionDead(f"{self.model.transactional_id}: session dead")

    def _step(self) -> None:
        """Read the answers that came, expire the late ones, send what is due."""
        now = self._clock()
        sent, self._sent = self._sent, []
        for requests, future in sent:
            if not future.is_done:
                self._sent.append((requests, future))
                continue
            for request, answer in self._answers(requests, future):
                if answer is None:
                    self.model.failed(request.id, now, str(future.exception))
                else:
                    self.model.answered(request.id, answer, now)
        self.model.expire(now)
        self._send(self.model.due(now))

    def _send(self, requests: list[Request]) -> None:
        produce: dict[int, list[Request]] = {}
        for r in requests:
            if r.kind is Kind.PRODUCE:
                assert r.key is not None
                node = self._leader(r.key)
                if node is None:
                    self.model.failed(r.id, self._clock(), "no leader")
                    continue
                produce.setdefault(node, []).append(r)
            else:
                node = r.node if r.node is not None else self.link._any_node()
                request = _coordinator_request(r, self.model.transaction_timeout_ms)
                self._sent.append(((r,), self.link.send(node, request)))
        for node, batches in produce.items():
            # One batch per partition in a request (a broker refuses more); the rest in the next
            # requests on the same connection, which the broker handles in order.
            while batches:
                chosen: dict[Key, Request] = {}
                rest: list[Request] = []
                for r in batches:
                    assert r.key is not None
                    if r.key in chosen:
                        rest.append(r)
                    else:
                        chosen[r.key] = r
                data = {key: _rewritten(r) for key, r in chosen.items()}
                future = self.link.produce(
                    node,
                    data,
                    timeout_ms=int(self.model.request_timeout_s * 1000),
                    transactional_id=self.model.transactional_id,
                )
                self._sent.append((tuple(chosen.values()), future))
                batches = rest

    def _leader(self, key: Key) -> int | None:
        topic, partition = key
        leaders = self._leaders.get(topic)
        if leaders is None or partition not in leaders:
            try:
                leaders = self._leaders[topic] = self.link.leaders(topic)
            except Exception:
                return None
        return leaders.get(partition)

    def _answers(self, requests: tuple[Request, ...], future: Any) -> list[tuple[Request, Answer | None]]:
        if future.failed():
            if requests[0].kind is Kind.PRODUCE:
                self._leaders.clear()
            return [(r, None) for r in requests]
        response = future.value
        if requests[0].kind is Kind.PRODUCE:
            parts = produced_partitions(response)
            out: list[tuple[Request, Answer | None]] = []
            for r in requests:
                assert r.key is not None
                answer = parts.get(r.key)
                if answer is None:
                    out.append((r, None))
                    continue
                if produce_outcome(answer.error_code, transactional=True).refresh_leader:
                    self._leaders.pop(r.key[0], None)
                out.append((r, Answer(error=answer.error_code, offset=answer.base_offset)))
            return out
        return [(requests[0], _read_answer(requests[0], response))]


def _rewritten(r: Request) -> bytearray:
    assert r.producer is not None
    batch: RecordBatch = r.payload
    return rewrite(
        batch,
        producer_id=r.producer.producer_id,
        producer_epoch=r.producer.epoch,
        base_sequence=r.base_sequence,
        transactional=True,
    )


def _coordinator_request(r: Request, transaction_timeout_ms: int) -> Any:
    """The kafka-python request for a model request other than Produce."""
    from kafka.protocol.metadata import FindCoordinatorRequest
    from kafka.protocol.producer import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        EndTxnRequest,
        InitProducerIdRequest,
        TxnOffsetCommitRequest,
    )

    pid = r.producer.producer_id if r.producer is not None else -1
    epoch = r.producer.epoch if r.producer is not None else -1
    if r.kind is Kind.FIND_COORDINATOR:
        return FindCoordinatorRequest(
            key=r.coordinator_key,
            key_type=r.coordinator_type,
            coordinator_keys=[r.coordinator_key],
            min_version=1,
            max_version=4,
        )
    if r.kind is Kind.INIT_PRODUCER_ID:
        return InitProducerIdRequest(
            transactional_id=r.transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            producer_id=pid,
            producer_epoch=epoch,
            min_version=3,
            max_version=4,
        )
    if r.kind is Kind.ADD_PARTITIONS:
        topics: dict[str, list[int]] = {}
        for topic, partition in r.partitions:
            topics.setdefault(topic, []).append(partition)
        return AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=r.transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()
            ],
            min_version=3,
            max_version=3,
        )
    if r.kind is Kind.ADD_OFFSETS:
        return AddOffsetsToTxnRequest(
            transactional_id=r.transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            group_id=r.group,
            min_version=3,
            max_version=3,
        )
    if r.kind is Kind.TXN_OFFSET_COMMIT:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in r.offsets:
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
                )
            )
        return TxnOffsetCommitRequest(
            transactional_id=r.transactional_id,
            group_id=r.group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()
            ],
            min_version=3,
            max_version=3,
        )
    if r.kind is Kind.END_TXN:
        return EndTxnRequest(
            transactional_id=r.transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=r.commit,
            min_version=3,
            max_version=4,
        )
    raise ValueError(f"not a coordinator request: {r.kind}")


def _read_answer(r: Request, response: Any) -> Answer:
    """A coordinator's answer as the model reads it."""
    if r.kind is Kind.FIND_COORDINATOR:
        coordinators = getattr(response, "coordinators", None) or []
        found = coordinators[0] if coordinators else response
        return Answer(error=found.error_code, node=int(found.node_id) if not found.error_code else None)
    if r.kind is Kind.INIT_PRODUCER_ID:
        if response.error_code:
            return Answer(error=response.error_code)
        return Answer(producer=ProducerIdentity(int(response.producer_id), int(response.producer_epoch)))
    if r.kind is Kind.ADD_PARTITIONS:
        errors = {
            (t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        return Answer(errors=errors)
    if r.kind is Kind.TXN_OFFSET_COMMIT:
        return Answer(errors={(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions})
    return Answer(error=response.error_code)
