"""A worker cut off from ZooKeeper stops copying before its session can expire."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from strait.config import parse_config
from strait.coordination.model import PartitionKey, SessionState
from strait.worker.agent import WorkerAgent
from strait.worker.task import PartitionTask


class Copier:
    def __init__(self) -> None:
        self.abandoned = 0

    def start(self) -> None: ...
    def assign(self, tasks: Iterable[PartitionTask]) -> None: ...
    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]:
        return set()

    def abandon(self) -> None:
        self.abandoned += 1

    def fenced(self) -> set[PartitionTask]:
        return set()

    def crashed(self) -> str | None:
        return None

    def assigned(self) -> set[PartitionTask]:
        return set()

    def stats(self) -> dict[Any, Any]:
        return {}

    def stop(self, drain: bool = True, timeout_s: float = 30) -> None: ...


def _agent(copier: Copier) -> WorkerAgent:
    config = parse_config(
        {
            "zookeeper": {"session_timeout_s": 9},
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": "main", "source": "src", "destination": "dst"}],
        },
        environ={},
    )
    agent = WorkerAgent(config=config, worker_id="w1", store=None, make_copier=lambda _r: copier)  # type: ignore[arg-type]
    agent._copiers["main"] = copier
    agent._tasks[PartitionKey("main", "t", 0)] = PartitionTask("main", "t", 0, "t")
    return agent


def test_a_short_blip_keeps_copying_a_long_one_stops_everything_without_commits() -> None:
    copier = Copier()
    agent = _agent(copier)
    agent._on_session(SessionState.SUSPENDED)
    agent._step()  # just suspended: kazoo may reconnect in time, keep copying
    assert copier.abandoned == 0 and agent._tasks
    assert agent._suspended_since is not None
    agent._suspended_since -= 2.9  # below a third of the 9 s session
    agent._step()
    assert copier.abandoned == 0
    agent._suspended_since -= 0.2  # past a third: the session may expire before we hear of it
    agent._step()
    assert copier.abandoned == 1 and not agent._tasks
    agent._step()
    assert copier.abandoned == 1  # once
    agent._on_session(SessionState.CONNECTED)
    assert agent._suspended_since is None and agent._cut_off


class CrashedCopier(Copier):
    def crashed(self) -> str | None:
        return "realtime"


def test_a_worker_whose_pipeline_crashed_stops_instead_of_taking_more_partitions() -> None:
    # A dead loop copies nothing, and partitions assigned later would start in it: the worker
    # must fail (its session ends, the controller moves every partition) rather than look alive.
    agent = _agent(CrashedCopier())
    with pytest.raises(RuntimeError, match="route main: pipeline realtime crashed"):
        agent._step()


class RevokingCopier(Copier):
    """Still handing over a partition the agent no longer counts as its own."""

    def assigned(self) -> set[PartitionTask]:
        return {PartitionTask("main", "t", 1, "t")}


class RecordingStore:
    def __init__(self) -> None:
        self.records: list[Any] = []

    def update_worker(self, record: Any) -> None:
        self.records.append(record)

    def register_worker(self, record: Any) -> None:
        self.records.append(record)


def test_every_record_the_worker_writes_names_the_partitions_it_still_hands_over() -> None:
    # The controller gives a partition to its next owner once no worker reports holding it; a
    # state change that reported only the assigned partitions let one still being handed over
    # (records in flight, a transaction open) start elsewhere at once.
    from strait.coordination.model import WorkerState

    agent = _agent(RevokingCopier())
    store = RecordingStore()
    agent.store = store  # type: ignore[assignment]
    agent._set_state(WorkerState.DRAINING)
    agent._register()
    revoking = PartitionKey("main", "t", 1)
    assert [revoking in record.holding for record in store.records] == [True, True]
    assert all(PartitionKey("main", "t", 0) in record.holding for record in store.records)
