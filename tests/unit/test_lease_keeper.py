"""The worker's lease: confirmed by its own keeper thread, so an agent waiting on a revoke never
lets it lapse; a revoke always wins over a confirmation that raced it."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from strait.config import parse_config
from strait.coordination.model import PartitionKey, SessionState
from strait.worker.agent import WorkerAgent
from strait.worker.lease import Lease, LeaseKeeper
from strait.worker.task import PartitionTask

TASK = PartitionTask("main", "t", 0, "t")


def test_a_confirmation_that_raced_a_revoke_is_refused() -> None:
    lease = Lease(valid_for_s=60)
    since = lease.revocations()
    lease.revoke()  # the session was lost while the round trip was under way
    assert not lease.confirm(since) and not lease.valid()
    assert lease.confirm(lease.revocations()) and lease.valid()


def test_the_keeper_confirms_only_while_the_session_is_proven() -> None:
    lease = Lease(valid_for_s=60)
    proven = threading.Event()
    calls = threading.Semaphore(0)

    def proves() -> bool:
        calls.release()
        return proven.is_set()

    keeper = LeaseKeeper(lease, proves, interval_s=0.01)
    keeper.start()
    try:
        for _ in range(3):
            assert calls.acquire(timeout=10)
        assert not lease.valid()
        proven.set()
        for _ in range(2):  # one round trip may have begun before the event was set
            assert calls.acquire(timeout=10)
        assert lease.valid()
    finally:
        keeper.stop()


class Store:
    def __init__(self) -> None:
        self.reads = 0
        self.published: frozenset[PartitionKey] | None = None

    def session_state(self) -> SessionState:
        return SessionState.CONNECTED

    def read_worker_assignment(self, worker_id: str) -> Any:
        self.reads += 1
        return None

    def update_worker(self, record: Any) -> None:
        self.published = record.holding

    def close(self) -> None: ...


class CopierNeedingTheLease:
    """Its revoke completes only once the lease is valid, as an exactly-once pipeline's does
    when its replaced producer must take the transactional id back to commit the release."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.holding: set[PartitionTask] = set()
        self.timeouts: list[float] = []
        self.released = threading.Event()

    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]:
        self.timeouts.append(timeout_s)
        self.holding |= set(tasks)

        def finish() -> None:
            while not self.lease.valid():
                if self.released.wait(0.01):
                    return
            self.holding.clear()
            self.released.set()

        threading.Thread(target=finish, daemon=True).start()
        return set(self.holding)

    def assigned(self) -> set[PartitionTask]:
        return set(self.holding)

    def stop(self, drain: bool = True, timeout_s: float = 30) -> None: ...


def test_an_agent_never_waits_on_a_revoke_and_its_lease_lets_the_revoke_complete() -> None:
    config = parse_config(
        {
            "zookeeper": {"session_timeout_s": 0.5},
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": "main", "source": "src", "destination": "dst"}],
            "worker": {"revoke_timeout_s": 60},
        },
        environ={},
    )
    lease = Lease(valid_for_s=0.4)
    store = Store()
    copier = CopierNeedingTheLease(lease)
    agent = WorkerAgent(config=config, worker_id="w1", store=store, make_copier=lambda _r: copier, lease=lease)  # type: ignore[arg-type]
    agent._copiers["main"] = copier  # type: ignore[assignment]
    key = PartitionKey("main", "t", 0)
    agent._tasks[key] = TASK
    agent._release({key})  # returns at once: the revoke goes on in the copier
    assert copier.timeouts == [0]
    assert store.published == frozenset({key}) and not copier.released.is_set()  # still held meanwhile
    agent._keeper.start()
    try:
        assert copier.released.wait(30), "the revoke never completed: the lease was not confirmed"
    finally:
        agent._keeper.stop()
        copier.released.set()
    assert store.reads >= 1 and agent._held() == set()
