"""Raw record batch I/O on kafka-python's protocol classes: a prototype of the batch copier's
data path (issue 12).

Why kafka-python (3.x): its request classes are generated from Kafka's own JSON schemas
(``kafka.protocol.producer.ProduceRequest`` v3-13, ``kafka.protocol.consumer.FetchRequest``
v4-18, ``InitProducerIdRequest`` v0-6), the ``records`` field of both is plain bytes (a fetch
answers the partition's raw batches, a produce sends whatever bytes it is given), and its
connection layer negotiates versions with ApiVersions and speaks SASL and TLS with the options
``strait.clients.kafka_python_options`` already builds. So no hand-written encoder is needed.
Versions are capped where kafka-python's own clients cap them: Fetch 12 and Produce 9, the
last versions that name topics (13+ use topic ids, which would need a metadata lookup of ids).

This module is a prototype: one partition per request, up to 5 produce requests in flight,
retries in order with the same sequences, no fetch sessions, no threads. The pure parts
(:mod:`records`, :mod:`select`, :mod:`compat`, :mod:`sequences`, :mod:`outcomes`) carry the
rules; :func:`copy_partition` strings them together end to end.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as errors

from strait.clients import kafka_python_options
from strait.worker.batch.compat import DestinationTopic, Mode, ModeDecision, Reason, decide_mode
from strait.worker.batch.outcomes import Outcome, ProduceOutcome, error_name, produce_outcome
from strait.worker.batch.records import rewrite, split_batches
from strait.worker.batch.select import AbortedTransaction, Action, select_batches
from strait.worker.batch.sequences import ProducerIdentity, SequenceModel

FETCH_MAX_VERSION = 12
PRODUCE_MAX_VERSION = 9
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class WireError(RuntimeError):
    """A broker answered with an error code (``code``) or did not answer."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


def _error_name(code: int) -> str:
    return error_name(code) or "NONE"


def _retriable(code: int) -> bool:
    import kafka.errors as errors

    return bool(getattr(errors.for_code(code), "retriable", False))


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a fetch response: its raw records and what comes with them."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTransaction]
    records: bytes

    @classmethod
    def from_answer(cls, p: Any) -> FetchedPartition:
        """From one partition of kafka-python's decoded FetchResponse."""
        return cls(
            error_code=p.error_code,
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted=[AbortedTransaction(a.producer_id, a.first_offset) for a in p.aborted_transactions or []],
            records=bytes(p.records or b""),
        )


@dataclass(frozen=True, slots=True)
class Produced:
    error_code: int
    base_offset: int
    error_message: str | None = None


