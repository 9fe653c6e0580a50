"""Which source offset is safe to commit, given the records the destination acknowledged.

Pure bookkeeping, no I/O. A partition's checkpoint is the offset a new owner must resume
from so that nothing is lost: the end of the longest prefix of *sent* records that the
destination has acknowledged. Source offsets are not dense (compaction, transaction markers,
aborted records read with ``read_committed``), so the tracker remembers the offsets actually
sent instead of assuming ``offset + 1`` is the next record.

A gap is accepted only when the caller vouches that the source itself has no record in it
(the consumer's own stream jumped); any other gap is a record the copy loop dropped, and
accepting it would let the checkpoint pass a record that never reached the destination.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Literal


class OutOfOrderSend(ValueError):
    """A record was sent whose offset is not above every offset sent before it."""


class UnexpectedGap(ValueError):
    """A record was sent past offsets that were neither sent nor vouched for as empty."""


# Why a checkpoint commit was refused (see `checkpoint_violation`).
BACKWARDS = "backwards"
UNACKNOWLEDGED = "unacknowledged"


def checkpoint_violation(committed: int | None, offset: int, acknowledged: int) -> str | None:
    """Why committing ``offset`` would break a checkpoint's promise, or None if it is safe.

    ``committed`` is the last checkpoint this owner committed (or resumed from);
    ``acknowledged`` is the end of the prefix the destination acknowledged. A checkpoint never
    moves backwards (a later owner would copy records again, and a zombie's late commit would
    undo its successor's progress) and never passes an unacknowledged record (that is loss).
    """
    if offset > acknowledged:
        return UNACKNOWLEDGED
    if committed is not None and offset < committed:
        return BACKWARDS
    return None


class AckTracker:
    """Tracks in-flight records of one partition and derives its checkpoint.

    ``position`` starts at the offset copying starts from. Every sent record is registered with
    :meth:`sent` (or a stretch of consecutive ones with :meth:`sent_range`) in offset order;
    :meth:`acked`, :meth:`acked_range` and :meth:`failed` may arrive in any order.
    ``position`` only moves forward, and only past records that were acknowledged with every
    record sent before them also acknowledged. A failed record pins ``position`` at its offset
    until :meth:`rewind` starts over from there.

    Built for acknowledgements that come in stretches (the copy loop settles delivery reports
    once per poll): registering a stretch extends one list, and acknowledging a stretch that
    starts at the first pending record (the usual, in-order case) moves the checkpoint without
    visiting its offsets one by one. Only reports that arrive out of order cost a set entry.
    """

    __slots__ = ("_acked", "_failed", "_head", "_last_sent", "_position", "_sent")

    def __init__(self, position: int) -> None:
        if position < 0:
            raise ValueError(f"position must be a real offset, got {position}")
        self._position = position
        self._last_sent = position - 1
        # Offsets sent and not yet passed by the checkpoint (pending) are _sent[_head:],
        # increasing; the passed ones before _head are cut off now and then (one cut per many
        # records). A pending offset is in flight unless it is in _acked or _failed.
        self._sent: list[int] = []
        self._head = 0
        # Acknowledged offsets still waiting for an earlier offset to be acknowledged.
        self._acked: set[int] = set()
        self._failed: set[int] = set()

    @property
    def position(self) -> int:
        """The checkpoint: every record below it was acknowledged by the destination."""
        return self._position

    @property
    def next_offset(self) -> int:
        """The offset after the last record sent: where fetching continues."""
        return self._last_sent + 1

    @property
    def in_flight(self) -> int:
        """Records sent and neither acknowledged nor failed yet."""
        return len(self._sent) - self._head - len(self._acked) - len(self._failed)

    def in_flight_offsets(self) -> list[int]:
        """The offsets sent and neither acknowledged nor failed yet, in order (one pass over the
        pending offsets: for tests and diagnostics, not for the copy loop)."""
        resolved = self._acked | self._failed
        return [offset for offset in self._sent[self._head :] if offset not in resolved]

    @property
    def pending(self) -> int:
        """Records sent and not yet behind the checkpoint (in flight, acked early, or failed)."""
        return len(self._sent) - self._head

    @property
    def blocked(self) -> bool:
        """True when a failed record keeps the checkpoint from moving."""
        return bool(self._failed)

    def sent(self, offset: int, *, source_gap: bool = False) -> None:
        """Register a record handed to the destination; offsets must increase.

        A record above :attr:`next_offset` leaves a gap; it is accepted only with
        ``source_gap=True``, the caller's word that the source holds no record in between
        (compaction, transaction markers, aborted records). Otherwise ``UnexpectedGap``.
        """
        self._check_next(offset, source_gap)
        self._last_sent = offset
        self._sent.append(offset)

    def sent_range(self, first: int, count: int, *, source_gap: bool = False) -> None:
        """Register ``count`` consecutive records from ``first`` on: ``count`` calls of :meth:`sent`
        (``source_gap`` vouches for a gap before ``first`` only)."""
        if count < 1:
            return
        self._check_next(first, source_gap)
        self._last_sent = first + count - 1
        self._sent.extend(range(first, first + count))

    def _check_next(self, offset: int, source_gap: bool) -> None:
        if offset <= self._last_sent:
            raise OutOfOrderSend(f"offset {offset} sent after {self._last_sent}")
        if offset > self._last_sent + 1 and not source_gap:
            raise UnexpectedGap(f"offset {offset} sent while {self._last_sent + 1} was expected")

    def acked(self, offset: int) -> bool:
        """Record the destination's acknowledgement; True if the checkpoint moved."""
        self._resolve(offset, self._acked)
        return self._advance()

    def acked_range(self, first: int, count: int) -> bool:
        """Acknowledge the offsets ``first`` to ``first + count - 1`` (those that were sent and are
        still in flight; others are ignored, as in :meth:`acked`); True if the checkpoint moved."""
        if count < 1:
            return False
        sent, head = self._sent, self._head
        last = head + count - 1
        if (
            not self._acked
            and not self._failed
            and last < len(sent)
            and sent[head] == first
            and sent[last] == first + count - 1
        ):
            # The first `count` pending offsets, all in flight (sent offsets increase, so the
            # ends matching means the whole stretch matches): the checkpoint passes them.
            self._pass(head + count)
            return True
        for offset in range(first, first + count):
            self._resolve(offset, self._acked)
        return self._advance()

    def failed(self, offset: int) -> None:
        """Record that a sent record will never be acknowledged."""
        self._resolve(offset, self._failed)

    def skip_to(self, offset: int) -> bool:
        """Move the checkpoint over offsets that hold no record (transaction markers, aborted
        records), given that nothing is pending; True if it moved.

        The caller vouches that every record below ``offset`` was sent and acknowledged; with
        records pending or a failed record the call is ignored.
        """
        if self.pending or offset <= self._position:
            return False
        self._position = offset
        self._last_sent = max(self._last_sent, offset - 1)
        return True

    def rewind(self) -> int:
        """Forget every unconfirmed record and restart from the checkpoint, which is returned.

        Records acknowledged after a failed one are sent again (at-least-once), none is lost.
        """
        if self.in_flight:
            raise RuntimeError("cannot rewind while records are in flight")
        self._sent.clear()
        self._head = 0
        self._acked.clear()
        self._failed.clear()
        self._last_sent = self._position - 1
        return self._position

    def _resolve(self, offset: int, into: set[int]) -> None:
        # Offsets never sent (gaps), already passed or already resolved are ignored, so a
        # duplicate or stray report can neither move the checkpoint nor skew the in-flight count.
        sent = self._sent
        index = bisect_left(sent, offset, self._head)
        if index < len(sent) and sent[index] == offset and offset not in self._acked and offset not in self._failed:
            into.add(offset)

    def _advance(self) -> bool:
        acked = self._acked
        if not acked:
            return False
        sent, head = self._sent, self._head
        done = len(acked)
        # The acknowledged offsets are pending offsets: they are exactly the first `done`
        # pending ones when the largest of them is the done-th (the usual in-order case).
        if sent[head + done - 1] == max(acked):
            acked.clear()
        else:
            done = 0
            while sent[head + done] in acked:
                acked.discard(sent[head + done])
                done += 1
            if not done:
                return False
        self._pass(head + done)
        return True

    def _pass(self, head: int) -> None:
        """The checkpoint moves past the pending offsets before ``_sent[head]``."""
        sent = self._sent
        self._position = sent[head - 1] + 1
        if head >= 4096 and head * 2 >= len(sent):
            del sent[:head]
            head = 0
        self._head = head


def start_offset(start: Literal["earliest", "latest"], checkpoint: int | None, low: int, high: int) -> int:
    """Where copying a partition begins, given its checkpoint and the source's offset range.

    Without a checkpoint, ``start`` decides. A checkpoint below ``low`` points at records that
    source retention already deleted, one above ``high`` at records the source lost (unclean
    leader election): either way copying resumes where the source can serve.
    """
    if checkpoint is None:
        return low if start == "earliest" else high
    return min(max(checkpoint, low), high)
