"""One partition in the batch pipeline: what was fetched, what is in flight, and the accounting
of answers into the partition's checkpoint. No I/O: the pipeline sends and polls.

Checkpoints keep their meaning: every source batch, produced or skipped (control, aborted,
empty), is registered with the partition's :class:`~strait.worker.checkpoint.AckTracker` under
its *last* offset, so the checkpoint is the end of the contiguous prefix of acknowledged
batches, and never stands inside a batch. A skipped batch counts as acknowledged at once (it
never reaches the destination, like a transaction marker in record mode).

Answers of one partition are taken strictly in send order. A retriable answer (or none) puts
the batch aside; once nothing of the partition is in flight, the batches put aside are sent
again with the very same bytes and sequences, so the destination broker appends each once
(it answers DUPLICATE_SEQUENCE_NUMBER for one it already has). An answer that rules out
resending (a broken sequence, an error that is not retriable) fails the batch, which pins the
checkpoint; the partition then rewinds to it under a new producer id, whose sequences start
at 0 (at-least-once: batches acknowledged after the failed one are sent again).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from strait.worker.batch.compat import DestinationTopic, Mode, ModeDecision, Reason, decide_mode
from strait.worker.batch.merging import MERGED_MAX_BYTES, follows, merge, mergeable
from strait.worker.batch.outcomes import Outcome, produce_outcome
from strait.worker.batch.protocol import FetchedPartition, Produced
from strait.worker.batch.provenance import Judged
from strait.worker.batch.records import RecordBatch, rewrite, split_batches, tail_batch
from strait.worker.batch.select import Action, select_batches
from strait.worker.batch.sequences import MAX_IN_FLIGHT, ProducerIdentity, increment_sequence
from strait.worker.checkpoint import AckTracker
from strait.worker.pipeline import PartitionState

# Names the copies among a fetch's batches (strait.worker.batch.provenance.Provenance.judge).
Judge = Callable[[Sequence[RecordBatch]], Judged]

MAX_PARTITION_FETCH_BYTES = 64 * 1024 * 1024
# A partition is fetched again only while less than this many partition fetch sizes wait to be sent.
QUEUED_FETCHES = 2
# Up to this much of one partition per fetch answer: several producer batches per round trip
# (the pipeline bounds what all partitions hold together).
INITIAL_PARTITION_FETCH_BYTES = 4 * 1024 * 1024


class Queued(NamedTuple):
    """A fetched batch waiting to be produced (or, ``produce`` False, only accounted)."""

    batch: RecordBatch
    produce: bool
    fetched_at: float


@dataclass(slots=True)
class Sent:
    """One rewritten batch handed to the destination; ``future`` is its request's answer."""

    data: bytearray
    first_offset: int
    last_offset: int
    records: int
    base_sequence: int
    max_timestamp: int
    sent_at: float
    first_sent_at: float
    future: Any = None
    attempts: int = 0


class Verdict(enum.Enum):
    """What the pipeline must do after an answer was accounted."""

    NOTHING = "nothing"
    RESEND = "resend"  # put aside; resend once nothing is in flight
    REWIND = "rewind"  # failed for good: rewind under a new producer id
    RECORD_MODE = "record_mode"  # the destination refused the batch as it is
    FAIL = "fail"  # the destination partition is gone


