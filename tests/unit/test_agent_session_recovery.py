"""A worker whose coordination session was lost keeps trying to register again while the store
is back but not answering yet, instead of exiting: nothing would restart it. So does a worker
starting while its store does not answer yet, however long the outage lasts."""

from __future__ import annotations

from typing import Any

import pytest

from strait.config import parse_config
from strait.coordination.model import PartitionKey, SessionState
from strait.coordination.retry import RetryExhausted, RetryPolicy
from strait.coordination.store import StoreUnavailable, WorkerIdTaken
from strait.worker import agent as agent_module
from strait.worker.agent import WorkerAgent
from strait.worker.task import PartitionTask
from tests.unit.test_agent_cut_off import Copier


class FlakyStore:
    """Connected again, but refusing registrations the first ``refusals`` times."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.registered = 0

    def session_state(self) -> SessionState:
        return SessionState.CONNECTED

    def register_worker(self, record: Any) -> None:
        if self.refusals:
            self.refusals -= 1
            raise StoreUnavailable("the coordination session is lost")
        self.registered += 1

    def update_worker(self, record: Any) -> None: ...


def _config() -> Any:
    return parse_config(
        {
            "zookeeper": {"session_timeout_s": 4},
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": "main", "source": "src", "destination": "dst"}],
        },
        environ={},
    )


def test_a_lost_session_is_recovered_by_registering_again_once_the_store_answers(monkeypatch: Any) -> None:
    # One try per registration attempt, so each refusal exhausts one attempt's retries.
    monkeypatch.setattr(
        agent_module,
        "RetryPolicy",
        lambda **kw: RetryPolicy(**{**kw, "max_tries": 1, "deadline_s": None}),
    )
    config = _config()
    store = FlakyStore(refusals=3)
    copier = Copier()
    agent = WorkerAgent(config=config, worker_id="w1", store=store, make_copier=lambda _r: copier)  # type: ignore[arg-type]
    agent._copiers["main"] = copier
    agent._tasks[PartitionKey("main", "t", 0)] = PartitionTask("main", "t", 0, "t")
    agent._on_session(SessionState.LOST)
    for _ in range(3):
        agent._step()  # refused: no exception, the loss stays to be recovered
        assert agent._session_lost and store.registered == 0
    assert not agent._tasks  # released at the first step
    agent._step()
    assert not agent._session_lost and store.registered == 1


class SlowStore(FlakyStore):
    """Not answering the first ``late`` reads of a starting worker."""

    def __init__(self, late: int) -> None:
        super().__init__(refusals=0)
        self.late = late
        self.cleared = 0

    def clear_drain_request(self, worker_id: str) -> None:
        if self.late:
            self.late -= 1
            raise StoreUnavailable("coordinating Kafka cluster unavailable: no answer within 6s")
        self.cleared += 1


def test_a_starting_worker_waits_for_a_store_too_busy_to_answer() -> None:
    config = _config()
    store = SlowStore(late=2)
    agent = WorkerAgent(config=config, worker_id="w1", store=store, make_copier=lambda _r: Copier())  # type: ignore[arg-type]
    agent._announce()
    assert (store.late, store.cleared, store.registered) == (0, 1, 1)


class DownStore(SlowStore):
    """Not answering the first ``late`` reads; then, for the first ``taken`` registrations,
    the id is still held by another live process."""

    def __init__(self, late: int, taken: int = 0) -> None:
        super().__init__(late=late)
        self.taken = taken

    def register_worker(self, record: Any) -> None:
        if self.taken:
            self.taken -= 1
            raise WorkerIdTaken(record.id)
        super().register_worker(record)


def _one_try_per_policy(monkeypatch: Any) -> None:
    # Each policy gives up at its first refusal: as if every deadline had passed.
    monkeypatch.setattr(agent_module, "RetryPolicy", lambda **kw: RetryPolicy(**{**kw, "max_tries": 1}))


def test_a_starting_worker_outlasts_a_coordinator_outage_longer_than_its_deadline(monkeypatch: Any) -> None:
    _one_try_per_policy(monkeypatch)
    store = DownStore(late=5)
    agent = WorkerAgent(config=_config(), worker_id="w1", store=store, make_copier=lambda _r: Copier())  # type: ignore[arg-type]
    agent._announce()
    assert (store.late, store.cleared, store.registered) == (0, 1, 1)


def test_a_starting_worker_whose_id_stays_taken_gives_up(monkeypatch: Any) -> None:
    _one_try_per_policy(monkeypatch)
    store = DownStore(late=0, taken=1)
    agent = WorkerAgent(config=_config(), worker_id="w1", store=store, make_copier=lambda _r: Copier())  # type: ignore[arg-type]
    with pytest.raises(RetryExhausted) as raised:
        agent._announce()
    assert isinstance(raised.value.__cause__, WorkerIdTaken) and store.registered == 0


def test_a_drain_requested_during_an_outage_ends_the_wait(monkeypatch: Any) -> None:
    _one_try_per_policy(monkeypatch)
    store = DownStore(late=1000)
    agent = WorkerAgent(config=_config(), worker_id="w1", store=store, make_copier=lambda _r: Copier())  # type: ignore[arg-type]
    agent.request_drain()
    with pytest.raises(RetryExhausted):
        agent._announce()
    assert store.late == 999
