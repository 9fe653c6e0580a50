"""The record copy loop: fetch from the source, produce to the destination, track acknowledgements.

A pipeline owns one source consumer (explicit assignment, never a group member), one
destination producer and one thread. The copier runs two of them per route, ``realtime`` and
``catchup`` (Meituan's fetcher isolation): a partition far behind reads cold data in large
fetches and fills its producer queue, and must not sit in the same fetch requests or the same
producer queue as partitions that are caught up.

One loop step: run the copier's commands, fetch a batch (only when the previous one is fully
produced), produce the batch until the producer queue is full, serve acknowledgements and settle
them (:mod:`strait.worker.deliveries`: in bulk, not one Python call per record). Commands
run *between* produce passes only, and every command that changes a partition's position
(add, release, rewind, failure) first drops that partition's messages from the unproduced
batch: a message fetched before the change can never be produced after it.

The produce pass works through the batch a run of one partition at a time
(:mod:`strait.worker.backlog`): consecutive records that continue exactly where the last record
sent ended go out in a tight loop and are registered with the partition's tracker together;
anything else (a gap, a stale record, an error, a refused record) takes the per-record path,
which also serves active-active routes (the exactly-once pipeline takes the tight loop too,
through the hooks of :mod:`strait.worker.sending`).

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
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaException

from strait import clients
from strait.metrics.stages import DESTINATION, SOURCE, CopyObserver, client_settings
from strait.worker.backlog import Key as Key
from strait.worker.backlog import Run, purge, runs_of
from strait.worker.deliveries import DeliveryBook
from strait.worker.origin import OriginRule
from strait.worker.pipeline import (
    WATERMARK_REFRESH_S,
    PartitionState,
    PipelineLoop,
    PipelineSettings,
    client_call,
)
from strait.worker.sending import GAP_RETENTION as GAP_RETENTION
from strait.worker.sending import GAP_SOURCE as GAP_SOURCE
from strait.worker.sending import GAP_UNEXPECTED as GAP_UNEXPECTED
from strait.worker.sending import RecordSending
from strait.worker.source_partitions import SourcePartitions
from strait.worker.stalls import LoopWatch
from strait.worker.startup import ASSIGNED, FETCHED, mark

log = logging.getLogger(__name__)


class RecordPipeline(RecordSending, PipelineLoop):
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
        self._source = SourcePartitions(self._consumer)  # every assign/pause/resume/seek
        self._draining: list[tuple[PartitionState, threading.Event]] = []
        # Fetched and not yet produced, in fetch order, in runs of one partition, each with where
        # the consumer's stream of its partition stood just before it; only ever holds
        # partitions' current streams.
        self._backlog: deque[Run] = deque()
        self._drained = False
        self._fetched_at = 0.0
        # Delivery reports waiting to be settled (after each poll and flush).
        self._book = DeliveryBook(name, observer, self._delivered)
        self._bulk = self._bulk_allowed()
        # Per partition, the offset the consumer's stream continues from: the offset it was
        # positioned at, then one past the last record it handed over.
        self._stream: dict[Key, int] = {}
        self._reset: set[Key] = set()  # the consumer reported an offset reset for these
        # Partitions added whose first records were not fetched yet (strait.worker.startup).
        self._first_fetch: dict[Key, PartitionState] = {}
        self._stopping = threading.Event()
        self._closing = False  # the pipeline is shutting down (its last flush, then close)
        self._thread = threading.Thread(target=self._run, name=f"strait-copy-{client_id}-{name}", daemon=True)
        self._next_watermarks = 0.0
        self._flush_timeout_s = 0.0
        self._watch = LoopWatch(name)  # slow loop turns in the debug log (strait.worker.stalls)

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
                "fetch.queue.backoff.ms": settings.fetch_queue_backoff_ms,
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

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        """Start copying ``state``'s partition from exactly ``offset``.

        ``move``: the partition comes from this worker's other pipeline, not from a fresh
        assignment (an exactly-once pipeline never takes a fenced transactional id back for it).
        """
        if self._begin(state, offset) is not None:
            self._commands.put(partial(self._add_moved if move else self._add, state, offset))
            # Both clients learn a new topic's metadata now, while the command waits for the
            # loop: the producer's first record then goes out without a metadata round trip.
            for client, topic in ((self._consumer, state.task.topic), (self._producer, state.task.destination_topic)):
                look_up = getattr(client, "look_up", None)  # test doubles have none
                if look_up is not None:
                    look_up([topic])

    def _add_moved(self, state: PartitionState, offset: int) -> None:
        self._add(state, offset)

    def _close_unstarted(self) -> None:
        self._shutdown()

    # -- the loop (pipeline thread) ------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._watch.run_here()
            step = self._watch.wrap(self._step)
            while not self._stopping.is_set():
                step()
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
        if not self._backlog and not self._held:
            busy = bool(self._draining) or any(s.rewind_at for s in self._states.values())
            asked = time.monotonic()
            messages = self._fetch(0.02 if busy else 0.1)
            # Fewer than a batch: the consumer's prefetched records are all taken (caught up,
            # as far as this worker can tell without asking the source).
            self._drained = len(messages) < self._settings.batch_size
            if messages:
                self._fetched_at = time.monotonic()
                if self._observer is not None:
                    self._observer.fetched(self.name, self._fetched_at - asked)
                runs = runs_of(messages, self._stream)
                if self._first_fetch:
                    self._note_first_fetch(runs)
                self._backlog.extend(runs)
        blocked = self._produce_backlog()
        # A full producer queue: wait a little for acknowledgements, then run commands (a
        # revoke must not wait for the backlog) before producing again.
        # (Held with nothing left to send: wait for acknowledgements instead of spinning.)
        client_call(self._producer.poll, 0.05 if blocked or (self._held and not self._backlog) else 0)
        self._book.settle()
        self._after_poll()
        self._finish_releases()
        self._rewind_due()
        self._refresh_watermarks()

    def _note_first_fetch(self, runs: list[Run]) -> None:
        for run in runs:
            state = self._first_fetch.pop(run.key, None) if run.key is not None else None
            if state is not None:
                mark(state, FETCHED)

    def _after_poll(self) -> None:
        """Hook for pipelines that act once per loop turn (the transactional one commits)."""

    def _fetch(self, wait_s: float) -> list[Any]:
        # consume(n, t) waits until n records *or* t passed: at low rates that holds every record
        # back for up to t. Take what is ready; only when nothing is, wait for the first record,
        # then take whatever arrived with it. Under load batches stay full; idle adds no delay.
        batch = self._settings.batch_size
        messages: list[Any] = self._consumer.consume(batch, 0)
        if not messages:
            with self._watch.idle():
                messages = self._consumer.consume(1, wait_s)
            if messages and batch > 1:
                messages += self._consumer.consume(batch - 1, 0)
        return messages

    def _shutdown(self) -> None:
        self._closing = True
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
        self._source.close()
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError):
            log.warning("closing the %s consumer failed", self.name, exc_info=True)
        self._close_producer(remaining)
        for _, done in self._draining:
            done.set()
        self._draining.clear()

    def _flush_on_stop(self, timeout_s: float) -> int:
        return self._flush(timeout_s)

    def _close_producer(self, unacknowledged: int) -> None:
        """Let the producer go now. Left to the garbage collector (the copier keeps its stopped
        pipelines), it would keep reconnecting after its cluster went and print librdkafka's
        complaints onto a person's terminal. close() flushes without a bound, so records still
        unacknowledged after the bounded flush are dropped first (their reports are never
        settled: the checkpoints stay at what the destination acknowledged)."""
        close = getattr(self._producer, "close", None)  # test doubles have none
        if close is None:
            return
        try:
            if unacknowledged:
                self._producer.purge()
                self._producer.flush(0)
            # confluent-kafka reports a failed abort inside close() (a fenced producer's) as a
            # RuntimeWarning on stderr: into the log with it instead.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                close()
            for warning in caught:
                log.info("pipeline %s: closing its producer: %s", self.name, warning.message)
        except (KafkaException, RuntimeError):
            log.warning("closing the %s producer failed", self.name, exc_info=True)

    def _flush(self, timeout_s: float) -> int:
        """Flush the producer and settle every report it served; the records still unreported."""
        remaining = int(client_call(self._producer.flush, timeout_s))
        self._book.settle()
        return remaining

    def _add(self, state: PartitionState, offset: int) -> None:
        key = (state.task.topic, state.task.partition)
        state.fetching = True
        self._states[key] = state
        if state.trace is not None:
            mark(state, ASSIGNED)
            self._first_fetch[key] = state
        self._reposition(key, offset)
        self._source.start(key, offset)

    def _release(self, state: PartitionState, done: threading.Event) -> None:
        key = (state.task.topic, state.task.partition)
        if self._states.get(key) is state:
            del self._states[key]
            self._first_fetch.pop(key, None)
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
        purge(self._backlog, key)

    def _unassign(self, key: Key) -> None:
        self._stream.pop(key, None)
        self._source.stop(key)

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
                self._source.resume_at(key, position)

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
