"""Idempotent producer sequences for whole batches (strait.worker.batch.sequences)."""

from __future__ import annotations

import pytest

from strait.worker.batch.sequences import (
    MAX_SEQUENCE,
    InFlight,
    ProducerIdentity,
    SequenceError,
    SequenceModel,
    increment_sequence,
    last_sequence,
)

P0, P1 = ("t", 0), ("t", 1)


def test_increment_matches_kafka() -> None:
    # DefaultRecordBatch.incrementSequence
    assert increment_sequence(0, 5) == 5
    assert increment_sequence(MAX_SEQUENCE - 5, 5) == MAX_SEQUENCE
    assert increment_sequence(MAX_SEQUENCE - 5, 6) == 0
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 1, 10) == 8
    assert last_sequence(0, 1) == 0 and last_sequence(10, 5) == 14
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 0


def test_sequences_continue_by_record_count_per_partition() -> None:
    model = SequenceModel(ProducerIdentity(5, 0))
    assert model.assign(P0, 10) == 0
    assert model.assign(P0, 3) == 10
    assert model.assign(P1, 7) == 0
    assert model.next_sequence(P0) == 13 and model.next_sequence(P1) == 7


def test_wraps_after_max() -> None:
    model = SequenceModel(ProducerIdentity(5, 0))
    model.assign(P0, MAX_SEQUENCE)  # 0 .. MAX-1
    model.acknowledged(P0, 0)
    assert model.assign(P0, 3) == MAX_SEQUENCE  # MAX, 0, 1
    assert model.next_sequence(P0) == 2


def test_at_most_five_in_flight_and_acks_in_order() -> None:
    model = SequenceModel(ProducerIdentity(5, 0))
    bases = [model.assign(P0, 2, ref=i) for i in range(5)]
    assert bases == [0, 2, 4, 6, 8]
    assert not model.can_send(P0) and model.can_send(P1)
    with pytest.raises(SequenceError):
        model.assign(P0, 1)
    with pytest.raises(SequenceError):
        model.acknowledged(P0, 2)  # not the oldest
    assert model.acknowledged(P0, 0) == InFlight(0, 2, 0)
    assert model.can_send(P0) and model.assign(P0, 1) == 10


def test_retry_keeps_sequences() -> None:
    model = SequenceModel(ProducerIdentity(5, 0))
    for _ in range(3):
        model.assign(P0, 4)
    model.acknowledged(P0, 0)
    assert [b.base_sequence for b in model.to_resend(P0)] == [4, 8]
    assert model.next_sequence(P0) == 12


def test_new_epoch_restarts_at_zero_and_renumbers_in_flight() -> None:
    model = SequenceModel(ProducerIdentity(5, 0))
    model.assign(P0, 4, ref="a")
    model.assign(P0, 6, ref="b")
    model.assign(P1, 3)
    model.acknowledged(P1, 0)
    model.acknowledged(P0, 0)
    resend = model.new_epoch(ProducerIdentity(5, 1))
    assert resend == {P0: [InFlight(0, 6, "b")]}
    assert model.identity == ProducerIdentity(5, 1)
    assert model.next_sequence(P0) == 6 and model.next_sequence(P1) == 0
    with pytest.raises(SequenceError):
        model.new_epoch(ProducerIdentity(5, 1))


def test_refuses_empty_batches_and_bad_window() -> None:
    model = SequenceModel(ProducerIdentity(5, 0))
    with pytest.raises(SequenceError):
        model.assign(P0, 0)
    with pytest.raises(ValueError):
        SequenceModel(ProducerIdentity(5, 0), max_in_flight=6)