class BrokerLink:
    """A kafka-python network client to one cluster, with the raw calls batch mode needs."""

    def __init__(
        self,
        props: Mapping[str, Any],
        *,
        client_id: str = "strait-batch",
        request_timeout_ms: int = 30_000,
        receive_message_max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        from kafka.net.compat import KafkaNetClient

        options = kafka_python_options(dict(props))
        options.pop("api_version", None)
        self._timeout_ms = request_timeout_ms
        self._client: Any = KafkaNetClient(
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            receive_message_max_bytes=receive_message_max_bytes,
            **options,
        )
        self._client._manager.bootstrap(timeout_ms=request_timeout_ms)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> BrokerLink:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _send(self, node_id: int, request: Any) -> Any:
        return self._client.send_and_receive(node_id, request, timeout_ms=self._timeout_ms)

    def _any_node(self) -> int:
        node = self._client.least_loaded_node(bootstrap_fallback=True)
        if node is None:
            raise WireError("no broker available")
        return int(node)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``-``partition`` now (a fresh Metadata request)."""
        from kafka.protocol.metadata import MetadataRequest

        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
            max_version=12,
        )
        response = self._send(self._any_node(), request)
        for t in response.topics:
            if t.name != topic:
                continue
            if t.error_code:
                raise WireError(f"metadata of {topic}: {_error_name(t.error_code)}", t.error_code)
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.error_code or p.leader_id < 0:
                        raise WireError(
                            f"{topic}-{partition} has no leader ({_error_name(p.error_code)})", p.error_code
                        )
                    return int(p.leader_id)
        raise WireError(f"{topic}-{partition} not in the metadata")

    def fetch(
        self,
        node_id: int,
        topic: str,
        partition: int,
        offset: int,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        max_bytes: int = 1024 * 1024,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
    ) -> FetchedPartition:
        """One Fetch (sessionless) of one partition from ``offset``: its raw batches."""
        from kafka.protocol.consumer import FetchRequest

        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,  # FINAL_EPOCH: no fetch session
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchRequest.FetchTopic.FetchPartition(
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
            min_version=4,
            max_version=FETCH_MAX_VERSION,
        )
        response = self._send(node_id, request)
        if getattr(response, "error_code", 0):
            raise WireError(f"fetch: {_error_name(response.error_code)}", response.error_code)
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index != partition:
                    continue
                return FetchedPartition.from_answer(p)
        raise WireError(f"fetch of {topic}-{partition}: partition missing from the response")

    def init_producer_id(self) -> ProducerIdentity:
        """A fresh idempotent producer id and epoch (InitProducerId without a transactional id)."""
        from kafka.protocol.producer import InitProducerIdRequest

        request = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout_ms=-1,
            producer_id=-1,
            producer_epoch=-1,
            max_version=4,
        )
        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            response = self._send(self._any_node(), request)
            if not response.error_code:
                return ProducerIdentity(int(response.producer_id), int(response.producer_epoch))
            if not _retriable(response.error_code) or time.monotonic() > deadline:
                raise WireError(f"InitProducerId: {_error_name(response.error_code)}", response.error_code)
            time.sleep(0.2)  # e.g. COORDINATOR_LOAD_IN_PROGRESS on a fresh cluster

    def produce(
        self,
        node_id: int,
        batches: Mapping[tuple[str, int], bytes | bytearray],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> dict[tuple[str, int], Produced]:
        """One Produce request: one ready batch per partition (Kafka allows no more than one
        per partition in a request), the bytes sent as they are."""
        future = self.produce_async(
            node_id, batches, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id
        )
        return self.produced(future)

    def produce_async(
        self,
        node_id: int,
        batches: Mapping[tuple[str, int], bytes | bytearray],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> Any:
        """Send a Produce request without waiting: a kafka-python Future of the response, for
        :meth:`produced`. At most 5 may be outstanding on a connection (idempotence)."""
        from kafka.protocol.producer import ProduceRequest

        topics: dict[str, list[Any]] = {}
        for (topic, partition), data in batches.items():
            topics.setdefault(topic, []).append(
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=bytes(data))
            )
        request = ProduceRequest(
            transactional_id=transactional_id,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()],
            min_version=3,
            max_version=PRODUCE_MAX_VERSION,
        )
        self._client.await_ready(node_id, timeout_ms=self._timeout_ms)
        return self._client.send(node_id, request)

    def produced(self, future: Any) -> dict[tuple[str, int], Produced]:
        """Wait for a :meth:`produce_async` answer; raises kafka-python's error if none came."""
        import kafka.errors as errors

        if not future.is_done:
            self._client.poll(timeout_ms=self._timeout_ms, future=future)
        if not future.is_done:
            raise errors.KafkaTimeoutError("produce: no answer")
        if future.failed():
            raise future.exception
        out: dict[tuple[str, int], Produced] = {}
        for t in future.value.responses:
            for p in t.partition_responses:
                out[(t.name, p.index)] = Produced(p.error_code, p.base_offset, getattr(p, "error_message", None))
        return out


def _refresh_leader(link: BrokerLink, topic: str, partition: int, current: int) -> int:
    """The partition's leader asked anew; the one we had while the cluster cannot say (the next
    try finds out)."""
    try:
        return link.leader(topic, partition)
    except (errors.KafkaError, WireError):
        return current


def _produce_with_retries(
    link: BrokerLink, leader: int, topic: str, partition: int, data: bytes | bytearray, *, retries: int
) -> tuple[Produced, ProduceOutcome, int]:
    """Produce one rewritten batch; retriable answers (and lost connections) send the very same
    bytes again, same sequence, to the leader asked anew when it may have moved."""
    import kafka.errors as errors

    key = (topic, partition)
    attempt = 0
    while True:
        try:
            result = link.produce(leader, {key: data})[key]
            verdict = produce_outcome(result.error_code)
        except errors.KafkaError as exc:  # no answer: the batch may or may not be appended
            result = Produced(-1, -1, str(exc))
            verdict = ProduceOutcome(Outcome.RETRY, type(exc).__name__, refresh_leader=True)
        if verdict.outcome is not Outcome.RETRY or attempt >= retries:
            return result, verdict, leader
        attempt += 1
        time.sleep(min(1.0, 0.1 * 2**attempt))
        if verdict.refresh_leader:
            leader = _refresh_leader(link, topic, partition, leader)


@dataclass(frozen=True, slots=True)
class _Pending:
    future: Any
    source_offset: int
    next_offset: int
    record_count: int
    base_sequence: int
    data: bytearray


def _failed(exc: Exception) -> Any:
    from kafka.future import Future

    return Future().failure(exc)


@dataclass
class CopyStats:
    """What :func:`copy_partition` did."""

    fetches: int = 0
    batches_produced: int = 0
    records_produced: int = 0
    bytes_produced: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    resent: int = 0  # batches sent again after a retriable failure (same bytes, same sequence)
    duplicates: int = 0  # answers DUPLICATE_SEQUENCE_NUMBER: the broker had the batch already
    next_offset: int = 0
    decision: ModeDecision | None = None
    producer: ProducerIdentity | None = None
    seconds: float = 0.0


def copy_partition(
    source: BrokerLink,
    destination: BrokerLink,
    topic: str,
    partition: int,
    *,
    destination_topic: str | None = None,
    start_offset: int = 0,
    end_offset: int | None = None,
    read_committed: bool = False,
    destination_config: DestinationTopic | None = None,
    source_compacted: bool = False,
    max_bytes: int = 1024 * 1024,
    deadline_s: float = 120.0,
    retries: int = 5,
    in_flight: int = 5,
) -> CopyStats:
    """Copy one partition batch by batch from ``start_offset`` up to ``end_offset`` (default:
    the high watermark, or the last stable offset under ``read_committed``, at the first fetch).

    The prototype of the batch data path: fetch raw batches from the source leader, select
    (fetch offset, control, aborted), check they can pass (:func:`decide_mode`; a partition
    that needs record mode stops here with the decision), rewrite each with our idempotent
    producer's id, epoch and sequence, produce it to the destination leader (acks=all), one
    batch per request and up to ``in_flight`` requests outstanding (retries resend the same
    bytes in order). Raises :class:`WireError` on an error answer that is not retriable and
    does not call for record mode.
    """
    dst_topic = destination_topic or topic
    config = destination_config or DestinationTopic()
    stats = CopyStats(next_offset=start_offset)
    started = time.monotonic()
    src_leader = source.leader(topic, partition)
    dst_leader = destination.leader(dst_topic, partition)
    identity = destination.init_producer_id()
    sequences = SequenceModel(identity, max_in_flight=in_flight)
    stats.producer = identity
    isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
    offset = start_offset
    key = (dst_topic, partition)
    pending: deque[_Pending] = deque()

    def settle(sent: _Pending) -> CopyStats | None:
        """The oldest batch in flight answered: count it, or resend it and everything after it
        (same bytes, same sequences: the broker answers DUPLICATE for what it already has).
        Returns the final stats when batch mode stops here."""
        nonlocal dst_leader
        try:
            result = destination.produced(sent.future)[key]
            verdict = produce_outcome(result.error_code)
        except errors.KafkaError as exc:
            result, verdict = Produced(-1, -1, str(exc)), ProduceOutcome(Outcome.RETRY, type(exc).__name__, True)
        if verdict.outcome is Outcome.RETRY:
            later = list(pending)
            pending.clear()
            for other in later:  # let every answer come before sending anything again
                with contextlib.suppress(errors.KafkaError):
                    destination.produced(other.future)
            if verdict.refresh_leader:
                dst_leader = _refresh_leader(destination, dst_topic, partition, dst_leader)
            for resend in [sent, *later]:
                stats.resent += 1
                result, verdict, dst_leader = _produce_with_retries(
                    destination, dst_leader, dst_topic, partition, resend.data, retries=retries
                )
                stop = account(resend, result, verdict)
                if stop is not None:
                    return stop
            return None
        return account(sent, result, verdict)

    def account(sent: _Pending, result: Produced, verdict: ProduceOutcome) -> CopyStats | None:
        if verdict.outcome is Outcome.OK:
            stats.duplicates += verdict.duplicate
            sequences.acknowledged(key, sent.base_sequence)
            stats.batches_produced += 1
            stats.records_produced += sent.record_count
            stats.bytes_produced += len(sent.data)
            stats.next_offset = sent.next_offset
            return None
        for other in pending:  # sent after a batch that failed for good: refused out of order
            with contextlib.suppress(errors.KafkaError):
                destination.produced(other.future)
        pending.clear()
        if verdict.outcome is Outcome.RECORD_MODE:
            stats.decision = ModeDecision(
                Mode.RECORD, Reason.REFUSED, f"destination refused the batch: {verdict.error}", sent.source_offset
            )
            stats.next_offset = sent.source_offset
            stats.seconds = time.monotonic() - started
            return stats
        raise WireError(
            f"produce {dst_topic}-{partition} (source batch {sent.source_offset}): "
            f"{verdict.outcome.value}: {verdict.error} {result.error_message or ''}".rstrip(),
            result.error_code,
        )

    while end_offset is None or offset < end_offset:
        if time.monotonic() - started > deadline_s:
            raise WireError(f"copy of {topic}-{partition} not done after {deadline_s:.0f}s (at {offset})")
        fetched = source.fetch(src_leader, topic, partition, offset, isolation_level=isolation, max_bytes=max_bytes)
        stats.fetches += 1
        if fetched.error_code:
            raise WireError(
                f"fetch {topic}-{partition}@{offset}: {_error_name(fetched.error_code)}", fetched.error_code
            )
        if end_offset is None:
            end_offset = fetched.last_stable_offset if read_committed else fetched.high_watermark
            if offset >= end_offset:
                break
        split = split_batches(fetched.records)
        decision = decide_mode(split, config, source_compacted=source_compacted, fetch_offset=offset)
        stats.decision = decision
        if decision.mode is Mode.RECORD:
            break
        selection = select_batches(split.batches, offset, read_committed=read_committed, aborted=fetched.aborted)
        for chosen in selection.decisions:
            if chosen.action is Action.PARTIAL:
                while pending:
                    stop = settle(pending.popleft())
                    if stop is not None:
                        return stop
                stats.decision = ModeDecision(
                    Mode.RECORD, Reason.MID_BATCH, f"fetch offset {offset} inside a batch", chosen.batch.base_offset
                )
                stats.next_offset = offset
                stats.seconds = time.monotonic() - started
                return stats
            if chosen.action is not Action.PRODUCE:
                stats.skipped[chosen.action.value] = stats.skipped.get(chosen.action.value, 0) + 1
                continue
            batch = chosen.batch
            if not sequences.can_send(key):
                stop = settle(pending.popleft())
                if stop is not None:
                    return stop
            base_sequence = sequences.assign(key, batch.record_count, ref=batch.base_offset)
            out = rewrite(
                batch,
                producer_id=identity.producer_id,
                producer_epoch=identity.epoch,
                base_sequence=base_sequence,
            )
            try:
                future = destination.produce_async(dst_leader, {key: out})
            except errors.KafkaError as exc:
                future = _failed(exc)
            pending.append(
                _Pending(future, batch.base_offset, batch.next_offset, batch.record_count, base_sequence, out)
            )
        if not selection.decisions and split.truncated:
            max_bytes *= 2  # a single batch larger than the fetch size: ask for more
        offset = selection.next_fetch_offset
    while pending:
        stop = settle(pending.popleft())
        if stop is not None:
            return stop
    stats.next_offset = offset
    stats.seconds = time.monotonic() - started
    return stats
