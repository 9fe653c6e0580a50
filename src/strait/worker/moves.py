"""Which pipeline copies each of the copier's partitions, and the moves between them.

A route's record pipelines are split by fetch lag (the Meituan split): partitions lagging more
than the catch-up threshold go to the catch-up pipeline (larger fetches and batches), the others
to the realtime one. A ``copy: batch`` route starts every partition in its batch pipeline; one
whose batches cannot pass unchanged is handed to record mode (``state.mode``) and moved to the
realtime record pipeline.

A move is a release and a resume: the old pipeline stops fetching the partition, and once
nothing of it is in flight the new one starts at its checkpoint, the exact resume point (no
loss, no duplicates beyond what a release allows). The control thread drives every move; none
of this does I/O.
"""

from __future__ import annotations

import logging

from strait.worker.entries import Entry
from strait.worker.pipeline import PartitionState, Pipeline

log = logging.getLogger(__name__)

# A partition stays in a pipeline at least this long, so a lag that hovers around the
# threshold does not bounce it between pipelines (each move is a short drain).
MIN_DWELL_S = 5.0
CLASSIFY_INTERVAL_S = 1.0


class Moves:
    """The copier's pipelines and the rules for placing partitions in them.

    ``catchup`` is None when ``threshold`` is None (one record pipeline for every partition);
    ``batch`` is the ``copy: batch`` route's batch pipeline, else None, and ``copy_reason`` says
    why a route copies record by record.
    """

    def __init__(
        self,
        *,
        realtime: Pipeline,
        catchup: Pipeline | None,
        batch: Pipeline | None,
        threshold: int | None,
        copy_reason: str = "",
    ) -> None:
        self.realtime, self.catchup, self.batch = realtime, catchup, batch
        self.threshold = threshold
        self._copy_reason = copy_reason
        self._next_classify = 0.0

    def pipelines(self) -> list[Pipeline]:
        """Every pipeline, each once."""
        pipelines = [self.realtime] if self.catchup is None else [self.realtime, self.catchup]
        return pipelines if self.batch is None else [*pipelines, self.batch]

    def first(self, state: PartitionState, start: int, end: int) -> Pipeline:
        """The pipeline a partition starts in, copying from ``start`` with the source ending at ``end``."""
        lagging = self.catchup is not None and end - start > (self.threshold or 0)
        pipeline = self.catchup if lagging and self.catchup is not None else self.realtime
        if self.batch is not None:
            return self.batch
        state.mode_reason = self._copy_reason
        return pipeline

    def advance(self, entry: Entry, now: float) -> None:
        """Finish a move once the old pipeline let go of the partition."""
        if entry.released is None or not entry.released.is_set():
            return
        state = entry.state
        if state.failed or state.tracker is None or entry.target is None:
            entry.phase = "running"
            return
        # Nothing of the partition is in flight: the checkpoint is the exact resume point.
        checkpoint = state.checkpoint
        entry.target.add(state, state.tracker.position if checkpoint is None else checkpoint, move=True)
        entry.pipeline, entry.target, entry.released = entry.target, None, None
        entry.phase = "running"
        entry.since = now

    def classify(self, entries: list[Entry], now: float) -> None:
        """Move partitions between the realtime and catch-up pipelines by fetch lag (every
        CLASSIFY_INTERVAL_S)."""
        if self.threshold is None or self.catchup is None or now < self._next_classify:
            return
        self._next_classify = now + CLASSIFY_INTERVAL_S
        threshold = self.threshold
        for entry in entries:
            state = entry.state
            lag = state.lag
            if entry.phase != "running" or entry.revoke_deadline is not None or state.failed or lag is None:
                continue
            if now - entry.since < MIN_DWELL_S:
                continue
            if entry.pipeline is self.realtime and lag > threshold:
                target = self.catchup
            elif entry.pipeline is self.catchup and lag <= threshold // 4:
                target = self.realtime
            else:
                continue
            if entry.pipeline is None:
                continue
            log.info("moving %s to the %s pipeline (lag %d)", state.task, target.name, lag)
            self._move(entry, target)

    def to_record_mode(self, entries: list[Entry]) -> None:
        """Move partitions the batch pipeline handed to record mode to a record pipeline."""
        batch = self.batch
        if batch is None:
            return
        for entry in entries:
            state = entry.state
            if entry.pipeline is not batch or entry.phase != "running" or entry.revoke_deadline:
                continue
            if state.mode != "record" or state.failed:
                continue
            log.info("moving %s to record mode: %s", state.task, state.mode_reason)
            self._move(entry, self.realtime)

    @staticmethod
    def _move(entry: Entry, target: Pipeline) -> None:
        pipeline = entry.pipeline
        assert pipeline is not None
        entry.target = target
        entry.released = pipeline.release(entry.state)
        entry.phase = "moving"
