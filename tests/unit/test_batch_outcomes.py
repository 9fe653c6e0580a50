"""What a batch producer does with each produce error (strait.worker.batch.outcomes)."""

from __future__ import annotations

import kafka.errors as errors
import pytest

from strait.worker.batch.outcomes import Outcome, error_name, produce_outcome


def test_names() -> None:
    assert error_name(0) == ""
    assert error_name(87) == "INVALID_RECORD" and error_name(59) == "UNKNOWN_PRODUCER_ID"


@pytest.mark.parametrize(
    ("code", "outcome", "refresh"),
    [
        (0, Outcome.OK, False),
        (6, Outcome.RETRY, True),  # NOT_LEADER_OR_FOLLOWER
        (7, Outcome.RETRY, False),  # REQUEST_TIMED_OUT
        (19, Outcome.RETRY, False),  # NOT_ENOUGH_REPLICAS
        (20, Outcome.RETRY, False),
        (45, Outcome.NEW_EPOCH, False),  # OUT_OF_ORDER_SEQUENCE_NUMBER
        (59, Outcome.NEW_EPOCH, False),  # UNKNOWN_PRODUCER_ID
        (10, Outcome.RECORD_MODE, False),  # MESSAGE_TOO_LARGE
        (87, Outcome.RECORD_MODE, False),  # INVALID_RECORD (e.g. offset gaps inside a batch)
        (32, Outcome.RECORD_MODE, False),  # INVALID_TIMESTAMP
        (29, Outcome.FATAL, False),  # TOPIC_AUTHORIZATION_FAILED
        (90, Outcome.FENCED, False),  # PRODUCER_FENCED
    ],
)
def test_outcomes(code: int, outcome: Outcome, refresh: bool) -> None:
    result = produce_outcome(code)
    assert result.outcome is outcome and result.refresh_leader is refresh
    assert result.error == ("" if code == 0 else errors.for_code(code).message)


def test_duplicate_sequence_is_appended() -> None:
    result = produce_outcome(46)
    assert result.outcome is Outcome.OK and result.duplicate


def test_invalid_epoch_depends_on_transactions() -> None:
    assert produce_outcome(47).outcome is Outcome.NEW_EPOCH
    assert produce_outcome(47, transactional=True).outcome is Outcome.FENCED


def test_unlisted_codes_follow_kafka_python_retriable_flag() -> None:
    assert produce_outcome(15).outcome is Outcome.RETRY  # COORDINATOR_NOT_AVAILABLE: retriable
    assert produce_outcome(-1).outcome is Outcome.FATAL  # UNKNOWN_SERVER_ERROR
