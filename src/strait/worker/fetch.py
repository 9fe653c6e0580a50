"""Fetch pipelines: the copy loop that moves records of assigned partitions to the destination.

A pipeline owns one source consumer (explicit assignment, never a group member), one
destination producer and one thread. The copier runs two of them per route, ``realtime`` and
``catchup`` (Meituan's fetcher isolation): a partition far behind reads cold data in large
fetches and fills its producer queue, and must not sit in the same fetch requests or the same
producer queue as partitions that are caught up.

:class:`Pipeline` is the small interface the copier drives; :class:`RecordPipeline` copies
record by record through librdkafka. A pass-through copier that forwards whole record batches
would be another :class:`Pipeline`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from strait import clients
from strait.metrics.stages import DESTINATION, SOURCE, CopyObserver, client_settings
from strait.worker.checkpoint import AckTracker
from strait.worker.task import PartitionTask

log = logging.getLogger(__name__)

# Delivery errors that say the destination topic or partition is gone: retrying cannot help,
# and re-creating the topic behind the operator's back would hide the deletion.
DESTINATION_GONE = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.UNKNOWN_TOPIC_ID,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    }
)

# Delivery errors that a later attempt can overcome (the destination was unreachable or
# leaderless for longer than the delivery timeout). librdkafka does not flag delivery-report
# errors as retriable, so the list is ours. Everything else stops the partition.
TRANSIENT_DELIVERY_ERRORS = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.NOT_CONTROLLER,
    }
)

# Fetch errors about one source partition that will not go away by themselves.
SOURCE_GONE = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.UNKNOWN_TOPIC_ID,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
)

REWIND_BACKOFF_S = 1.0
WATERMARK_REFRESH_S = 0.5


def delivery_error_is_permanent(error: KafkaError) -> bool:
    """True if a failed delivery must stop its partition instead of being sent again."""
    if error.code() in DESTINATION_GONE:
        return True
    return error.fatal() or error.code() not in TRANSIENT_DELIVERY_ERRORS


def describe_error(error: KafkaError) -> str:
    """A stats-friendly reason: the symbolic code, then librdkafka's text."""
    return f"{error.name()}: {error.str()}"


class PartitionState:
    """Runtime state of one assigned partition, shared by the copier and its current pipeline.

    The pipeline thread writes the copy progress; the copier thread reads it (single attribute
    reads and writes are atomic under the GIL) and owns the lifecycle fields.
    """

    def __init__(self, task: PartitionTask) -> None:
        self.task = task
        self.tp = TopicPartition(task.topic, task.partition)
        self.tracker: AckTracker | None = None
        self.fetching = False
        self.pipeline: str | None = None
        self.records = 0
        self.bytes = 0
        self.source_end: int | None = None
        self.committed: int | None = None
        self.error: str | None = None
        self.last_progress: float | None = None
        self.rewind_at: float | None = None
        self.rewinds = 0
        self.skipped = 0

    @property
    def failed(self) -> bool:
        """True once the partition stopped for good; ``error`` says why."""
        return self.error is not None

    @property
    def checkpoint(self) -> int | None:
        """The offset to resume from without loss, once copying has started."""
        return None if self.tracker is None else self.tracker.position

    @property
    def lag(self) -> int | None:
        """Source records not yet fetched (end offset minus fetch position), if known."""
        if self.tracker is None or self.source_end is None:
            return None
        return max(0, self.source_end - self.tracker.next_offset)


class Pipeline(Protocol):
    """A fetch-and-send loop over a changing set of partitions, driven by the copier."""

    name: str

    def start(self) -> None:
        """Start the loop's thread."""

    def add(self, state: PartitionState, offset: int) -> None:
        """Start copying ``state``'s partition from exactly ``offset``."""

    def release(self, state: PartitionState) -> threading.Event:
        """Stop fetching the partition; the event is set once nothing of it is in flight."""

    def stop(self, timeout_s: float) -> None:
        """Stop the loop; wait up to ``timeout_s`` for records in flight to be acknowledged."""


@dataclass(frozen=True)
class PipelineSettings:
    """Bounds and latency knobs of one pipeline; defaults suit a realtime pipeline."""

    batch_size: int = 1000
    # Pre-fetched source data held by librdkafka, bounded per consumer.
    queued_max_kbytes: int = 16 * 1024
    fetch_max_bytes: int = 8 * 1024 * 1024
    fetch_wait_max_ms: int = 100
    # Records waiting for the destination's acknowledgement, bounded per producer; when full,
    # the loop stops consuming, so the consumer's bounded queue stops fetching.
    producer_max_messages: int = 100_000
    producer_max_kbytes: int = 64 * 1024
    # 0: a caught-up partition gets a record every few ms, so a linger only delays each one
    # (5 ms doubled the produce acknowledgement time at 1,000 records/s over 8 partitions);
    # under load records still batch while earlier requests are in flight.
    linger_ms: int = 0
    # How long librdkafka retries one record before the pipeline rewinds the partition.
    delivery_timeout_ms: int = 120_000
    missing_topic_timeout_ms: int = 10_000


