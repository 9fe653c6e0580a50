"""A route's checkpoints as the route group's committed offsets on the source cluster, and
where each partition's copy starts from them (split out of :mod:`strait.worker.copier`, which
uses a :class:`CheckpointStore`; exactly-once routes bring their own, see
:mod:`strait.worker.transactional_checkpoints`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-export not in __all__

from strait import clients
from strait.worker.checkpoint import start_offset
from strait.worker.task import PartitionTask

ADMIN_TIMEOUT_S = 15.0
# A start offset read when its partition was assigned is used for this long (then read again).
EARLY_READ_MAX_AGE_S = 10.0


class StartOffsets(NamedTuple):
    """Where a partition's copy starts, and what the source says about it."""

    start: int
    end: int
    committed: int | None


class CheckpointStore(Protocol):
    """Where a route keeps its checkpoints; :class:`SourceCheckpoints` is the real one."""

    def start_offsets(self, tasks: list[PartitionTask]) -> dict[PartitionTask, StartOffsets]:
        """Start offset, source end offset and committed checkpoint per task; raises KafkaException."""

    def commit(self, offsets: Mapping[PartitionTask, int]) -> set[PartitionTask]:
        """Commit checkpoints in one request; the tasks whose commit failed. Raises KafkaException."""

    def close(self) -> None:
        """Release the clients."""


