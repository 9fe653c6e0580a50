"""Which pipeline copies each of the copier's partitions, and the moves between them.

The Meituan split, by fetch lag: a partition lagging more than the catch-up threshold is copied
by a catch-up pipeline, a caught-up one by the realtime pipeline, so a backlog cannot hold up
the records of a partition that keeps up. A record route's catch-up pipeline is a second record
pipeline (larger fetches and batches). A ``copy: batch`` route's is its batch pipeline: a lagging
partition's whole record batches pass through unchanged (the cheapest way to drain a backlog),
while a caught-up partition, whose source batches hold a few records each, is copied record by
record by the realtime pipeline, which re-batches through librdkafka (copied one for one, such
batches made the batch loop's round trips the bottleneck and its latency tail ten times record
mode's). A partition moves to the catch-up pipeline when its lag exceeds the threshold and back
when it is at most a quarter of it, staying at least MIN_DWELL_S in each (hysteresis).

Batch mode pays only where the source's batches are large: its cost is per batch, record
mode's per record. A lagging partition whose source batches hold few records (a trickle's
backlog: ~4 records per batch at 10,000 records/s measured, where batch mode fell behind at
about 7,500 records/s while record mode copies 100,000+) moves to the record catch-up pipeline
once SPARSE_JUDGED_BATCHES batches showed it, and stays in record mode for SPARSE_HOLD_S.

A partition whose batches cannot pass unchanged (compacted gaps, a codec the destination would
change, old formats...) is handed to record mode by the batch pipeline (``state.mode``), moves
to the realtime record pipeline and never goes back to batch mode while assigned here; from then
on it moves between the record pipelines like a record route's partition.

A move is a release and a resume: the old pipeline stops fetching the partition, and once
nothing of it is in flight the new one starts at its checkpoint, the exact resume point (no
loss; duplicates only where a release gives up a batch whose answer was lost). The control
thread drives every move; none of this does I/O.
"""

from __future__ import annotations

import logging

from strait.worker.entries import Entry
from strait.worker.pipeline import PartitionState, Pipeline
from strait.worker.task import PartitionTask

log = logging.getLogger(__name__)

# A partition stays in a pipeline at least this long, so a lag that hovers around the
# threshold does not bounce it between pipelines (each move is a short drain).
MIN_DWELL_S = 5.0
CLASSIFY_INTERVAL_S = 1.0
# A partition that moved to the realtime pipeline from a lagging one copies its backlog's last
# records there (as old as the backlog), and one that starts there copies what the source holds
# beyond its checkpoint: the batch pipeline's latency pace is told (``arriving``) until the
# partition is acknowledged up to the source's end at its arrival, or for this long at most.
ARRIVING_S = 10.0
# Batch mode pays from this many records, or bytes, per source batch on average (quiet
# measurements: ~2,000 batches/s through the batch loop against 100,000-160,000 records/s of 100 B
# through record mode put the break-even near 64 records of 100 B; 32 KiB covers large records).
SPARSE_RECORDS_PER_BATCH = 64
SPARSE_BATCH_BYTES = 32 * 1024
# Judged only once this many data batches were fetched in batch mode (one fetch can be a
# backlog's odd tail), and a partition found sparse stays in record mode this long.
SPARSE_JUDGED_BATCHES = 200
SPARSE_HOLD_S = 300.0
# realtime_copy: auto: the route's caught-up partitions on this worker use the realtime batch
# pipeline while they receive more than AUTO_BATCH_ABOVE records/s together, and record mode
# again below AUTO_RECORD_BELOW. Measured over 8 partitions: at 10,000 records/s whole merged
# batches cut the destination broker's CPU from ~46 % to ~27 % (librdkafka sends one request per
# partition); at 1,000 records/s a fetch brings about one record, and the batch loop's Python
# per round trip doubled the worker's CPU (65 % against 30 %) for nothing.
AUTO_BATCH_ABOVE = 5_000.0
AUTO_RECORD_BELOW = 2_500.0
# The rate is smoothed over windows of CLASSIFY_INTERVAL_S (weight of the newest window).
RATE_WEIGHT = 0.3


def lagging_reason(threshold: int) -> str:
    """Why a batch route's partition runs in batch mode (a stable text: ``strait status`` counts
    partitions per reason; each partition's lag is in its own stats)."""
    return f"lagging: more than {threshold:,} records behind"


def caught_up_reason(threshold: int) -> str:
    """Why a batch route's partition runs in record mode while it keeps up."""
    return f"caught up: batch mode once more than {threshold:,} records behind"


def sparse_reason() -> str:
    """Why a batch route's lagging partition runs in record mode: its source batches are small."""
    return (
        f"small source batches: record mode (batch mode pays from {SPARSE_RECORDS_PER_BATCH} records "
        f"or {SPARSE_BATCH_BYTES // 1024} KiB per batch)"
    )


