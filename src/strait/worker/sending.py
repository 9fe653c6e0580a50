"""The record copy loop's sending half: the produce pass over the backlog, and what a refused
or failed record does to its partition.

:class:`RecordSending` is mixed into :class:`strait.worker.fetch.RecordPipeline`, which owns the
clients, the partitions and the loop. A run of the backlog goes out in a tight loop while its
records continue exactly at the partition's next offset (one tracker call and one delivery-book
entry per stretch, see :mod:`strait.worker.deliveries`); everything else takes the per-record
path, which applies the gap rule: a record may leave a gap after the last record sent only
where the consumer's own stream jumped there; any other gap is a record the loop dropped, and
rewinds the partition to its checkpoint. The exactly-once pipeline takes the tight loop too,
through two hooks (whether a stretch may go out now, and what it adds to the transaction).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, itemgetter, length_hint
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message

from strait.access_errors import explain
from strait.metrics.stages import CopyObserver
from strait.worker.backlog import Key, Run
from strait.worker.checkpoint import AckTracker, UnexpectedGap
from strait.worker.deliveries import DeliveryBook, Report
from strait.worker.origin import OriginRule
from strait.worker.pipeline import (
    ACCESS_DENIED,
    ACCESS_RETRY_S,
    REWIND_BACKOFF_S,
    SOURCE_GONE,
    PartitionState,
    delivery_error_is_permanent,
    describe_error,
)
from strait.worker.source_partitions import SourcePartitions

log = logging.getLogger(__name__)

# A refresh of the destination's partitions blocks the copy loop while it waits: kept short,
# and not asked again at once after one that got no answer.
METADATA_TIMEOUT_S = 5.0
METADATA_RETRY_S = 1.0

# Kinds of `strait_offset_gaps_total`.
GAP_SOURCE = "source"  # the source has no record there: compaction, markers, aborted records
GAP_RETENTION = "retention"  # the checkpoint fell below the source's log start
GAP_UNEXPECTED = "unexpected"  # a record the loop dropped: rewound, never committed past

# The unbound C accessors, mapped over a whole stretch.
_value: Callable[[Any], Any] = Message.value
_key: Callable[[Any], Any] = Message.key
_headers: Callable[[Any], Any] = Message.headers
_timestamp: Callable[[Any], Any] = Message.timestamp
_kind = itemgetter(0)
_time = itemgetter(1)
_setter = attrgetter("__setitem__")


def _continuing(offsets: list[Any], first: int, expected: int) -> int:
    """How many of ``offsets[first:]`` continue exactly at ``expected`` (expected, expected + 1, ...)."""
    rest = offsets[first:] if first else offsets
    if rest and rest[-1] == expected + len(rest) - 1 and rest == list(range(expected, expected + len(rest))):
        return len(rest)
    for index, offset in enumerate(rest):
        if offset != expected + index:
            return index
    return len(rest)


class RecordSending:
    """The produce pass and the failure handling of a record pipeline (see the module doc)."""

    _metadata_retry_at = 0.0  # no metadata refresh before this monotonic time (the last one failed)

    name: str
    _producer: Any
    _observer: CopyObserver | None
    _origin: OriginRule | None
    _source_props: Any
    _destination_props: Any
    _states: dict[Key, PartitionState]
    _source: SourcePartitions
    _backlog: deque[Run]
    _book: DeliveryBook
    _bulk: bool
    _fetched_at: float
    _reset: set[Key]
    _closing: bool

    def _fail(self, state: PartitionState, reason: str) -> None:
        raise NotImplementedError

    def _purge(self, key: Key) -> None:
        raise NotImplementedError

    # Set by a subclass whose ``_produce`` acts on each record once its ``_stretch_ready`` and
    # ``_stretch_sent`` do the same for a whole stretch: the exactly-once pipeline.
    _stretch_hooks = False

    def _bulk_allowed(self) -> bool:
        """Whether records that need nothing but their produce call may take the fast path: not
        on active-active routes (origin headers), nor in subclasses that act on each record
        without stretch hooks for it."""
        cls = type(self)
        return self._origin is None and (
            cls._stretch_hooks or (cls._produce is RecordSending._produce and cls._headers is RecordSending._headers)
        )

    def _stretch_ready(self) -> bool:
        """Whether a stretch may go out now; when not, the per-record path decides (the
        exactly-once pipeline opens its transaction there, or holds records back)."""
        return True

    def _stretch_sent(self, state: PartitionState, messages: list[Any], first: int, count: int) -> None:
        """``messages[first : first + count]`` went out in one stretch of ``state``'s partition."""

    def _produce_backlog(self) -> bool:
        """Produce fetched records in order; True if the producer queue filled up first."""
        backlog = self._backlog
        while backlog:
            run = backlog[0]
            if not self._produce_run(run):
                return True
            # A purge during the run (a failure, a rewind) took it out already.
            if backlog and backlog[0] is run:
                backlog.popleft()
        return False

    def _produce_run(self, run: Run) -> bool:
        """Produce what is left of one run; False if the producer queue filled up first."""
        messages, count = run.messages, len(run.messages)
        while run.next < count and not run.purged:
            index = run.next
            state = self._states.get(run.key) if run.key is not None else None
            tracker = state.tracker if state is not None else None
            if (
                self._bulk
                and state is not None
                and tracker is not None
                and state.fetching
                and state.rewind_at is None
                and run.offsets[index] == tracker.next_offset
                and self._stretch_ready()
            ):
                sent, full = self._produce_stretch(run, state, tracker)
                run.next = index + sent
                if full:
                    return False
                if sent:
                    continue
            if not self._copy_one(messages[index], run.before_index(index)):
                return False
            run.next = index + 1
        return True

    def _produce_stretch(self, run: Run, state: PartitionState, tracker: AckTracker) -> tuple[int, bool]:
        """Produce the run's records that continue exactly at the tracker's next offset, in one
        tight loop; how many went out, and whether the producer queue filled up."""
        messages, offsets = run.messages, run.offsets
        first = run.next
        expected = tracker.next_offset
        count = _continuing(offsets, first, expected)
        if not count:
            return 0, False
        batch = messages if not first and count == len(messages) else messages[first : first + count]
        reports: list[Report] = [{} for _ in range(count)]
        # All positional (keywords cost a third of the call): topic, value, key, partition,
        # on_delivery, callback (its alias), timestamp, headers; a unit test holds confluent-kafka
        # to this order. LogAppendTime of the source becomes the record's CreateTime.
        stamps = list(map(_timestamp, batch))
        if not all(map(_kind, stamps)):
            sent, full = self._produce_each(state, batch, reports, stamps)
        else:
            # The whole stretch in C: map() calls produce() once per record with no Python
            # bytecode in between; how far it got when produce() raised is told by how many
            # report dicts it took.
            handed = iter(reports)
            full = False
            try:
                deque(
                    map(
                        self._producer.produce,
                        repeat(state.task.destination_topic),
                        map(_value, batch),
                        map(_key, batch),
                        repeat(state.task.partition),
                        map(_setter, handed),
                        repeat(None),
                        map(_time, stamps),
                        map(_headers, batch),
                    ),
                    maxlen=0,
                )
                sent = count
            except BufferError:
                full = True
                sent = count - length_hint(handed) - 1
            except KafkaException:
                # The per-record path produces this record again and handles the refusal.
                sent = count - length_hint(handed) - 1
            if sent < count:
                del reports[sent:]
        if sent:
            tracker.sent_range(expected, sent)
            self._book.add(state, tracker, expected, reports)
            if self._observer is not None:
                self._observer.queued(self.name, time.monotonic() - self._fetched_at, sent)
            self._stretch_sent(state, messages, first, sent)
        return sent, full

    def _produce_each(
        self, state: PartitionState, batch: list[Any], reports: list[Report], stamps: list[Any]
    ) -> tuple[int, bool]:
        """The stretch one produce() call at a time (records without a timestamp, which go out
        with 0 for librdkafka to set). Drops the reports of records not sent."""
        produce = self._producer.produce
        topic, partition = state.task.destination_topic, state.task.partition
        sent, full = 0, False
        try:
            for message, report, (kind, timestamp) in zip(batch, reports, stamps, strict=True):
                produce(
                    topic,
                    message.value(),
                    message.key(),
                    partition,
                    report.__setitem__,
                    None,
                    timestamp if kind != TIMESTAMP_NOT_AVAILABLE else 0,
                    message.headers(),
                )
                sent += 1
        except BufferError:
            full = True
        except KafkaException:
            pass  # the per-record path produces this record again and handles the refusal
        del reports[sent:]
        return sent, full

    def _copy_one(self, message: Message, before: int | None) -> bool:
        """Produce one fetched record, or drop it if it no longer belongs; False if the queue is full."""
        error = message.error()
        if error is not None:
            self._on_fetch_error(message, error)
            return True
        topic, partition = message.topic(), message.partition()
        offset = message.offset()
        if topic is None or partition is None or offset is None:
            return True
        key = (topic, partition)
        state = self._states.get(key)
        # Records of a released, failed or rewinding partition are dropped here: they were
        # never sent, so whoever copies the partition next re-reads them from the checkpoint.
        if state is None or not state.fetching or state.rewind_at is not None:
            return True
        tracker = state.tracker
        if tracker is None or offset < tracker.next_offset:
            return True
        expected = tracker.next_offset
        # A gap is the source's own only if the consumer handed this record over right after
        # the last record sent (its own stream jumped); if the stream stood anywhere else, a
        # record it handed over was dropped on the way, and skipping it would be a loss.
        source_gap = offset > expected and before == expected
        try:
            if self._origin is not None and self._origin.skips(message.headers()):  # type: ignore[arg-type]
                # Written at our destination first: copying it back would loop. Handled
                # without a copy, so the checkpoint moves past it.
                if offset > expected and not source_gap:
                    raise UnexpectedGap(f"offset {offset} fetched while {expected} was expected")
                tracker.sent(offset, source_gap=source_gap)
                tracker.acked(offset)
                state.skipped_origin += 1
            elif not self._produce(state, tracker, message, offset, source_gap=source_gap):
                return False
        except UnexpectedGap as exc:
            self._unexpected_gap(state, str(exc))
            return True
        if offset > expected:
            kind = GAP_RETENTION if key in self._reset else GAP_SOURCE
            if kind == GAP_RETENTION:
                state.skipped += offset - expected
                log.warning(
                    "%s: %d records deleted by source retention before they were copied", state.task, offset - expected
                )
            self._reset.discard(key)
            if self._observer is not None:
                self._observer.offset_gap(kind)
        return True

    def _produce(
        self, state: PartitionState, tracker: AckTracker, message: Message, offset: int, *, source_gap: bool
    ) -> bool:
        """Hand one record to the producer; False if its queue is full. Raises UnexpectedGap."""
        if offset > tracker.next_offset and not source_gap:
            raise UnexpectedGap(f"offset {offset} fetched while {tracker.next_offset} was expected")
        if self._observer is not None:
            self._observer.queued(self.name, time.monotonic() - self._fetched_at)
        timestamp_type, timestamp = message.timestamp()
        if timestamp_type == TIMESTAMP_NOT_AVAILABLE:
            timestamp = 0
        report: Report = {}
        refreshed = False
        while True:
            try:
                self._producer.produce(
                    state.task.destination_topic,
                    message.value(),
                    message.key(),
                    partition=state.task.partition,
                    on_delivery=report.__setitem__,
                    # LogAppendTime of the source becomes the record's CreateTime.
                    timestamp=timestamp,
                    headers=self._headers(message, offset),
                )
            except BufferError:
                return False
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError._UNKNOWN_PARTITION and not refreshed:
                    # The destination grew moments ago (the copier grows it before
                    # assigning the partition) and the producer's metadata predates that.
                    refreshed = True
                    if not self._refresh_metadata(state.task.destination_topic):
                        return False  # the destination does not answer now: the record waits
                    continue
                self._produce_error(state, error)
                return True
            tracker.sent(offset, source_gap=source_gap)
            self._book.add(state, tracker, offset, [report])
            return True

    def _refresh_metadata(self, topic: str) -> bool:
        """Have the producer read the topic's partitions again; False when the destination did
        not answer (a broker down): the caller tries again later, at most every
        METADATA_RETRY_S, rather than stopping the whole pipeline on a transient outage."""
        now = time.monotonic()
        if now < self._metadata_retry_at:
            return False
        try:
            self._producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            self._metadata_retry_at = now + METADATA_RETRY_S
            log.warning(
                "%s: the destination's partitions of %s could not be read (%s); trying again", self.name, topic, exc
            )
            return False
        return True

    def _headers(self, message: Message, offset: int) -> Any:
        """The headers the copy carries: the source record's (and its origin, active-active)."""
        if self._origin is not None:
            return self._origin.stamp(message.headers())  # type: ignore[arg-type]
        return message.headers()

    def _produce_error(self, state: PartitionState, error: KafkaError) -> None:
        """The producer refused a record outright (not a delivery failure): stop the partition,
        or, when the destination refused us (an ACL), wait and try again."""
        if error.code() in ACCESS_DENIED:
            self._wait_for_access(state, explain(self._destination_props, error, state.task.destination_topic))
            return
        self._fail(state, self._produce_failure(state, error))

    def _unexpected_gap(self, state: PartitionState, detail: str) -> None:
        log.error("partition %s: %s; resending from the checkpoint", state.task, detail)
        if self._observer is not None:
            self._observer.offset_gap(GAP_UNEXPECTED)
        self._begin_rewind(state, 0.0)

    def _begin_rewind(self, state: PartitionState, backoff_s: float) -> None:
        """Stop fetching the partition; once nothing is in flight, resend from its checkpoint."""
        state.rewind_at = time.monotonic() + backoff_s
        key = (state.task.topic, state.task.partition)
        self._purge(key)
        self._source.pause(key)

    def _delivered(
        self,
        state: PartitionState,
        tracker: AckTracker,
        offset: int,
        size: int,
        error: KafkaError | None,
        message: Message,
    ) -> None:
        """A record's delivery failed (the book settles acknowledgements in bulk, see
        strait.worker.deliveries); ``size`` is its key and value bytes."""
        if error is None:
            return
        tracker.failed(offset)  # pins the checkpoint, whoever copies the partition now
        dropped = error.code() == KafkaError._DESTROY
        if dropped and self._closing:
            # Our own producer is being torn down with the pipeline: not the partition's fault,
            # and the checkpoint stays where the destination's acknowledgements put it.
            log.debug("partition %s: record %d dropped by the producer's teardown", state.task, offset)
            return
        if delivery_error_is_permanent(error) and not dropped:
            self._fail(state, self._produce_failure(state, error))
            return
        # Only the partition's current stream in this pipeline is rewound: a late report for a
        # partition released or moved since must not pause whoever copies it now (the failed
        # record already pins the checkpoint its next owner starts from).
        key = (state.task.topic, state.task.partition)
        if self._states.get(key) is not state or state.tracker is not tracker:
            return
        if state.rewind_at is None and state.error is None:
            if error.code() in ACCESS_DENIED:
                self._wait_for_access(state, explain(self._destination_props, error, state.task.destination_topic))
                return
            if dropped:
                # With the producer alive, librdkafka drops a partition's queued records
                # (_DESTROY) when the partition left its metadata: the destination topic was
                # deleted, or lost partitions. That is no reason of its own: resending from the
                # checkpoint makes the producer say what happened (a deleted destination then
                # stops the partition as "does not exist"), and a passing blip just heals.
                log.warning(
                    "partition %s: the producer dropped queued records (%s), resending from checkpoint",
                    state.task,
                    error,
                )
                self._begin_rewind(state, REWIND_BACKOFF_S)
                return
            log.warning("partition %s: delivery failed (%s), resending from checkpoint", state.task, error)
            self._begin_rewind(state, REWIND_BACKOFF_S)

    def _wait_for_access(self, state: PartitionState, reason: str) -> None:
        """The cluster refused us: try again from the checkpoint later (an operator can fix it)."""
        if state.waiting != reason:
            log.error("partition %s: %s; trying again every %.0fs", state.task, reason, ACCESS_RETRY_S)
        state.waiting = reason
        self._begin_rewind(state, ACCESS_RETRY_S)

    @staticmethod
    def _produce_failure(state: PartitionState, error: KafkaError) -> str:
        task = state.task
        if error.code() in {
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError.UNKNOWN_TOPIC_ID,
            KafkaError._UNKNOWN_TOPIC,
            KafkaError._UNKNOWN_PARTITION,
        }:
            return (
                f"destination {task.destination_topic}/{task.partition} does not exist "
                f"(deleted?): {describe_error(error)}"
            )
        return f"sending to {task.destination_topic}/{task.partition}: {describe_error(error)}"

    def _on_fetch_error(self, message: Message, error: KafkaError) -> None:
        topic, partition = message.topic(), message.partition()
        state = self._states.get((topic, partition)) if topic is not None and partition is not None else None
        if state is not None and error.code() in ACCESS_DENIED:
            if state.rewind_at is None and state.error is None:
                self._wait_for_access(state, explain(self._source_props, error, state.task.topic))
        elif state is not None and error.code() in SOURCE_GONE:
            self._fail(state, f"source: {describe_error(error)}")
        elif error.code() == KafkaError._AUTO_OFFSET_RESET:
            log.warning("pipeline %s: checkpoint out of range, reset to earliest: %s", self.name, error)
            if state is not None:
                self._reset.add((state.task.topic, state.task.partition))
        else:
            log.info("pipeline %s: fetch error: %s", self.name, error)
