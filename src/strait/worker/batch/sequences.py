"""Idempotent producer sequences for whole batches: a small pure model.

A broker accepts a batch of producer (id, epoch) on a partition only when its base sequence
is the one after the last batch it appended for that producer there (it answers
``DUPLICATE_SEQUENCE_NUMBER`` for a batch it already has and ``OUT_OF_ORDER_SEQUENCE_NUMBER``
for a gap). So, per destination partition:

- the first batch of a producer id and epoch starts at 0;
- each batch's base sequence is the previous one plus its record count, wrapping after
  2^31 - 1 to 0 (``DefaultRecordBatch.incrementSequence``);
- a retried batch keeps its sequence, and so does every batch sent after it: they are sent
  again in the same order;
- at most 5 batches are in flight per partition (the broker keeps the last 5 batch metadata
  per producer for duplicate detection);
- a new producer epoch (or id) restarts every partition at 0; what was in flight under the
  old one is sent again, renumbered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

MAX_SEQUENCE = 2**31 - 1
MAX_IN_FLIGHT = 5


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` in the broker's sequence space (wraps after 2^31 - 1 to 0)."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


def last_sequence(base_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record."""
    return increment_sequence(base_sequence, record_count - 1)


class SequenceError(RuntimeError):
    """A use of the model that would send batches a broker must refuse."""


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    producer_id: int
    epoch: int


class InFlight(NamedTuple):
    """One batch sent and not yet acknowledged; ``ref`` is the caller's handle (e.g. the
    source batch's base offset)."""

    base_sequence: int
    record_count: int
    ref: Hashable = None


class _Partition:
    __slots__ = ("in_flight", "next_sequence")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.in_flight: deque[InFlight] = deque()


class SequenceModel:
    """Sequences of one idempotent producer over any number of destination partitions."""

    def __init__(self, identity: ProducerIdentity, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1..{MAX_IN_FLIGHT} for idempotence, got {max_in_flight}")
        self._identity = identity
        self._max_in_flight = max_in_flight
        self._partitions: dict[Hashable, _Partition] = {}

    @property
    def identity(self) -> ProducerIdentity:
        return self._identity

    def _get(self, partition: Hashable) -> _Partition:
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = _Partition()
        return state

    def next_sequence(self, partition: Hashable) -> int:
        """The base sequence the next new batch to ``partition`` gets."""
        return self._get(partition).next_sequence

    def in_flight(self, partition: Hashable) -> list[InFlight]:
        return list(self._get(partition).in_flight)

    def can_send(self, partition: Hashable) -> bool:
        return len(self._get(partition).in_flight) < self._max_in_flight

    def assign(self, partition: Hashable, record_count: int, ref: Hashable = None) -> int:
        """Number a new batch of ``record_count`` records and count it in flight; its base sequence."""
        if record_count < 1:
            raise SequenceError("an empty batch takes no sequence and is never produced")
        state = self._get(partition)
        if len(state.in_flight) >= self._max_in_flight:
            raise SequenceError(f"{partition}: already {len(state.in_flight)} batches in flight")
        base = state.next_sequence
        state.in_flight.append(InFlight(base, record_count, ref))
        state.next_sequence = increment_sequence(base, record_count)
        return base

    def acknowledged(self, partition: Hashable, base_sequence: int) -> InFlight:
        """The broker acknowledged the batch that starts at ``base_sequence``: it must be the
        oldest in flight (acknowledgements of one partition come in order)."""
        state = self._get(partition)
        if not state.in_flight or state.in_flight[0].base_sequence != base_sequence:
            oldest = state.in_flight[0].base_sequence if state.in_flight else None
            raise SequenceError(f"{partition}: ack for sequence {base_sequence}, oldest in flight is {oldest}")
        return state.in_flight.popleft()

    def to_resend(self, partition: Hashable) -> list[InFlight]:
        """After a retriable failure: every batch in flight, oldest first, with the sequences it
        had (the broker deduplicates those it already appended)."""
        return list(self._get(partition).in_flight)

    def new_epoch(self, identity: ProducerIdentity) -> dict[Hashable, list[InFlight]]:
        """A new producer id or epoch (InitProducerId again, e.g. after UNKNOWN_PRODUCER_ID or
        OUT_OF_ORDER_SEQUENCE_NUMBER): every partition restarts at sequence 0. Returns what was
        in flight per partition, renumbered from 0 in the same order, to send again."""
        if (identity.producer_id, identity.epoch) == (self._identity.producer_id, self._identity.epoch):
            raise SequenceError(f"producer {identity} already in use")
        old = {p: list(s.in_flight) for p, s in self._partitions.items() if s.in_flight}
        self._identity = identity
        self._partitions = {}
        renumbered: dict[Hashable, list[InFlight]] = {}
        for partition, batches in old.items():
            state = self._get(partition)
            fresh = []
            for batch in batches:
                base = state.next_sequence
                entry = InFlight(base, batch.record_count, batch.ref)
                state.in_flight.append(entry)
                state.next_sequence = increment_sequence(base, batch.record_count)
                fresh.append(entry)
            renumbered[partition] = fresh
        return renumbered
