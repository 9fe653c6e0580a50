"""Which fetched batches are produced: pure, per fetch response of one partition.

The rules are Kafka's consumer's (``CompletedFetch.nextFetchedBatch`` in the Java client):

- a batch wholly below the fetch offset is skipped (a broker answers from the start of the
  batch holding the fetch offset, or from older data after a leader change);
- a batch that straddles the fetch offset holds records the destination already has: it
  cannot pass whole (``PARTIAL``: copy its records from the fetch offset on, in record mode);
- a truncated last batch never reaches here (:func:`split_batches` drops it);
- control batches (transaction markers) are never produced;
- under ``read_committed``, a transactional batch of a producer whose aborted transaction
  started at or before the batch's last offset is dropped, until that producer's ABORT marker
  is seen (the aborted list comes with the fetch response: producer id and first offset);
- an empty batch (compaction keeps one for a producer's state) carries nothing to produce.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from strait.worker.batch.records import ControlType, RecordBatch, control_type


class Action(enum.Enum):
    PRODUCE = "produce"
    BELOW_FETCH_OFFSET = "below_fetch_offset"
    PARTIAL = "partial"
    CONTROL = "control"
    ABORTED = "aborted"
    EMPTY = "empty"

    @property
    def produces(self) -> bool:
        return self is Action.PRODUCE


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """One entry of a fetch response's ``aborted_transactions``."""

    producer_id: int
    first_offset: int


class Selected(NamedTuple):
    """One batch and what to do with it (a named tuple: one is made per fetched batch)."""

    batch: RecordBatch
    action: Action


@dataclass(frozen=True, slots=True)
class Selection:
    """The decision for every complete batch of a fetch, in order, and where to fetch next."""

    decisions: list[Selected]
    next_fetch_offset: int

    def to_produce(self) -> list[RecordBatch]:
        return [d.batch for d in self.decisions if d.action is Action.PRODUCE]

    def count(self, action: Action) -> int:
        return sum(1 for d in self.decisions if d.action is action)


def select_batches(
    batches: Sequence[RecordBatch],
    fetch_offset: int,
    *,
    read_committed: bool,
    aborted: Iterable[AbortedTransaction] | None = None,
) -> Selection:
    """Decide each batch of one partition's fetch response (see the module docstring).

    ``next_fetch_offset`` moves past every decided batch, skipped ones included: a skipped
    control or aborted batch is consumed like a consumer consumes it.
    """
    pending: list[tuple[int, int]] = []
    if read_committed and aborted:
        pending = [(a.first_offset, a.producer_id) for a in aborted]
        heapq.heapify(pending)
    aborted_producers: set[int] = set()
    decisions: list[Selected] = []
    next_offset = fetch_offset
    for batch in batches:
        last = batch.last_offset
        if last < fetch_offset:
            decisions.append(Selected(batch, Action.BELOW_FETCH_OFFSET))
            continue
        next_offset = max(next_offset, last + 1)
        if read_committed and batch.has_producer_id:
            while pending and pending[0][0] <= last:
                aborted_producers.add(heapq.heappop(pending)[1])
            if batch.is_control:
                if control_type(batch) is ControlType.ABORT:
                    aborted_producers.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in aborted_producers:
                decisions.append(Selected(batch, Action.ABORTED))
                continue
        if batch.is_control:
            decisions.append(Selected(batch, Action.CONTROL))
        elif batch.record_count == 0:
            decisions.append(Selected(batch, Action.EMPTY))
        elif batch.base_offset < fetch_offset:
            decisions.append(Selected(batch, Action.PARTIAL))
        else:
            decisions.append(Selected(batch, Action.PRODUCE))
    return Selection(decisions, next_offset)
