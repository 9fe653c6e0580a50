"""The checkpoint never passes a record the destination has not acknowledged."""

from __future__ import annotations

import random
from typing import Literal

import pytest

from strait.worker.checkpoint import (
    BACKWARDS,
    UNACKNOWLEDGED,
    AckTracker,
    OutOfOrderSend,
    UnexpectedGap,
    checkpoint_violation,
    start_offset,
)


def _expected_position(start: int, sent: list[int], acked: set[int]) -> int:
    """Oracle: one past the last record of the acknowledged prefix of sent records."""
    position = start
    for offset in sent:
        if offset not in acked:
            break
        position = offset + 1
    return position


def test_in_order_acks_advance_to_one_past_the_last_record() -> None:
    tracker = AckTracker(10)
    for offset in (10, 11, 12):
        tracker.sent(offset)
    assert tracker.acked(10)
    assert tracker.acked(11)
    assert tracker.position == 12
    assert tracker.acked(12)
    assert tracker.position == 13
    assert tracker.in_flight == 0


def test_an_early_ack_waits_for_the_records_before_it() -> None:
    tracker = AckTracker(0)
    for offset in range(3):
        tracker.sent(offset)
    assert not tracker.acked(2)
    assert not tracker.acked(1)
    assert tracker.position == 0
    assert tracker.in_flight == 1
    assert tracker.acked(0)
    assert tracker.position == 3


def test_offset_gaps_are_not_filled_by_arithmetic() -> None:
    # 5 and 9 are records; 6-8 are a transaction marker and compacted-away offsets.
    tracker = AckTracker(5)
    tracker.sent(5)
    tracker.sent(9, source_gap=True)
    tracker.acked(5)
    assert tracker.position == 6  # resuming at 6 re-reads nothing that was acknowledged
    tracker.acked(9)
    assert tracker.position == 10
    assert tracker.next_offset == 10


def test_acks_for_offsets_never_sent_are_ignored() -> None:
    tracker = AckTracker(5)
    tracker.sent(5)
    tracker.sent(9, source_gap=True)
    assert not tracker.acked(7)
    assert not tracker.acked(100)
    assert tracker.in_flight == 2
    tracker.acked(5)
    tracker.acked(5)  # duplicate report
    assert tracker.position == 6
    assert tracker.in_flight == 1


def test_sends_must_move_forward() -> None:
    tracker = AckTracker(3)
    tracker.sent(4, source_gap=True)
    with pytest.raises(OutOfOrderSend):
        tracker.sent(4)
    with pytest.raises(OutOfOrderSend):
        tracker.sent(2)


def test_a_failed_record_pins_the_checkpoint_until_rewind() -> None:
    tracker = AckTracker(0)
    for offset in range(4):
        tracker.sent(offset)
    tracker.acked(0)
    tracker.failed(1)
    tracker.acked(2)
    tracker.acked(3)
    assert tracker.position == 1
    assert tracker.blocked
    assert tracker.in_flight == 0
    assert tracker.rewind() == 1
    assert tracker.next_offset == 1
    assert not tracker.blocked
    tracker.sent(1)
    tracker.acked(1)
    assert tracker.position == 2


def test_rewind_refuses_while_records_are_in_flight() -> None:
    tracker = AckTracker(0)
    tracker.sent(0)
    tracker.sent(1)
    tracker.failed(0)
    with pytest.raises(RuntimeError):
        tracker.rewind()


def test_negative_start_is_rejected() -> None:
    with pytest.raises(ValueError):
        AckTracker(-1)


@pytest.mark.parametrize("seed", range(120))
def test_random_out_of_order_acks_with_gaps(seed: int) -> None:
    rng = random.Random(seed)
    start = rng.randrange(0, 1000)
    sent: list[int] = []
    offset = start
    for _ in range(rng.randrange(1, 300)):
        offset += rng.choice((0, 0, 0, 1, 2, 5))  # gaps from compaction and markers
        sent.append(offset)
        offset += 1
    tracker = AckTracker(start)
    acked: set[int] = set()
    unsent = list(sent)
    in_flight: list[int] = []
    previous = start
    while unsent or in_flight:
        # Interleave sends and acks the way a producer with several requests in flight does.
        if unsent and (not in_flight or rng.random() < 0.5):
            sent_now = unsent.pop(0)
            tracker.sent(sent_now, source_gap=True)
            in_flight.append(sent_now)
        else:
            done = in_flight.pop(rng.randrange(len(in_flight)))
            tracker.acked(done)
            acked.add(done)
        assert tracker.position == _expected_position(start, sent, acked)
        assert tracker.position >= previous
        assert tracker.in_flight == len(in_flight)
        assert all(o in acked for o in sent if o < tracker.position)
        previous = tracker.position
    assert tracker.position == sent[-1] + 1
    assert tracker.pending == 0


def test_skip_to_passes_offsets_without_records_when_nothing_is_pending() -> None:
    tracker = AckTracker(0)
    tracker.sent(0)
    assert not tracker.skip_to(2)  # record 0 still in flight
    tracker.acked(0)
    assert tracker.position == 1
    assert tracker.skip_to(2)  # offset 1 was a commit marker
    assert tracker.position == 2
    assert tracker.next_offset == 2
    assert not tracker.skip_to(1)  # never backwards
    tracker.sent(2)
    tracker.failed(2)
    assert not tracker.skip_to(5)  # a failed record pins the checkpoint
    assert tracker.position == 2