CATCHUP_SETTINGS = PipelineSettings(
    batch_size=5000,
    queued_max_kbytes=32 * 1024,
    fetch_max_bytes=16 * 1024 * 1024,
    fetch_wait_max_ms=500,
    linger_ms=20,
)


class RecordPipeline:
    """Copies records one by one: key, value, headers and timestamp, to the same partition number.

    Idempotent producer with ``acks=all``: per-partition order holds through retries. All
    consumer and producer calls run on the pipeline's own thread; other threads talk to it
    through a command queue.
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
        observer: CopyObserver | None = None,
    ) -> None:
        self.name = name
        self._settings = settings
        self._observer = observer
        self._consumer = clients.consumer(
            source,
            **client_settings(observer, SOURCE),
            **{
                "group.id": group_id,
                "client.id": f"{client_id}-{name}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                # Only an out-of-range checkpoint (source retention removed it) resets.
                "auto.offset.reset": "earliest",
                # Aborted transactions must not reach the destination as ordinary records.
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
                "queued.max.messages.kbytes": settings.queued_max_kbytes,
                "fetch.max.bytes": settings.fetch_max_bytes,
                "fetch.wait.max.ms": settings.fetch_wait_max_ms,
            },
        )
        producer_overrides: dict[str, Any] = {
            "client.id": f"{client_id}-{name}",
            "enable.idempotence": True,
            "acks": "all",
            # A deleted destination topic must fail its partition, not come back with
            # broker defaults.
            "allow.auto.create.topics": False,
            "queue.buffering.max.messages": settings.producer_max_messages,
            "queue.buffering.max.kbytes": settings.producer_max_kbytes,
            "linger.ms": settings.linger_ms,
            "message.timeout.ms": settings.delivery_timeout_ms,
            # Destination topics are ready before the first record (DestinationTopics waits for
            # their leaders), so a topic missing from metadata this long was deleted.
            "topic.metadata.propagation.max.ms": settings.missing_topic_timeout_ms,
        }
        if "message.max.bytes" not in destination:
            # Only a client-side cap: the destination topic's max.message.bytes decides.
            producer_overrides["message.max.bytes"] = 64 * 1024 * 1024
        producer_overrides.update(client_settings(observer, DESTINATION))
        self._producer = clients.producer(destination, **producer_overrides)
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._assigned: set[tuple[str, int]] = set()
        self._draining: list[tuple[PartitionState, threading.Event]] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"strait-copy-{client_id}-{name}", daemon=True)
        self._next_watermarks = 0.0
        self._flush_timeout_s = 0.0

    def start(self) -> None:
        """Start the loop's thread."""
        self._thread.start()

    def add(self, state: PartitionState, offset: int) -> None:
        """Start copying ``state``'s partition from exactly ``offset``."""
        if self._stopping.is_set() or (self._thread.ident is not None and not self._thread.is_alive()):
            state.error = f"pipeline {self.name} is not running"
            return
        # The checkpoint exists from now on, so the copier can commit the start offset at once.
        state.tracker = AckTracker(offset)
        state.pipeline = self.name
        state.rewind_at = None
        self._commands.put(partial(self._add, state, offset))

    def release(self, state: PartitionState) -> threading.Event:
        """Stop fetching the partition; the event is set once nothing of it is in flight."""
        done = threading.Event()
        self._commands.put(partial(self._release, state, done))
        return done

    def stop(self, timeout_s: float) -> None:
        """Stop the loop; wait up to ``timeout_s`` for records in flight to be acknowledged."""
        self._flush_timeout_s = timeout_s
        self._stopping.set()
        if self._thread.ident is None:
            self._shutdown()  # never started: still close the clients
        elif self._thread.is_alive():
            self._thread.join(timeout_s + 10)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._run_commands()
                busy = bool(self._draining) or any(s.rewind_at for s in self._states.values())
                asked = time.monotonic()
                messages = self._fetch(0.02 if busy else 0.1)
                if messages:
                    if self._observer is not None:
                        self._observer.fetched(self.name, time.monotonic() - asked)
                    self._copy(messages)
                self._producer.poll(0)
                self._finish_releases()
                self._rewind_due()
                self._refresh_watermarks()
        except Exception as exc:
            log.exception("pipeline %s crashed", self.name)
            for state in self._states.values():
                state.error = state.error or f"pipeline {self.name} crashed: {exc}"
                state.fetching = False
        finally:
            self._shutdown()

    def _fetch(self, wait_s: float) -> list[Any]:
        # consume(n, t) waits until n records *or* t passed: at low rates that holds every record
        # back for up to t. Take what is ready; only when nothing is, wait for the first record,
        # then take whatever arrived with it. Under load batches stay full; idle adds no delay.
        batch = self._settings.batch_size
        messages: list[Any] = self._consumer.consume(batch, 0)
        if not messages:
            messages = self._consumer.consume(1, wait_s)
            if messages and batch > 1:
                messages += self._consumer.consume(batch - 1, 0)
        return messages

    def _shutdown(self) -> None:
        self._run_commands()
        for state in self._states.values():
            state.fetching = False
        try:
            self._consumer.close()
        except KafkaException:
            log.warning("closing the %s consumer failed", self.name, exc_info=True)
        # Acks that arrive while flushing still move checkpoints; the copier commits after.
        remaining = self._producer.flush(self._flush_timeout_s)
        if remaining:
            log.warning("pipeline %s stopped with %d records unacknowledged", self.name, remaining)
        for _, done in self._draining:
            done.set()
        self._draining.clear()

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command()

    def _add(self, state: PartitionState, offset: int) -> None:
        key = (state.task.topic, state.task.partition)
        state.fetching = True
        self._states[key] = state
        if key in self._assigned:
            self._consumer.seek(TopicPartition(key[0], key[1], offset))
        else:
            self._consumer.incremental_assign([TopicPartition(key[0], key[1], offset)])
            self._assigned.add(key)

    def _release(self, state: PartitionState, done: threading.Event) -> None:
        key = (state.task.topic, state.task.partition)
        if self._states.get(key) is state:
            del self._states[key]
            self._unassign(key)
        state.fetching = False
        self._draining.append((state, done))
        self._finish_releases()

    def _unassign(self, key: tuple[str, int]) -> None:
        if key in self._assigned:
            self._assigned.discard(key)
            self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])

    def _finish_releases(self) -> None:
        if not self._draining:
            return
        still: list[tuple[PartitionState, threading.Event]] = []
        for state, done in self._draining:
            if state.tracker is None or state.tracker.in_flight == 0:
                done.set()
            else:
                still.append((state, done))
        self._draining = still

    def _fail(self, state: PartitionState, reason: str) -> None:
        if state.error is None:
            log.error("partition %s stopped: %s", state.task, reason)
            state.error = reason
        state.fetching = False
        key = (state.task.topic, state.task.partition)
        if self._states.get(key) is state:
            self._unassign(key)

    def _copy(self, messages: list[Message]) -> None:
        produce = self._producer.produce
        states = self._states
        observer = self._observer
        monotonic = time.monotonic
        returned = monotonic()
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_fetch_error(message, error)
                continue
            topic, partition = message.topic(), message.partition()
            if topic is None or partition is None:
                continue
            state = states.get((topic, partition))
            # Records of a released, failed or rewinding partition are dropped here: they were
            # never sent, so whoever copies the partition next re-reads them from the checkpoint.
            if state is None or not state.fetching or state.rewind_at is not None:
                continue
            tracker = state.tracker
            offset = message.offset()
            if tracker is None or offset is None or offset < tracker.next_offset:
                continue
            key, value = message.key(), message.value()
            size = (len(key) if key else 0) + (len(value) if value else 0)
            timestamp_type, timestamp = message.timestamp()
            if timestamp_type == TIMESTAMP_NOT_AVAILABLE:
                timestamp = 0
            if observer is None:
                on_delivery = partial(self._delivered, state, tracker, offset, size)
            else:
                produced = monotonic()
                observer.queued(self.name, produced - returned)
                on_delivery = partial(self._observed, state, tracker, offset, size, produced, timestamp)
            refreshed = False
            while True:
                try:
                    produce(
                        state.task.destination_topic,
                        value,
                        key,
                        partition=partition,
                        on_delivery=on_delivery,
                        # LogAppendTime of the source becomes the record's CreateTime.
                        timestamp=timestamp,
                        headers=message.headers(),
                    )
                except BufferError:
                    # Producer queue full: serve acks and commands (a revoke must not wait
                    # for the backlog) and try again; the source side is not read meanwhile.
                    self._producer.poll(0.05)
                    self._run_commands()
                    # Ownership is this pipeline's own map, not a flag: once released, another
                    # pipeline may already copy the partition and set its flags.
                    if (
                        self._stopping.is_set()
                        or states.get((topic, partition)) is not state
                        or not state.fetching
                        or state.rewind_at is not None
                    ):
                        break
                    continue
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.code() == KafkaError._UNKNOWN_PARTITION and not refreshed:
                        # The destination grew moments ago (the copier grows it before
                        # assigning the partition) and the producer's metadata predates that.
                        refreshed = True
                        self._producer.list_topics(state.task.destination_topic, timeout=10)
                        continue
                    self._fail(state, self._produce_failure(state, error))
                    break
                tracker.sent(offset)
                break

    def _observed(
        self,
        state: PartitionState,
        tracker: AckTracker,
        offset: int,
        size: int,
        produced: float,
        timestamp_ms: int,
        error: KafkaError | None,
        message: Message,
    ) -> None:
        if error is None and self._observer is not None:
            task = state.task
            ack_s = time.monotonic() - produced
            self._observer.acked(self.name, task.destination_topic, task.partition, ack_s, timestamp_ms)
        self._delivered(state, tracker, offset, size, error, message)

    def _delivered(
        self,
        state: PartitionState,
        tracker: AckTracker,
        offset: int,
        size: int,
        error: KafkaError | None,
        _message: Message,
    ) -> None:
        if error is None:
            tracker.acked(offset)
            state.records += 1
            state.bytes += size
            state.last_progress = time.time()
            return
        tracker.failed(offset)
        if delivery_error_is_permanent(error):
            self._fail(state, self._produce_failure(state, error))
        elif state.rewind_at is None and state.error is None:
            log.warning("partition %s: delivery failed (%s), resending from checkpoint", state.task, error)
            state.rewind_at = time.monotonic() + REWIND_BACKOFF_S
            if (state.task.topic, state.task.partition) in self._assigned:
                self._consumer.pause([state.tp])

    @staticmethod
    def _produce_failure(state: PartitionState, error: KafkaError) -> str:
        task = state.task
        if error.code() in DESTINATION_GONE:
            return (
                f"destination {task.destination_topic}/{task.partition} does not exist "
                f"(deleted?): {describe_error(error)}"
            )
        return f"sending to {task.destination_topic}/{task.partition}: {describe_error(error)}"

    def _rewind_due(self) -> None:
        now = time.monotonic()
        for key, state in self._states.items():
            tracker = state.tracker
            if state.rewind_at is None or now < state.rewind_at or tracker is None or tracker.in_flight:
                continue
            position = tracker.rewind()
            state.rewind_at = None
            state.rewinds += 1
            if state.error is None and state.fetching:
                self._consumer.seek(TopicPartition(key[0], key[1], position))
                self._consumer.resume([state.tp])

    def _on_fetch_error(self, message: Message, error: KafkaError) -> None:
        topic, partition = message.topic(), message.partition()
        state = self._states.get((topic, partition)) if topic is not None and partition is not None else None
        if state is not None and error.code() in SOURCE_GONE:
            self._fail(state, f"source: {describe_error(error)}")
        elif error.code() == KafkaError._AUTO_OFFSET_RESET:
            log.warning("pipeline %s: checkpoint out of range, reset to earliest: %s", self.name, error)
        else:
            log.info("pipeline %s: fetch error: %s", self.name, error)

    def _refresh_watermarks(self) -> None:
        now = time.monotonic()
        if now < self._next_watermarks:
            return
        self._next_watermarks = now + WATERMARK_REFRESH_S
        idle: list[PartitionState] = []
        for state in self._states.values():
            # Cached: the end offset from the last fetch response, no broker round trip.
            _, high = self._consumer.get_watermark_offsets(state.tp, cached=True)
            # Before the first fetch response the cached end offset is 0 or invalid; an end
            # offset that went backwards would fake a caught-up partition.
            if high is not None and high > (state.source_end or 0):
                state.source_end = high
            tracker = state.tracker
            if tracker is not None and not tracker.pending and state.fetching and state.rewind_at is None:
                idle.append(state)
        if idle:
            self._skip_non_records(idle)

    def _skip_non_records(self, idle: list[PartitionState]) -> None:
        # Transaction markers and aborted records occupy offsets but never reach the copy loop,
        # so a checkpoint built from copied records stops just before them and the partition
        # would show a lag of one forever. The consumer's position is past every offset it has
        # handed over, and every record it handed over for these partitions was sent and
        # acknowledged (nothing pending, not rewinding), so the checkpoint may move up to it.
        for tp in self._consumer.position([s.tp for s in idle]):
            state = self._states.get((tp.topic, tp.partition))
            if state is not None and state.tracker is not None and tp.error is None and tp.offset >= 0:
                state.tracker.skip_to(tp.offset)