def caught_up_batch_reason() -> str:
    """Why a batch route's caught-up partition runs in batch mode in the realtime pipeline."""
    return "caught up: realtime pipeline, small uncompressed batches merged"


def sparse(state: PartitionState) -> bool:
    """True when enough of the partition's batches were seen and they are too small for batch
    mode: small batches that merge (uncompressed, strait.worker.batch.merging) pay in it too."""
    batches = state.batches_fetched
    if batches < SPARSE_JUDGED_BATCHES or 2 * state.batches_merged_fetched >= batches:
        return False
    return (
        state.batch_records_fetched < SPARSE_RECORDS_PER_BATCH * batches
        and state.batch_bytes_fetched < SPARSE_BATCH_BYTES * batches
    )


def settled(state: PartitionState) -> bool:
    """Every record of the partition's source, as far as the worker knows its end, is
    acknowledged by the destination: nothing fetched waits, nothing known is left to fetch."""
    tracker, end = state.tracker, state.source_end
    return tracker is not None and end is not None and tracker.position >= end


class Moves:
    """The copier's pipelines and the rules for placing partitions in them.

    ``catchup`` is None when ``threshold`` is None (one record pipeline for every partition);
    ``batch`` is the ``copy: batch`` route's batch pipeline, else None, and ``copy_reason`` says
    why a route copies record by record. A batch route with ``threshold`` None copies every
    partition in batch mode, lagging or not. ``realtime_batch``, when given, is a second batch
    pipeline of the realtime role (its own thread and sockets, never paced): a batch route's
    caught-up partitions run there, their small uncompressed batches merged, and ``realtime``
    (record by record) holds only those whose batches cannot pass unchanged or were found too
    small to pay (compressed). With ``auto``, only while the realtime partitions together
    receive more than AUTO_BATCH_ABOVE records/s (below AUTO_RECORD_BELOW, record by record).
    ``keep_batches`` (two-way routes): small batches never send a partition to record mode.
    """

    def __init__(
        self,
        *,
        realtime: Pipeline,
        catchup: Pipeline | None,
        batch: Pipeline | None,
        threshold: int | None,
        copy_reason: str = "",
        realtime_batch: Pipeline | None = None,
        auto: bool = False,
        keep_batches: bool = False,
    ) -> None:
        self.realtime, self.catchup, self.batch = realtime, catchup, batch
        self.realtime_batch = realtime_batch if batch is not None and threshold is not None else None
        # auto: the realtime batch pipeline only while the realtime partitions are busy enough.
        self.auto = auto and self.realtime_batch is not None
        self.rate: float | None = None  # records/s acknowledged for the realtime partitions
        self._busy = not self.auto
        self._counts: dict[PartitionTask, int] = {}  # records acknowledged, at the last measure
        self._counted_at: float | None = None
        self.threshold = threshold
        self._copy_reason = copy_reason
        self._keep_batches = keep_batches
        self._next_classify = 0.0

    def pipelines(self) -> list[Pipeline]:
        """Every pipeline, each once."""
        pipelines = [self.realtime] if self.catchup is None else [self.realtime, self.catchup]
        if self.realtime_batch is not None:
            pipelines.append(self.realtime_batch)
        return pipelines if self.batch is None else [*pipelines, self.batch]

    def realtime_role(self, pipeline: Pipeline | None) -> bool:
        """True for the pipelines that copy caught-up partitions."""
        return pipeline is not None and (pipeline is self.realtime or pipeline is self.realtime_batch)

    def batch_mode(self, pipeline: Pipeline | None) -> bool:
        """True for the pipelines that copy whole batches."""
        return pipeline is not None and (pipeline is self.batch or pipeline is self.realtime_batch)

    def _realtime_home(self, entry: Entry, now: float) -> Pipeline:
        """The realtime pipeline a caught-up partition belongs in: the batch one unless its
        batches cannot pass unchanged (for good) or were found too small (for a while)."""
        batch = self.realtime_batch
        if batch is not None and self._busy and not entry.batch_fallback and now >= entry.sparse_until:
            return batch
        return self.realtime

    def _measure(self, entries: list[Entry], now: float) -> None:
        """auto: the realtime partitions' records/s (smoothed), and whether they are busy."""
        if not self.auto:
            return
        counts = {e.state.task: e.state.records for e in entries if self.realtime_role(e.pipeline)}
        previous, self._counts = self._counts, counts
        at, self._counted_at = self._counted_at, now
        if at is None or now <= at:
            return
        # Only partitions in a realtime pipeline at both measures (one arriving from a backlog
        # brings its backlog's count).
        copied = sum(max(0, n - previous[task]) for task, n in counts.items() if task in previous)
        sample = copied / (now - at)
        self.rate = sample if self.rate is None else RATE_WEIGHT * sample + (1 - RATE_WEIGHT) * self.rate
        if not self._busy and self.rate > AUTO_BATCH_ABOVE:
            log.info("realtime partitions at %.0f records/s: whole batches from now on", self.rate)
            self._busy = True
        elif self._busy and self.rate < AUTO_RECORD_BELOW:
            log.info("realtime partitions at %.0f records/s: record by record from now on", self.rate)
            self._busy = False

    def first(self, state: PartitionState, start: int, end: int) -> Pipeline:
        """The pipeline a partition starts in, copying from ``start`` with the source ending at ``end``.

        By the lag known at the start, so neither a backlog nor a trickle begins with a move: a
        batch route's backlog starts in batch mode, its caught-up partition in record mode.
        """
        lagging = self.threshold is not None and end - start > self.threshold
        if self.batch is not None:
            if self.threshold is None:
                return self.batch
            if lagging:
                state.mode_reason = lagging_reason(self.threshold)
                return self.batch
            if self.realtime_batch is not None and self._busy:
                state.mode_reason = caught_up_batch_reason()
                return self.realtime_batch
            state.mode, state.mode_reason = "record", caught_up_reason(self.threshold)
            return self.realtime
        state.mode_reason = self._copy_reason
        return self.catchup if lagging and self.catchup is not None else self.realtime

    def arrival(self, pipeline: Pipeline, start: int, end: int) -> int | None:
        """``Entry.arriving_end`` for a partition that starts in ``pipeline`` at ``start``, the
        source ending at ``end``: records behind the end copied by the realtime pipeline are old."""
        return end if self.realtime_role(pipeline) and end > start else None

    def advance(self, entry: Entry, now: float) -> None:
        """Finish a move once the old pipeline let go of the partition."""
        if entry.released is None or not entry.released.is_set():
            return
        state = entry.state
        if state.failed or state.tracker is None or entry.target is None:
            entry.phase = "running"
            return
        target = entry.target
        source = entry.pipeline
        if self.realtime_role(target) and source in (self.batch, self.catchup):
            entry.arriving_end = state.source_end
        if self.realtime_role(source) and not self.realtime_role(target):
            entry.left_realtime_at = now
        from_batch_mode = self.batch_mode(source)
        if from_batch_mode and state.mode == "record":
            # Handed to record mode by a batch pipeline (possibly while this move was on its
            # way for a lag that changed): its batches cannot pass unchanged, for good.
            entry.batch_fallback = True
            if target is self.batch:
                target = self.catchup if self.catchup is not None else self.realtime
            elif target is self.realtime_batch:
                target = self.realtime
        if target is self.batch or target is self.realtime_batch:
            # (A batch pipeline's add sets the mode.) Judged afresh for small batches there.
            lagging = target is self.batch and self.threshold is not None
            state.mode_reason = lagging_reason(self.threshold or 0) if lagging else caught_up_batch_reason()
            state.batches_fetched = state.batch_records_fetched = state.batch_bytes_fetched = 0
            state.batches_merged_fetched = 0
        elif self.batch is not None and self.threshold is not None and not entry.batch_fallback:
            # A batch route's partition copied record by record: found sparse just now, or
            # caught up (on a worker without a realtime batch pipeline, or during a sparse hold).
            sparse_now = from_batch_mode and now < entry.sparse_until
            reason = sparse_reason() if sparse_now else caught_up_reason(self.threshold)
            state.mode, state.mode_reason = "record", reason
        # Nothing of the partition is in flight: the checkpoint is the exact resume point.
        checkpoint = state.checkpoint
        target.add(state, state.tracker.position if checkpoint is None else checkpoint, move=True)
        entry.pipeline, entry.target, entry.released = target, None, None
        entry.phase = "running"
        entry.since = now

    def classify(self, entries: list[Entry], now: float) -> None:
        """Move partitions between the realtime and catch-up pipelines by fetch lag, and tell the
        batch pipeline whether realtime partitions share the worker (every CLASSIFY_INTERVAL_S)."""
        if now < self._next_classify:
            return
        self._next_classify = now + CLASSIFY_INTERVAL_S
        self.share(entries, now)
        self._measure(entries, now)
        if self.threshold is None:
            return
        for entry in entries:
            state = entry.state
            lag = state.lag
            if entry.phase != "running" or entry.revoke_deadline is not None or state.failed or lag is None:
                continue
            if now - entry.since < MIN_DWELL_S:
                continue
            batch_mode = self.batch_mode(entry.pipeline)
            if batch_mode and state.mode == "record":
                continue  # handed to record mode: to_record_mode moves it
            if batch_mode and not entry.batch_fallback and not self._keep_batches and sparse(state):
                entry.sparse_until = now + SPARSE_HOLD_S
                record = self.catchup if self.catchup is not None and lag > self.threshold // 4 else self.realtime
                log.info(
                    "moving %s to the %s pipeline: %.1f records per source batch (lag %d)",
                    state.task,
                    record.name,
                    state.batch_records_fetched / max(1, state.batches_fetched),
                    lag,
                )
                self._move(entry, record)
                continue
            target = self.target(entry, lag, now)
            if target is None:
                continue
            log.info("moving %s to the %s pipeline (lag %d)", state.task, target.name, lag)
            self._move(entry, target)

    def share(self, entries: list[Entry], now: float) -> None:
        """The batch pipeline paces its fetches while the realtime pipeline copies partitions
        (strait.worker.batch.budget.Sharing): a backlog drained flat out takes the brokers' CPU
        and the network the realtime records need. ``arriving`` flags the windows in which the realtime
        pipeline still copied a partition's old records (up to and including the one in which
        they were all acknowledged)."""
        arriving: set[str] = set()  # their destination topics
        for entry in entries:
            end = entry.arriving_end
            if end is None:
                continue
            tracker = entry.state.tracker
            if not self.realtime_role(entry.pipeline) or entry.state.failed or tracker is None:
                entry.arriving_end = None
                continue
            arriving.add(entry.state.task.destination_topic)
            if tracker.position >= end or now - entry.since >= ARRIVING_S:
                entry.arriving_end = None  # (this window still flagged: it may hold the last)
        running = [e.state for e in entries if self.realtime_role(e.pipeline) and not e.state.failed]
        share = getattr(self.batch, "share", None)
        if share is None:
            return
        share(
            bool(running) and any(e.pipeline is self.batch for e in entries),
            settled=all(map(settled, running)),
            arriving=frozenset(arriving),
            leaving=any(self._leaving(e, now) for e in entries),
        )

    def _leaving(self, entry: Entry, now: float) -> bool:
        """A realtime partition behind by a backlog (beyond the catch-up threshold), on its way
        out to a lagging pipeline, or gone there within the window: the realtime pipeline copied
        some of that backlog, and its realtime records queued behind it."""
        left = entry.left_realtime_at
        if left is not None and now - left <= CLASSIFY_INTERVAL_S:
            return True
        if not self.realtime_role(entry.pipeline) or entry.state.failed:
            return False
        if entry.target is not None:
            return not self.realtime_role(entry.target)
        lag = entry.state.lag
        return self.threshold is not None and lag is not None and lag > self.threshold

    def target(self, entry: Entry, lag: int, now: float = 0.0) -> Pipeline | None:
        """Where a running partition with fetch lag ``lag`` belongs now, if elsewhere."""
        threshold = self.threshold
        if threshold is None:
            return None
        batch = self.batch
        # A lagging partition's pipeline: batch mode unless its batches cannot pass unchanged
        # (for good) or were found too small (for SPARSE_HOLD_S); else the record catch-up one.
        batch_ok = batch is not None and not entry.batch_fallback and now >= entry.sparse_until
        lagging_home = batch if batch_ok else self.catchup
        realtime_home = self._realtime_home(entry, now)
        if self.realtime_role(entry.pipeline):
            if lag > threshold and lagging_home is not None:
                return lagging_home
            if entry.pipeline is self.realtime_batch and entry.batch_fallback:
                return None  # handed to record mode: to_record_mode moves it
            # (Back to the batch one once a sparse partition's hold is over.)
            return realtime_home if entry.pipeline is not realtime_home and lag <= threshold // 4 else None
        if entry.pipeline is batch and entry.batch_fallback:
            return None  # handed to record mode: to_record_mode moves it
        if lag <= threshold // 4:
            return realtime_home
        if entry.pipeline is self.catchup and batch_ok and lag > threshold:
            return batch  # found sparse earlier: batch mode is tried again after the hold
        return None

    def to_record_mode(self, entries: list[Entry]) -> None:
        """Move partitions the batch pipeline handed to record mode to a record pipeline."""
        batch = self.batch
        if batch is None:
            return
        for entry in entries:
            state = entry.state
            if not self.batch_mode(entry.pipeline) or entry.phase != "running" or entry.revoke_deadline:
                continue
            if state.mode != "record" or state.failed:
                continue
            log.info("moving %s to record mode: %s", state.task, state.mode_reason)
            entry.batch_fallback = True
            self._move(entry, self.realtime)

    @staticmethod
    def _move(entry: Entry, target: Pipeline) -> None:
        pipeline = entry.pipeline
        assert pipeline is not None
        entry.target = target
        entry.released = pipeline.release(entry.state)
        entry.phase = "moving"
