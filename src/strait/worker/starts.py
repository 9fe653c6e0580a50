"""Starting the copier's partitions: make each destination topic ready, read each start offset
(checkpoint, source range), and hand the partition to the pipeline it starts in; what cannot
start yet is tried again with a backoff. Runs on the copier's control thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException

from strait.access_errors import explain
from strait.metrics.stages import CopyObserver
from strait.worker.commits import Ticket
from strait.worker.entries import DestinationManager, Entry
from strait.worker.moves import Moves
from strait.worker.source_checkpoints import CheckpointStore, EarlyStarts, StartOffsets
from strait.worker.startup import DESTINATION_READY, HANDED, OFFSETS_READ, mark
from strait.worker.task import PartitionTask

log = logging.getLogger(__name__)

# Starting a partition needs the source and destination admin APIs; when they fail the
# partition is tried again every FIRST_START_RETRY_S for QUICK_TRIES tries, then after doubling
# waits up to START_RETRY_S. The first tries come soon: a topic created a moment ago is often not
# yet served by its leader (UNKNOWN_TOPIC, NOT_LEADER on its offsets) for up to ~1.5 s, and with
# a doubling from the first retry its first record waited for the try at 1.75 s.
START_RETRY_S = 5.0
FIRST_START_RETRY_S = 0.25
QUICK_TRIES = 6
# A partition whose destination topic is still being made ready is looked at again this soon.
DESTINATION_CHECK_S = 0.05


class PartitionStarts:
    """The start-up half of :class:`strait.worker.copier.Copier` (a mixin: the copier owns the
    attributes below)."""

    route: str
    group_id: str
    _source_props: Mapping[str, Any]
    _destination_props: Mapping[str, Any]
    _destinations: DestinationManager
    _checkpoints: CheckpointStore
    _early: EarlyStarts | None
    _observer: CopyObserver | None
    _lock: threading.Lock
    _moves: Moves

    def _commit(self, entries: list[Entry]) -> Ticket | None:
        raise NotImplementedError

    def _start_partitions(self, entries: list[Entry]) -> None:
        """Make destinations ready, find each start offset, and hand partitions to a pipeline."""
        by_topic: dict[tuple[str, str], list[Entry]] = {}
        for entry in entries:
            task = entry.state.task
            by_topic.setdefault((task.topic, task.destination_topic), []).append(entry)
        ready: list[Entry] = []
        # Never waits for a creation: topics whose destination is ready start now, the others are
        # being made ready in the background (prepared on assignment) and are looked at again on
        # a later tick. Waiting here held back every other topic and this thread: ten topics
        # added one after another started in serial groups, each waiting for its slowest creation.
        outcomes = self._destinations.ready(
            {pair: max(e.state.task.partition for e in group) + 1 for pair, group in by_topic.items()}
        )
        for (topic, destination_topic), group in by_topic.items():
            if (topic, destination_topic) not in outcomes:
                for entry in group:
                    entry.next_attempt = time.monotonic() + DESTINATION_CHECK_S
                continue
            outcome = outcomes[(topic, destination_topic)]
            if isinstance(outcome, KafkaException):
                self._retry_later(group, explain(self._destination_props, outcome, destination_topic))
                continue
            if isinstance(outcome, Exception):
                self._retry_later(group, str(outcome))
                continue
            for entry in group:
                mark(entry.state, DESTINATION_READY)
            ready.extend(group)
        starts = self._read_starts(ready)
        if not starts:
            return
        ready = [e for e in ready if e.state.task in starts]
        fresh: list[Entry] = []
        for entry in ready:
            mark(entry.state, OFFSETS_READ)
            start, end, committed = starts[entry.state.task]
            if start < 0 or end < 0:
                # A broker answering mid-restart may report no offset at all (-1001).
                self._retry_later([entry], f"source offsets unavailable (start {start}, end {end})")
                continue
            state = entry.state
            state.source_end = end
            state.committed = committed
            if committed is None:
                fresh.append(entry)
            elif committed > start:
                # The source's end is below our checkpoint: an unclean leader election lost
                # records we had copied. Copying resumes where the source is; the checkpoint
                # may move back this once, knowingly.
                log.warning("%s: checkpoint %d is above the source's end offset %d", state.task, committed, start)
                state.committed = start
            elif committed < start:
                state.skipped = start - committed
                log.warning(
                    "%s: checkpoint %d is below the source's earliest offset %d; %d records were "
                    "deleted by source retention before they could be copied",
                    state.task,
                    committed,
                    start,
                    state.skipped,
                )
            pipeline = self._moves.first(state, start, end)
            with self._lock:
                if entry.revoke_deadline is not None:
                    continue
                entry.phase = "running"
                entry.pipeline = pipeline
                entry.since = time.monotonic()
                entry.arriving_end = self._moves.arrival(pipeline, start, end)
                entry.start_error = None
                entry.start_failures = 0
            log.info(
                "starting %s in the %s pipeline at offset %d (checkpoint %s, source end %d)",
                state.task,
                pipeline.name,
                start,
                committed,
                end,
            )
            mark(state, HANDED)
            pipeline.add(state, start)
        # A start resolved from "latest" must survive this worker: a later owner resolving
        # "latest" again would skip every record produced in between.
        self._commit([e for e in fresh if e.phase == "running"])

    def _read_starts(self, ready: list[Entry]) -> dict[PartitionTask, StartOffsets]:
        """Start offsets of the ready partitions: read early where that read is done; entries
        whose early read is still under way are looked at again soon, the others read now."""
        tasks = [e.state.task for e in ready]
        starts: dict[PartitionTask, StartOffsets] = {}
        if self._early is not None:
            starts, pending, tasks = self._early.take(tasks)
            for entry in ready:
                if entry.state.task in pending:
                    entry.next_attempt = time.monotonic() + DESTINATION_CHECK_S
        if tasks:
            try:
                starts.update(self._checkpoints.start_offsets(tasks))
            except KafkaException as exc:
                unread = set(tasks)
                reason = f"reading checkpoints: {explain(self._source_props, exc, self.group_id)}"
                self._retry_later([e for e in ready if e.state.task in unread], reason)
        return starts

    def _retry_later(self, entries: list[Entry], reason: str) -> None:
        failures = 1 + max((e.start_failures for e in entries), default=0)
        delay = min(START_RETRY_S, FIRST_START_RETRY_S * 2 ** max(0, failures - QUICK_TRIES))
        # The quick retries are routine right after a topic was created.
        level = logging.WARNING if failures > QUICK_TRIES else logging.INFO
        log.log(
            level,
            "copier %s: cannot start %d partition(s) yet (retry in %.2fs): %s",
            self.route,
            len(entries),
            delay,
            reason,
        )
        for entry in entries:
            entry.start_error = reason
            entry.start_failures = failures
            entry.next_attempt = time.monotonic() + delay