class BatchPartition:
    """Fetch position, queue and in-flight batches of one partition (pipeline thread only)."""

    def __init__(
        self,
        state: PartitionState,
        tracker: AckTracker,
        *,
        destination: DestinationTopic,
        compacted: bool,
        merge_bytes: int = MERGED_MAX_BYTES,
    ) -> None:
        self.state = state
        self.tracker = tracker
        task = state.task
        self.source = (task.topic, task.partition)
        self.destination = (task.destination_topic, task.partition)
        self.topic_config = destination
        self.compacted = compacted
        # Small batches queued one after the other go out merged, up to this many bytes (0: never).
        self.merge_bytes = min(merge_bytes, destination.max_message_bytes or merge_bytes)
        self.fetch_offset = tracker.next_offset
        self.fetch_bytes = INITIAL_PARTITION_FETCH_BYTES
        self.queue: deque[Queued] = deque()
        self.queued_bytes = 0
        self.in_flight: deque[Sent] = deque()
        self.redo: deque[Sent] = deque()
        self.identity: ProducerIdentity | None = None
        self.next_sequence = 0
        # Whether the destination holds a batch of this producer id on this partition. Until it
        # does, a broker accepts any first sequence (it has no state for the producer), so a
        # batch appended while an earlier one is being retried would pass it: one batch at a
        # time until the first is acknowledged, then up to MAX_IN_FLIGHT.
        self.appended = False
        # Bumped whenever the fetch position changes: an older fetch answer is dropped.
        self.generation = 0
        self.fetch_pending = False
        # The last fetch answer reached the source's last stable offset: nothing more to copy
        # for now (an exactly-once pipeline may commit its transaction early then).
        self.at_end = False
        self.active = True  # fetching and sending; False once released or handed to record mode
        self.wait_until = 0.0  # backoff before the next fetch or resend
        self.rewind_due = False
        self.gaps = 0  # jumps in the source's stream of batches (compaction, deleted records)

    # -- fetching --------------------------------------------------------------------------

    def wants_fetch(self, now: float) -> bool:
        return (
            self.active
            and not self.fetch_pending
            and not self.rewind_due
            and now >= self.wait_until
            and not self.queue_full
        )

    @property
    def queue_full(self) -> bool:
        return self.queued_bytes >= QUEUED_FETCHES * self.fetch_bytes

    def take_fetch(self, fetched: FetchedPartition, now: float, judge: Judge | None = None) -> ModeDecision | None:
        """Queue the batches a fetch answer brings (in order); a record-mode decision stops here.

        ``judge`` (two-way routes, strait.worker.batch.provenance) names the batches that are
        copies written by the opposite route: they are accounted, never produced."""
        split = split_batches(fetched.records)
        copies: frozenset[int] = frozenset()
        if judge is not None:
            try:
                judged = judge(split.batches)
            except ValueError as exc:
                return ModeDecision(Mode.RECORD, Reason.ORIGIN_UNDECIDED, str(exc), self.fetch_offset)
            if judged.mixed is not None:
                at = judged.mixed.base_offset
                detail = f"batch at {at} holds copies from the destination and records written here"
                return ModeDecision(Mode.RECORD, Reason.ORIGIN_UNDECIDED, detail, at)
            copies = judged.copies
        decision = decide_mode(
            split, self.topic_config, source_compacted=self.compacted, fetch_offset=self.fetch_offset, skipped=copies
        )
        if decision.mode is Mode.RECORD:
            return decision
        selection = select_batches(split.batches, self.fetch_offset, read_committed=True, aborted=fetched.aborted)
        for chosen in selection.decisions:
            action = chosen.action
            if action is Action.BELOW_FETCH_OFFSET:
                continue
            batch = chosen.batch
            if copies and batch.base_offset in copies and action in (Action.PRODUCE, Action.PARTIAL):
                # Written by the opposite route: accounted like a transaction marker.
                self.queue.append(Queued(batch, False, now))
                self.queued_bytes += batch.size
                self.state.skipped_origin += batch.last_offset + 1 - max(batch.base_offset, self.fetch_offset)
                continue
            if action is Action.PARTIAL:
                # The copy starts inside this batch (a checkpoint record mode left there): its
                # tail is encoded again, once; the batches after it pass unchanged.
                try:
                    batch, action = tail_batch(batch, self.fetch_offset), Action.PRODUCE
                except ValueError as exc:
                    return ModeDecision(
                        Mode.RECORD,
                        Reason.MID_BATCH,
                        f"copy starts at {self.fetch_offset}, inside the batch at {batch.base_offset}: {exc}",
                        self.fetch_offset,
                    )
            self.queue.append(Queued(batch, action is Action.PRODUCE, now))
            self.queued_bytes += batch.size
            if action is Action.PRODUCE:
                state = self.state
                state.batches_fetched += 1
                state.batch_records_fetched += batch.record_count
                state.batch_bytes_fetched += batch.size
                if mergeable(batch):
                    state.batches_merged_fetched += 1
        if not selection.decisions and split.truncated:
            # One batch larger than the fetch size: ask for more next time.
            self.fetch_bytes = min(MAX_PARTITION_FETCH_BYTES, self.fetch_bytes * 2)
        self.fetch_offset = max(self.fetch_offset, selection.next_fetch_offset)
        self.at_end = self.fetch_offset >= fetched.last_stable_offset
        return None

    # -- sending ---------------------------------------------------------------------------

    def can_send(self, now: float) -> bool:
        return (
            self.active
            and self.identity is not None
            and not self.redo
            and not self.rewind_due
            and now >= self.wait_until
            and len(self.in_flight) < (MAX_IN_FLIGHT if self.appended else 1)
        )

    def next_batch(self, now: float) -> tuple[Sent | None, float | None]:
        """The next batch to produce, rewritten with our producer id and sequence, and when it
        was fetched; skipped batches ahead of it are accounted on the way."""
        identity = self.identity
        if identity is None:
            return None, None
        tracker = self.tracker
        while self.queue:
            batch, produce, fetched_at = self.queue.popleft()
            self.queued_bytes -= batch.size
            if batch.last_offset < tracker.next_offset or (produce and batch.base_offset < tracker.next_offset):
                continue  # already accounted (cannot happen with a consistent fetch position)
            if batch.base_offset > tracker.next_offset:
                self.gaps += 1
            # The batch covers base..last: vouched for as the source's own stream (a skipped
            # copy may start before the fetch position: it is accounted from there).
            if not produce:
                tracker.sent(batch.last_offset, source_gap=True)
                tracker.acked(batch.last_offset)
                continue
            batch = self.merged_with_next(batch)
            tracker.sent(batch.last_offset, source_gap=True)
            sequence = self.next_sequence
            self.next_sequence = increment_sequence(sequence, batch.record_count)
            data = rewrite(
                batch, producer_id=identity.producer_id, producer_epoch=identity.epoch, base_sequence=sequence
            )
            sent = Sent(
                data, batch.base_offset, batch.last_offset, batch.record_count, sequence, batch.max_timestamp, now, now
            )
            return sent, fetched_at
        return None, None

    def merged_with_next(self, batch: RecordBatch) -> RecordBatch:
        """``batch`` merged with the small batches queued right after it (strait.worker.batch.merging),
        up to ``merge_bytes``; ``batch`` itself when none can join it."""
        queue = self.queue
        limit = self.merge_bytes
        if not queue or not limit or not mergeable(batch):
            return batch
        parts = [batch]
        size = batch.size
        while queue:
            following, produce, _ = queue[0]
            if not produce or not mergeable(following) or not follows(parts[-1], following):
                break
            # Re-placed records may grow: at most 12 bytes each (two deltas and the length).
            grown = following.size + 12 * following.record_count
            if size + grown > limit:
                break
            queue.popleft()
            self.queued_bytes -= following.size
            parts.append(following)
            size += grown
        return merge(parts)

    def sending(self, sent: Sent, future: Any) -> None:
        sent.future = future
        sent.attempts += 1
        self.in_flight.append(sent)

    # -- answers ---------------------------------------------------------------------------

    def settle(self, answer: Produced | BaseException) -> tuple[Sent, Verdict, str]:
        """Account the oldest batch in flight, whose answer ``answer`` is (a broker's answer for
        this partition, or the exception the request failed with)."""
        sent = self.in_flight.popleft()
        if isinstance(answer, BaseException):
            return self._resend(sent), Verdict.RESEND, type(answer).__name__
        verdict = produce_outcome(answer.error_code)
        outcome = verdict.outcome
        if outcome is Outcome.OK:
            self._acknowledged(sent, answer.base_offset)
            return sent, Verdict.NOTHING, verdict.error
        if outcome is Outcome.RETRY or (outcome is Outcome.NEW_EPOCH and self.redo and answer.error_code == 45):
            # OUT_OF_ORDER_SEQUENCE behind a batch put aside: that batch was not appended,
            # so neither was this one; both go again in order.
            return self._resend(sent), Verdict.RESEND, verdict.error
        self.tracker.failed(sent.last_offset)
        if outcome is Outcome.RECORD_MODE:
            return sent, Verdict.RECORD_MODE, verdict.error
        if answer.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION: deleted behind our back
            return sent, Verdict.FAIL, verdict.error
        return sent, Verdict.REWIND, verdict.error

    def _resend(self, sent: Sent) -> Sent:
        # In send order: a batch sent again alone (see ``appended``) goes back before the rest.
        if self.redo and sent.first_offset < self.redo[0].first_offset:
            self.redo.appendleft(sent)
        else:
            self.redo.append(sent)
        return sent

    def _acknowledged(self, sent: Sent, base_offset: int) -> None:
        state = self.state
        self.appended = True
        self.tracker.acked(sent.last_offset)
        state.records += sent.records
        state.bytes += len(sent.data)
        state.last_progress = time.time()
        if state.waiting is not None:
            state.waiting = None
        state.runs.note_many(sent.first_offset, base_offset, sent.records)

    def give_up(self) -> None:
        """Fail every batch put aside (they pin the checkpoint) and stop resending them."""
        for sent in self.redo:
            self.tracker.failed(sent.last_offset)
        self.redo.clear()

    # -- position --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop fetching and sending (released, or handed to record mode); what is in flight
        still gets accounted."""
        self.active = False
        self.generation += 1
        self.queue.clear()
        self.queued_bytes = 0
        self.give_up()

    def rewind(self) -> int:
        """Start again from the checkpoint under a new producer id (nothing may be in flight)."""
        self.give_up()
        position = self.tracker.rewind()
        self.generation += 1
        self.queue.clear()
        self.queued_bytes = 0
        self.fetch_offset = position
        self.at_end = False
        self.identity = None
        self.appended = False
        self.next_sequence = 0
        self.rewind_due = False
        self.state.rewinds += 1
        return position