class SourceCheckpoints:
    """Checkpoints as the route group's committed offsets on the source cluster.

    A consumer that never subscribes reads and commits them: it carries the route's group.id,
    so commits land in the group and standard tooling shows the lag, but it never joins the
    group, so no rebalance can ever involve it.
    """

    # Start offsets may be read as soon as a partition is assigned, while its destination topic
    # is made ready (:class:`EarlyStarts`): read earlier, a checkpoint (only ever moved forward
    # by the partition's owners) and the source's earliest and latest offsets can only be lower
    # than or equal to what a later read gives, so the copy starts at the same record or an
    # earlier one: a duplicate at worst, never a loss.
    reads_early = True

    def __init__(self, *, source: Mapping[str, Any], group_id: str, client_id: str) -> None:
        self._committer = clients.consumer(
            source,
            **{"group.id": group_id, "client.id": f"{client_id}-checkpoints", "enable.auto.commit": False},
        )
        # Metadata requests for one topic must never create it on the source.
        self._admin = clients.admin(source, **{"allow.auto.create.topics": False})

    def start_offsets(self, tasks: list[PartitionTask]) -> dict[PartitionTask, StartOffsets]:
        """Start offset, source end offset and committed checkpoint per task; raises KafkaException."""
        tps = [TopicPartition(t.topic, t.partition) for t in tasks]
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="start-offsets") as reads:
            # The checkpoints are read while the offsets are asked for (they are independent): a
            # partition's start waits for two round trips, not four.
            committed_read = reads.submit(self._committer.committed, tps, timeout=ADMIN_TIMEOUT_S)
            # list_offsets finds leaders in the client's cached metadata, which does not know the
            # partitions a source topic just grew; refresh it for the topics being started.
            topics = sorted({t.topic for t in tasks})
            if len(topics) == 1:
                self._admin.list_topics(topics[0], timeout=ADMIN_TIMEOUT_S)
            elif topics:
                # A round trip per topic, all at once: ten topics added together start together.
                with ThreadPoolExecutor(max_workers=min(len(topics), 8), thread_name_prefix="metadata") as pool:
                    list(pool.map(lambda topic: self._admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S), topics))
            earliest_read = reads.submit(list_offsets, self._admin, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
            latest_read = reads.submit(list_offsets, self._admin, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
            committed, earliest, latest = committed_read.result(), earliest_read.result(), latest_read.result()
        result: dict[PartitionTask, StartOffsets] = {}
        for task, tp in zip(tasks, committed, strict=True):
            if tp.error is not None:
                raise KafkaException(tp.error)
            low, high = earliest[(task.topic, task.partition)], latest[(task.topic, task.partition)]
            checkpoint = tp.offset if tp.offset >= 0 else None
            result[task] = StartOffsets(start_offset(task.start, checkpoint, low, high), high, checkpoint)
        return result

    def commit(self, offsets: Mapping[PartitionTask, int]) -> set[PartitionTask]:
        """Commit checkpoints synchronously in one request; the tasks whose commit failed."""
        by_key = {(t.topic, t.partition): t for t in offsets}
        results = self._committer.commit(
            offsets=[TopicPartition(t.topic, t.partition, offset) for t, offset in offsets.items()],
            asynchronous=False,
        )
        return {by_key[(tp.topic, tp.partition)] for tp in results or [] if tp.error is not None}

    def close(self) -> None:
        """Release the clients."""
        self._committer.close()


def list_offsets(admin: Any, tps: list[TopicPartition], spec: OffsetSpec) -> dict[tuple[str, int], int]:
    """Offsets of ``spec`` per partition; raises KafkaException, also when the cluster never answers."""
    # read_committed: "latest" is the last stable offset, so a start from "latest" does not skip
    # records of a transaction that is still open and commits later.
    futures = admin.list_offsets(
        {TopicPartition(tp.topic, tp.partition): spec for tp in tps},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=ADMIN_TIMEOUT_S,
    )
    wait_s = ADMIN_TIMEOUT_S + 5.0
    return {
        (tp.topic, tp.partition): clients.admin_result(f, wait_s, f"offsets of {tp.topic}/{tp.partition}").offset
        for tp, f in futures.items()
    }


class EarlyStarts:
    """Start offsets read in the background as soon as partitions are assigned, so a new
    partition's start does not wait for them after its destination topic is ready (the reads
    are independent of the destination). Each read is used once, and only while it is younger
    than ``max_age_s``; a failed or missing read is left to the copier's own read."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        max_age_s: float = EARLY_READ_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._max_age_s = max_age_s
        self._clock = clock
        # Topics are assigned one by one as they are added: their reads must not queue up.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="early-starts")
        self._lock = threading.Lock()
        self._reads: dict[PartitionTask, tuple[Future[dict[PartitionTask, StartOffsets]], float]] = {}
        self._closed = False

    def ask(self, tasks: list[PartitionTask]) -> None:
        """Start reading the start offsets of ``tasks``; returns at once."""
        if not tasks:
            return
        with self._lock:
            if self._closed:
                return
            future = self._pool.submit(self._store.start_offsets, list(tasks))
            now = self._clock()
            for task in tasks:
                self._reads[task] = (future, now)

    def take(
        self, tasks: list[PartitionTask]
    ) -> tuple[dict[PartitionTask, StartOffsets], set[PartitionTask], list[PartitionTask]]:
        """The early reads of ``tasks`` that are done (each handed out once), the tasks whose
        read is still under way, and the tasks the caller must read itself."""
        found: dict[PartitionTask, StartOffsets] = {}
        pending: set[PartitionTask] = set()
        missing: list[PartitionTask] = []
        now = self._clock()
        with self._lock:
            for task in tasks:
                read = self._reads.get(task)
                if read is None:
                    missing.append(task)
                    continue
                future, asked_at = read
                if not future.done() and now - asked_at <= self._max_age_s:
                    pending.add(task)
                    continue
                del self._reads[task]
                result = None
                if future.done() and future.exception() is None and now - asked_at <= self._max_age_s:
                    result = future.result().get(task)
                if result is None:
                    missing.append(task)
                else:
                    found[task] = result
        return found, pending, missing

    def forget(self, tasks: list[PartitionTask]) -> None:
        """Drop what was read for ``tasks`` (revoked before they started)."""
        with self._lock:
            for task in tasks:
                self._reads.pop(task, None)

    def close(self) -> None:
        """Stop reading; waits for a read under way (the store's clients must outlive it)."""
        with self._lock:
            self._closed = True
            self._reads.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