@pytest.mark.parametrize(
    ("start", "checkpoint", "expected"),
    [
        ("earliest", None, 10),  # no checkpoint: the task decides
        ("latest", None, 90),
        ("latest", 42, 42),  # a checkpoint always wins over the task's start
        ("earliest", 3, 10),  # below the earliest offset: deleted by retention
        ("earliest", 95, 90),  # above the end: the source lost records
        ("earliest", 90, 90),
    ],
)
def test_start_offset(start: Literal["earliest", "latest"], checkpoint: int | None, expected: int) -> None:
    assert start_offset(start, checkpoint, low=10, high=90) == expected


def test_a_gap_nobody_vouched_for_is_refused_and_leaves_the_tracker_as_it_was() -> None:
    # The old tracker took any offset above the last one: a record the copy loop dropped
    # became a gap, and the checkpoint moved past it once the next record was acknowledged.
    tracker = AckTracker(10)
    tracker.sent(10)
    with pytest.raises(UnexpectedGap):
        tracker.sent(12)
    assert tracker.next_offset == 11 and tracker.in_flight == 1
    tracker.acked(10)
    assert tracker.position == 11  # never past the record that was not sent
    tracker.sent(11)
    tracker.sent(14, source_gap=True)  # the consumer itself jumped: markers or compaction
    assert tracker.next_offset == 15


@pytest.mark.parametrize(
    ("committed", "offset", "acknowledged", "expected"),
    [
        (None, 5, 5, None),
        (5, 5, 5, None),
        (5, 9, 9, None),
        (5, 4, 9, BACKWARDS),
        (5, 10, 9, UNACKNOWLEDGED),
        (None, 10, 9, UNACKNOWLEDGED),
    ],
)
def test_checkpoint_violations(committed: int | None, offset: int, acknowledged: int, expected: str | None) -> None:
    assert checkpoint_violation(committed, offset, acknowledged) == expected


def test_a_stretch_of_records_is_sent_and_acknowledged_in_one_call() -> None:
    tracker = AckTracker(100)
    tracker.sent_range(100, 50)
    assert tracker.next_offset == 150 and tracker.in_flight == 50 and tracker.pending == 50
    assert not tracker.acked_range(110, 40)  # early: 100-109 still in flight
    assert tracker.position == 100 and tracker.in_flight == 10
    assert tracker.acked_range(100, 10)
    assert tracker.position == 150 and tracker.pending == 0
    with pytest.raises(UnexpectedGap):
        tracker.sent_range(151, 5)  # nobody vouched for 150
    tracker.sent_range(153, 2, source_gap=True)  # markers at 150-152
    assert not tracker.acked_range(140, 13)  # offsets never sent or already done: ignored
    assert tracker.in_flight == 2 and tracker.position == 150
    assert tracker.acked_range(150, 5)  # covers 150-152 (never sent) and 153-154
    assert tracker.position == 155


def test_a_failure_inside_a_stretch_pins_the_checkpoint_at_it() -> None:
    tracker = AckTracker(0)
    tracker.sent_range(0, 10)
    tracker.failed(4)
    tracker.acked_range(5, 5)
    tracker.acked_range(0, 4)
    assert tracker.position == 4 and tracker.blocked and tracker.in_flight == 0
    assert tracker.rewind() == 4 and tracker.next_offset == 4


@pytest.mark.parametrize("seed", range(60))
def test_stretches_and_single_records_agree_with_the_oracle(seed: int) -> None:
    """Stretches sent and acknowledged in random pieces and orders, with source gaps between
    stretches and failures: the checkpoint is always the acknowledged prefix, and it survives
    the tracker cutting off its passed offsets (thousands of records)."""
    rng = random.Random(seed)
    start = rng.randrange(0, 1000)
    tracker = AckTracker(start)
    sent: list[int] = []
    acked: set[int] = set()
    in_flight: list[int] = []
    offset = start
    previous = start
    for _ in range(rng.randrange(20, 200)):
        if rng.random() < 0.5:
            gap = rng.choice((0, 0, 1, 3))
            count = rng.randrange(1, 120)
            tracker.sent_range(offset + gap, count, source_gap=gap > 0)
            stretch = list(range(offset + gap, offset + gap + count))
            sent += stretch
            in_flight += stretch
            offset += gap + count
        elif in_flight:
            # Acknowledge a random piece of consecutive in-flight offsets, or one record.
            first = rng.choice(in_flight)
            count = rng.randrange(1, 60)
            piece = [o for o in in_flight if first <= o < first + count]
            tracker.acked_range(first, count)
            acked.update(piece)
            in_flight = [o for o in in_flight if o not in piece]
        assert tracker.position == _expected_position(start, sent, acked)
        assert tracker.position >= previous and tracker.in_flight == len(in_flight)
        previous = tracker.position
    for o in list(in_flight):
        tracker.acked(o)
        acked.add(o)
    assert tracker.position == (sent[-1] + 1 if sent else start) and tracker.pending == 0
