"""The record copy loop: fetch from the source, produce to the destination, track acknowledgements.

A pipeline owns one source consumer (explicit assignment, never a group member), one
destination producer and one thread. The copier runs two of them per route, ``realtime`` and
``catchup`` (Meituan's fetcher isolation): a partition far behind reads cold data in large
fetches and fills its producer queue, and must not sit in the same fetch requests or the same
producer queue as partitions that are caught up.

One loop step: run the copier's commands, fetch a batch (only when the previous one is fully
produced), produce the batch until the producer queue is full, serve acknowledgements. Commands
run *between* produce passes only, and every command that changes a partition's position
(add, release, rewind, failure) first drops that partition's messages from the unproduced
batch: a message fetched before the change can never be produced after it.

The loop also checks the source stream itself: a record may leave a gap after the previous one
only when the consumer's own stream jumped (compaction, transaction markers, aborted records);
a gap the loop made by dropping a record rewinds the partition to its checkpoint and is
counted, so a slip becomes a duplicate at worst, never a loss.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message, TopicPartition

from strait import clients
from strait.access_errors import explain
from strait.metrics.stages import DESTINATION, SOURCE, CopyObserver, client_settings
from strait.worker.checkpoint import AckTracker, UnexpectedGap
from strait.worker.origin import OriginRule
from strait.worker.pipeline import (
    ACCESS_DENIED,
    ACCESS_RETRY_S,
    REWIND_BACKOFF_S,
    SOURCE_GONE,
    WATERMARK_REFRESH_S,
    PartitionState,
    PipelineSettings,
    client_call,
    delivery_error_is_permanent,
    describe_error,
)

log = logging.getLogger(__name__)

Key = tuple[str, int]

# Kinds of `strait_offset_gaps_total`.
GAP_SOURCE = "source"  # the source has no record there: compaction, markers, aborted records
GAP_RETENTION = "retention"  # the checkpoint fell below the source's log start
GAP_UNEXPECTED = "unexpected"  # a record the loop dropped: rewound, never committed past


class RecordPipeline:
    """Copies records one by one: key, value, headers and timestamp, to the same partition number.

    Idempotent producer with ``acks=all``: per-partition order holds through retries. All
    consumer and producer calls run on the pipeline's own thread; other threads talk to it
    through a command queue. ``consumer``/``producer`` replace the librdkafka clients (tests).
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
        consumer: Any = None,
        producer: Any = None,
        origin: OriginRule | None = None,
    ) -> None:
        self.name = name
        self._origin = origin  # active-active routes: stamp and skip by origin (origin.py)
        self._settings = settings
        self._observer = observer
        self._client_id = client_id
        self._source_props, self._destination_props = source, destination
        self._consumer = consumer if consumer is not None else self._make_consumer(source, group_id)
        self._producer = producer if producer is not None else self._make_producer(destination)
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._states: dict[Key, PartitionState] = {}
        self._assigned: set[Key] = set()
        self._draining: list[tuple[PartitionState, threading.Event]] = []
        # Fetched and not yet produced, in fetch order, each with where the consumer's stream of
        # its partition stood just before it; only ever holds partitions' current streams.
        self._backlog: deque[tuple[Message, int | None]] = deque()
        self._fetched_at = 0.0
        # Per partition, the offset the consumer's stream continues from: the offset it was
        # positioned at, then one past the last record it handed over.
        self._stream: dict[Key, int] = {}
        self._reset: set[Key] = set()  # the consumer reported an offset reset for these
        self._stopping = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"strait-copy-{client_id}-{name}", daemon=True)
        self._next_watermarks = 0.0
        self._flush_timeout_s = 0.0

    # -- clients (overridden by the transactional pipeline) ------------------------------------

    def _make_consumer(self, source: Mapping[str, Any], group_id: str) -> Any:
        settings = self._settings
        return clients.consumer(
            source,
            **client_settings(self._observer, SOURCE),
            **{
                "group.id": group_id,
                "client.id": f"{self._client_id}-{self.name}",
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

    def _producer_settings(self, destination: Mapping[str, Any]) -> dict[str, Any]:
        settings = self._settings
        overrides: dict[str, Any] = {
            "client.id": f"{self._client_id}-{self.name}",
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
            overrides["message.max.bytes"] = 64 * 1024 * 1024
        overrides.update(client_settings(self._observer, DESTINATION))
        return overrides

    def _make_producer(self, destination: Mapping[str, Any]) -> Any:
        return clients.producer(destination, **self._producer_settings(destination))

    # -- the Pipeline protocol (any thread) ----------------------------------------------------

    def start(self) -> None:
        """Start the loop's thread."""
        self._thread.start()

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        """Start copying ``state``'s partition from exactly ``offset``.

        ``move``: the partition comes from this worker's other pipeline, not from a fresh
        assignment (an exactly-once pipeline never takes a fenced transactional id back for it).
        """
        if self._stopping.is_set() or (self._thread.ident is not None and not self._thread.is_alive()):
            state.error = f"pipeline {self.name} is not running"
            return
        # The checkpoint exists from now on, so the copier can commit the start offset at once.
        state.tracker = AckTracker(offset)
        state.pipeline = self.name
        state.rewind_at = None
        self._commands.put(partial(self._add_moved if move else self._add, state, offset))

    def _add_moved(self, state: PartitionState, offset: int) -> None:
        self._add(state, offset)

    def release(self, state: PartitionState) -> threading.Event:
        """Stop fetching the partition; the event is set once nothing of it is in flight."""
        done = threading.Event()
        if self._thread.ident is not None and not self._thread.is_alive():
            # The loop ended (stopped or crashed) and flushed what it could: nothing will ever
            # serve the command, and a revoke waiting for it would hold the partition forever.
            state.fetching = False
            done.set()
            return done
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

    # -- the loop (pipeline thread) ------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._step()
        except Exception as exc:
            log.exception("pipeline %s crashed", self.name)
            for state in self._states.values():
                state.error = state.error or f"pipeline {self.name} crashed: {exc}"
                state.fetching = False
        finally:
            self._shutdown()

    def _step(self) -> None:
        """One turn of the loop; tests drive it directly."""
        self._run_commands()
        if not self._backlog:
            busy = bool(self._draining) or any(s.rewind_at for s in self._states.values())
            asked = time.monotonic()
            messages = self._fetch(0.02 if busy else 0.1)
            if messages:
                self._fetched_at = time.monotonic()
                if self._observer is not None:
                    self._observer.fetched(self.name, self._fetched_at - asked)
                self._take(messages)
        blocked = self._produce_backlog()
        # A full producer queue: wait a little for acknowledgements, then run commands (a
        # revoke must not wait for the backlog) before producing again.
        client_call(self._producer.poll, 0.05 if blocked else 0)
        self._after_poll()
        self._finish_releases()
        self._rewind_due()
        self._refresh_watermarks()

    def _take(self, messages: list[Any]) -> None:
        """Queue fetched messages, noting where each partition's consumer stream stood before each."""
        stream, backlog = self._stream, self._backlog
        for message in messages:
            offset = message.offset()
            if message.error() is not None or offset is None:
                backlog.append((message, None))
                continue
            key = (message.topic(), message.partition())
            backlog.append((message, stream.get(key)))
            stream[key] = offset + 1

    def _after_poll(self) -> None:
        """Hook for pipelines that act once per loop turn (the transactional one commits)."""

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
        self._backlog.clear()
        # Flush before closing the consumer: a delivery report during the flush may still touch
        # a partition's consumer state (pause), and acks that arrive move checkpoints that the
        # copier commits after.
        remaining = self._flush_on_stop(self._flush_timeout_s)
        if remaining:
            log.warning("pipeline %s stopped with %d records unacknowledged", self.name, remaining)
        self._closed = True
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError):
            log.warning("closing the %s consumer failed", self.name, exc_info=True)
        for _, done in self._draining:
            done.set()
        self._draining.clear()

    def _flush_on_stop(self, timeout_s: float) -> int:
        return int(client_call(self._producer.flush, timeout_s))

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
        self._reposition(key, offset)
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
            self._purge(key)
        state.fetching = False
        self._draining.append((state, done))
        self._finish_releases()

    def _reposition(self, key: Key, offset: int) -> None:
        """The consumer continues ``key`` from ``offset``: forget anything fetched before."""
        self._purge(key)
        self._stream[key] = offset
        self._reset.discard(key)

    def _purge(self, key: Key) -> None:
        if any((m.topic(), m.partition()) == key for m, _ in self._backlog):
            self._backlog = deque(e for e in self._backlog if (e[0].topic(), e[0].partition()) != key)

    def _unassign(self, key: Key) -> None:
        self._stream.pop(key, None)
        if key in self._assigned:
            self._assigned.discard(key)
            if not self._closed:
                self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])

    def _finish_releases(self) -> None:
        if not self._draining:
            return
        still: list[tuple[PartitionState, threading.Event]] = []
        for state, done in self._draining:
            if self._released(state):
                done.set()
            else:
                still.append((state, done))
        self._draining = still

    def _released(self, state: PartitionState) -> bool:
        """Whether nothing of a released partition is in flight any more."""
        return state.tracker is None or state.tracker.in_flight == 0

    def _fail(self, state: PartitionState, reason: str) -> None:
        if state.error is None:
            log.error("partition %s stopped: %s", state.task, reason)
            state.error = reason
        state.fetching = False
        key = (state.task.topic, state.task.partition)
        if self._states.get(key) is state:
            self._purge(key)
            self._unassign(key)

    # -- producing -----------------------------------------------------------------------------

    def _produce_backlog(self) -> bool:
        """Produce fetched records in order; True if the producer queue filled up first."""
        backlog = self._backlog
        while backlog:
            message, before = backlog[0]
            if not self._copy_one(message, before):
                return True
            backlog.popleft()
        return False

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
        observer = self._observer
        key, value = message.key(), message.value()
        size = (len(key) if key else 0) + (len(value) if value else 0)
        timestamp_type, timestamp = message.timestamp()
        if timestamp_type == TIMESTAMP_NOT_AVAILABLE:
            timestamp = 0
        if observer is None:
            on_delivery = partial(self._delivered, state, tracker, offset, size)
        else:
            produced = time.monotonic()
            observer.queued(self.name, produced - self._fetched_at)
            on_delivery = partial(self._observed, state, tracker, offset, size, produced, timestamp)
        refreshed = False
        while True:
            try:
                self._producer.produce(
                    state.task.destination_topic,
                    value,
                    key,
                    partition=state.task.partition,
                    on_delivery=on_delivery,
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
                    self._producer.list_topics(state.task.destination_topic, timeout=10)
                    continue
                self._produce_error(state, error)
                return True
            tracker.sent(offset, source_gap=source_gap)
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
        if key in self._assigned and not self._closed:
            self._consumer.pause([state.tp])

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
        message: Message,
    ) -> None:
        if error is None:
            tracker.acked(offset)
            written = message.offset()
            state.runs.note(offset, -1 if written is None else written)
            state.records += 1
            state.bytes += size
            state.last_progress = time.time()
            if state.waiting is not None:
                state.waiting = None
            return
        tracker.failed(offset)  # pins the checkpoint, whoever copies the partition now
        if delivery_error_is_permanent(error):
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
                self._reposition(key, position)
                self._consumer.seek(TopicPartition(key[0], key[1], position))
                self._consumer.resume([state.tp])

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

    # -- watermarks ----------------------------------------------------------------------------

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
        # The consumer's position is past every record in the backlog: only with nothing left
        # to produce does it say where the source has no more records.
        if idle and not self._backlog:
            self._skip_non_records(idle)

    def _skip_non_records(self, idle: list[PartitionState]) -> None:
        # Transaction markers and aborted records occupy offsets but never reach the copy loop,
        # so a checkpoint built from copied records stops just before them and the partition
        # would show a lag of one forever. The consumer's position is past every offset it has
        # handed over, and every record it handed over for these partitions was sent and
        # acknowledged (nothing pending, not rewinding, nothing left unproduced), so the
        # checkpoint may move up to it. This relies on librdkafka >= 1.9 resetting the
        # application position on seek(): after a rewind, position() is the rewind offset, not
        # the offset the consumer had reached before it.
        for tp in self._consumer.position([s.tp for s in idle]):
            key = (tp.topic, tp.partition)
            state = self._states.get(key)
            if state is None or state.tracker is None or tp.error is not None or tp.offset < 0:
                continue
            if state.tracker.skip_to(tp.offset):
                self._stream[key] = max(self._stream.get(key, 0), tp.offset)
