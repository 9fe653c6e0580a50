"""What every copy pipeline shares: the per-partition state, the interface the copier drives,
the settings, and which Kafka errors are worth a retry.

:class:`Pipeline` is the small protocol the copier uses; :class:`strait.worker.fetch.RecordPipeline`
(at-least-once) and :class:`strait.worker.transactional.TransactionalPipeline` (exactly-once)
implement it over the same fetch loop, :class:`strait.worker.batch.pipeline.BatchPipeline`
(``copy: batch``) over raw record batches.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from strait.offsetmap.runs import RunRecorder
from strait.worker.checkpoint import AckTracker
from strait.worker.startup import StartTrace
from strait.worker.task import PartitionTask

T = TypeVar("T")


def client_call(method: Callable[..., T], *args: Any) -> T:
    """Call a producer's ``poll``/``flush``; any client error comes out as ``KafkaException``.

    confluent-kafka 2.16 raises a fatal producer error (a fenced transactional producer, an
    idempotent producer's broken sequence) from ``flush()`` as the ``KafkaError`` object itself,
    which is no exception class: ``except Exception`` misses it and the pipeline thread dies
    silently (seen on a worker woken from SIGSTOP). When a delivery callback called into the
    client in the same call, it arrives as ``SystemError`` caused by the ``KafkaException``.
    A transactional producer fenced while ``flush()`` served its reports can also end the call
    with a bare ``SystemError`` ("returned NULL without setting an exception"): the client is in
    a state nobody can tell, so it comes out as a fatal ``_FATAL`` error (the exactly-once
    pipeline fences itself and stops its partitions; a worker frozen past its session hit it,
    and the pipeline's thread died with partitions still being assigned to it).
    """
    try:
        return method(*args)
    except KafkaException:
        raise
    except SystemError as exc:
        if isinstance(exc.__cause__, KafkaException):
            raise exc.__cause__ from None
        raise KafkaException(KafkaError(KafkaError._FATAL, f"client call failed: {exc}", fatal=True)) from exc
    except:  # the only way to catch a raised non-exception object
        value = sys.exc_info()[1]
        if isinstance(value, KafkaError):
            raise KafkaException(value) from None
        raise


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
    }
)

# The cluster refused us: a missing ACL, failed authentication or TLS. An operator fixes these
# without touching Strait (grants the ACL, rotates the password), so the partition waits and
# tries again instead of stopping for good; nothing is skipped meanwhile.
ACCESS_DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)
ACCESS_RETRY_S = 10.0

REWIND_BACKOFF_S = 1.0
WATERMARK_REFRESH_S = 0.5


def delivery_error_is_permanent(error: KafkaError) -> bool:
    """True if a failed delivery must stop its partition instead of being sent again."""
    if error.code() in DESTINATION_GONE:
        return True
    if error.code() in ACCESS_DENIED:
        return False
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
        self.skipped_origin = 0  # active-active: records from the destination, not copied back
        # Why the partition waits to try again (the cluster refused us); cleared by progress.
        self.waiting: str | None = None
        # Exactly-once pipelines only: the end of the records whose transaction committed.
        # Acknowledged records of an open transaction may still be aborted, so the checkpoint
        # is this, not the tracker's acknowledged position.
        self.durable: int | None = None
        # Which source offsets landed where on the destination (the offset map's runs).
        self.runs = RunRecorder()
        # How the partition is copied: "batch" (whole record batches) or "record", and why it is
        # copied record by record when its route asked for batches (or what the route says).
        self.mode = "record"
        self.mode_reason = ""
        # Data batches the batch pipeline fetched for the partition since it last entered batch
        # mode, and their records and bytes (strait.worker.moves judges whether batch mode pays).
        self.batches_fetched = 0
        self.batch_records_fetched = 0
        self.batch_bytes_fetched = 0
        self.batches_merged_fetched = 0  # of them small and uncompressed: merged when produced
        # The steps from the assignment to the first copied record (strait.worker.startup);
        # dropped once that record is acknowledged.
        self.trace: StartTrace | None = StartTrace()

    @property
    def failed(self) -> bool:
        """True once the partition stopped for good; ``error`` says why."""
        return self.error is not None

    @property
    def checkpoint(self) -> int | None:
        """The offset to resume from without loss, once copying has started."""
        if self.tracker is None:
            return None
        return self.tracker.position if self.durable is None else min(self.durable, self.tracker.position)

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

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        """Start copying ``state``'s partition from exactly ``offset`` (``move``: it comes from
        this worker's other pipeline, not from a fresh assignment)."""

    def release(self, state: PartitionState) -> threading.Event:
        """Stop fetching the partition; the event is set once nothing of it is in flight."""

    def abandon(self, state: PartitionState) -> threading.Event | None:
        """Stop the partition without another checkpoint: its worker is cut off from coordination.

        An event set once nothing of the partition can still become visible past its last
        committed checkpoint, or None when nothing needs waiting for."""

    def hold(self, on: bool) -> None:
        """Stop (True) or resume (False) fetching new records: the worker's lease is not
        confirmed, so no checkpoint can be committed, and all copied meanwhile would be copied
        again by the next owner. What was already fetched is still sent and acknowledged."""

    def stop(self, timeout_s: float) -> None:
        """Stop the loop; wait up to ``timeout_s`` for records in flight to be acknowledged."""

    def crashed(self) -> bool:
        """The loop's thread ended without being asked to stop."""


class PipelineLoop:
    """What every copy loop shares: one thread that owns the clients, a queue of commands the
    copier's thread puts there, and the start, release and stop half of the :class:`Pipeline`
    protocol. Subclasses make the attributes below in their ``__init__`` and implement the loop
    (``_run``), the release command (``_release``) and ``_close_unstarted``."""

    name: str
    _thread: threading.Thread
    _stopping: threading.Event
    _commands: queue.SimpleQueue[Callable[[], None]]
    _flush_timeout_s: float
    _held = False  # read by the loop's thread each turn (see hold)

    def start(self) -> None:
        """Start the loop's thread."""
        self._thread.start()

    def release(self, state: PartitionState) -> threading.Event:
        """Stop fetching the partition; the event is set once nothing of it is in flight."""
        done = threading.Event()
        if self._loop_ended():
            # The loop ended (stopped or crashed) and flushed what it could: nothing will ever
            # serve the command, and a revoke waiting for it would hold the partition forever.
            state.fetching = False
            done.set()
            return done
        self._commands.put(partial(self._release, state, done))
        return done

    def hold(self, on: bool) -> None:
        """Fetch nothing new while ``on`` (see :meth:`Pipeline.hold`)."""
        self._held = on

    def abandon(self, state: PartitionState) -> threading.Event | None:
        """Stop the partition without waiting for it: at least once, records still in flight may
        land after its checkpoint (duplicates for the next owner), and none is lost."""
        self.release(state)
        return None

    def stop(self, timeout_s: float) -> None:
        """Stop the loop; wait up to ``timeout_s`` for what is in flight to be acknowledged."""
        self._flush_timeout_s = timeout_s
        self._stopping.set()
        if self._thread.ident is None:
            self._close_unstarted()
        elif self._thread.is_alive():
            self._thread.join(timeout_s + 10)

    def _begin(self, state: PartitionState, offset: int) -> AckTracker | None:
        """The copier-thread half of ``add``: the partition's tracker from ``offset`` on (the
        checkpoint exists from now on, so the copier can commit the start offset at once), or
        None with ``state.error`` set when the loop is not running."""
        if self._stopping.is_set() or self._loop_ended():
            state.error = f"pipeline {self.name} is not running"
            return None
        state.tracker = AckTracker(offset)
        state.pipeline = self.name
        state.rewind_at = None
        return state.tracker

    def _loop_ended(self) -> bool:
        return self._thread.ident is not None and not self._thread.is_alive()

    def crashed(self) -> bool:
        """The loop's thread ended without being asked to stop (an error escaped a turn)."""
        return self._loop_ended() and not self._stopping.is_set()

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command()

    def _run(self) -> None:
        raise NotImplementedError

    def _release(self, state: PartitionState, done: threading.Event) -> None:
        raise NotImplementedError

    def _close_unstarted(self) -> None:
        """``stop`` before ``start``: release what the constructor opened."""
        raise NotImplementedError


@dataclass(frozen=True)
class PipelineSettings:
    """Bounds and latency knobs of one pipeline; defaults suit a realtime pipeline."""

    batch_size: int = 1000
    # Pre-fetched source data held by librdkafka, bounded per consumer, and the most one fetch
    # answer brings. A realtime pipeline's partitions are caught up, so these bound only what it
    # takes of a backlog appearing at once (a large transaction committed) before the partition
    # moves to a lagging pipeline: records the realtime records would queue behind.
    queued_max_kbytes: int = 2 * 1024
    fetch_max_bytes: int = 2 * 1024 * 1024
    fetch_wait_max_ms: int = 100
    # Batch pipelines only. While a leader's last fetch answer brought records and the
    # destination is still busy with produce requests, the next fetch asks the broker to gather
    # for as long as that lasts, up to this long (strait.worker.batch.gathering), instead of
    # answering at the first record; an idle leader is long-polled as before. 0: off.
    fetch_gather_ms: int = 0
    # How long librdkafka waits before fetching a partition again once the consumer's queue is
    # over its bounds (queued.max.messages.kbytes, queued.min.messages). Its default, 1 s, is
    # far longer than the loop takes to empty the queue (a 32 MB queue of 100 B records: about
    # 0.15 s), so a partition copying a backlog sat idle most of each second: record mode's
    # 8-partition catch-up ran at 135k records/s with the loop waiting in consume() for 3.1 of
    # 4.5 s, and at 300k+ with 10 ms. It never applies while the queue is under its bounds, so
    # caught-up partitions are not affected.
    fetch_queue_backoff_ms: int = 10
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
