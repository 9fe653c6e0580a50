"""Which delivery failures stop a partition and which ones are sent again."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from strait.worker.checkpoint import AckTracker
from strait.worker.pipeline import PartitionState, delivery_error_is_permanent
from strait.worker.task import PartitionTask


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
    ],
)
def test_permanent_failures_stop_the_partition(code: int) -> None:
    assert delivery_error_is_permanent(KafkaError(code))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._MSG_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        # The cluster refused us: an operator grants the ACL or fixes the credentials, and the
        # partition goes on from its checkpoint (after ACCESS_RETRY_S).
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
    ],
)
def test_transient_failures_are_sent_again(code: int) -> None:
    assert not delivery_error_is_permanent(KafkaError(code))


def test_a_fatal_producer_error_is_permanent() -> None:
    assert delivery_error_is_permanent(KafkaError(KafkaError._MSG_TIMED_OUT, fatal=True))


def test_lag_is_measured_from_the_fetch_position() -> None:
    state = PartitionState(PartitionTask("r", "t", 0, "t"))
    assert state.lag is None
    state.tracker = AckTracker(100)
    state.source_end = 250
    assert state.lag == 150
    state.tracker.sent(100)
    state.tracker.sent(105, source_gap=True)
    assert state.lag == 144
    assert state.checkpoint == 100
