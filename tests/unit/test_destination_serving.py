"""A new destination topic counts as ready once every partition's leader answers for it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from strait.worker.destination import _serving


class Admin:
    """Answers each ListOffsets with the next scripted error per partition (None: an offset)."""

    def __init__(self, answers: list[dict[int, int | None]]) -> None:
        self.answers = answers
        self.asked: list[list[int]] = []

    def list_offsets(self, partitions: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        answer = self.answers.pop(0)
        self.asked.append(sorted(tp.partition for tp in partitions))
        futures: dict[Any, Future[Any]] = {}
        for tp in partitions:
            future: Future[Any] = Future()
            code = answer.get(tp.partition)
            if code is None:
                future.set_result(object())
            else:
                future.set_exception(KafkaException(KafkaError(code)))
            futures[tp] = future
        return futures


def test_a_partition_its_leader_does_not_serve_yet_means_not_ready_then_ready() -> None:
    admin = Admin([{1: KafkaError.NOT_LEADER_FOR_PARTITION}, {}])
    assert not _serving(admin, "t", 2, 5)  # type: ignore[arg-type]
    assert _serving(admin, "t", 2, 5)  # type: ignore[arg-type]
    assert admin.asked == [[0, 1], [0, 1]]


def test_a_refusal_is_an_error_not_a_wait() -> None:
    admin = Admin([{0: KafkaError.TOPIC_AUTHORIZATION_FAILED}])
    with pytest.raises(KafkaException):
        _serving(admin, "t", 1, 5)  # type: ignore[arg-type]


def test_a_leader_epoch_the_broker_has_yet_to_learn_means_not_ready_then_ready() -> None:
    # Seen on the sandbox: a ListOffsets right after a creation answered UNKNOWN_LEADER_EPOCH.
    admin = Admin([{0: KafkaError.UNKNOWN_LEADER_EPOCH}, {1: KafkaError.FENCED_LEADER_EPOCH}, {}])
    assert not _serving(admin, "t", 2, 5)  # type: ignore[arg-type]
    assert not _serving(admin, "t", 2, 5)  # type: ignore[arg-type]
    assert _serving(admin, "t", 2, 5)  # type: ignore[arg-type]
