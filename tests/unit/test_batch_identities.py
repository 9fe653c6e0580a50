"""Producer ids of the batch pipeline's partitions: stale answers dropped, failures asked again later."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kafka.future import Future

from strait.worker.batch.identities import Identities


def part(generation: int = 0, active: bool = True) -> Any:
    return SimpleNamespace(
        generation=generation, active=active, identity=None, next_sequence=9, state=SimpleNamespace(task="t/0")
    )


class Broker:
    def __init__(self) -> None:
        self.futures: list[Future] = []

    def __call__(self) -> Future:
        future = Future()
        self.futures.append(future)
        return future


def answer(producer_id: int, epoch: int = 0, error_code: int = 0) -> Any:
    return SimpleNamespace(producer_id=producer_id, producer_epoch=epoch, error_code=error_code)


def test_an_answer_gives_the_partition_its_id_from_sequence_0() -> None:
    broker = Broker()
    ids = Identities(broker, retry_s=0.2)
    p = part()
    ids.ask(p)
    ids.take(0.0)
    assert p.identity is None
    broker.futures[0].success(answer(42, 3))
    ids.take(0.0)
    assert (p.identity.producer_id, p.identity.epoch, p.next_sequence) == (42, 3, 0)


def test_an_answer_for_an_older_position_is_dropped() -> None:
    broker = Broker()
    ids = Identities(broker, retry_s=0.2)
    p = part()
    ids.ask(p)
    p.generation = 1  # rewound meanwhile: it asks again itself
    broker.futures[0].success(answer(42))
    ids.take(0.0)
    assert p.identity is None


def test_a_failure_is_asked_again_after_the_backoff_not_at_once() -> None:
    broker = Broker()
    ids = Identities(broker, retry_s=0.2)
    p = part()
    ids.ask(p)
    broker.futures[0].failure(ConnectionError("broker away"))
    ids.take(10.0)
    ids.take(10.1)
    assert len(broker.futures) == 1
    ids.take(10.25)
    assert len(broker.futures) == 2
    broker.futures[1].success(answer(7, error_code=0))
    ids.take(10.3)
    assert p.identity.producer_id == 7


def test_an_error_code_counts_as_a_failure_and_a_stopped_partition_asks_no_more() -> None:
    broker = Broker()
    ids = Identities(broker, retry_s=0.2)
    p = part()
    ids.ask(p)
    broker.futures[0].success(answer(-1, error_code=14))  # COORDINATOR_LOAD_IN_PROGRESS
    ids.take(0.0)
    p.active = False
    ids.take(1.0)
    assert len(broker.futures) == 1 and p.identity is None
