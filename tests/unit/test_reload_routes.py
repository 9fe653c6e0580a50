"""A worker's route changes from a reload: a removed route's copier revokes its partitions and
stops only once they are handed over (held until then); an added route's copier starts; a changed
route's new copier starts once the old one stopped."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strait.config import RouteConfig, StraitConfig, parse_config
from strait.coordination.model import PartitionKey, WorkerRecord
from strait.worker.agent import WorkerAgent
from strait.worker.task import PartitionTask


class Copier:
    def __init__(self, route: RouteConfig) -> None:
        self.route = route
        self.started = self.stopped = False
        self.held: set[PartitionTask] = set()
        self.revoked: list[PartitionTask] = []

    def start(self) -> None:
        self.started = True

    def assign(self, tasks: Iterable[PartitionTask]) -> None:
        self.held |= set(tasks)

    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]:
        self.revoked += list(tasks)
        return set(self.held)  # the final commits are still under way

    def abandon(self) -> None: ...

    def fenced(self) -> set[PartitionTask]:
        return set()

    def crashed(self) -> str | None:
        return None

    def assigned(self) -> set[PartitionTask]:
        return set(self.held)

    def stats(self) -> dict[Any, Any]:
        return {}

    def stop(self, drain: bool = True, timeout_s: float = 30) -> None:
        assert not self.held, "stopped while partitions were still held"
        self.stopped = True


class Spec:
    destination_topic = "t"

    def start_of(self, _partition: int) -> None:
        return None


class Store:
    def __init__(self) -> None:
        self.holding: list[frozenset[PartitionKey]] = []

    def topic_specs(self, topics: set[tuple[str, str]]) -> dict[tuple[str, str], Spec]:
        return dict.fromkeys(topics, Spec())

    def update_worker(self, record: WorkerRecord) -> None:
        self.holding.append(record.holding)


def _config(*routes: dict[str, Any]) -> StraitConfig:
    return parse_config({"clusters": {"src": {}, "dst": {}}, "routes": list(routes)}, environ={})


A = {"name": "a", "source": "src", "destination": "dst"}
B = {"name": "b", "source": "dst", "destination": "src"}
KEY = PartitionKey("a", "t", 0)
TASK = PartitionTask("a", "t", 0, "t")


def _agent(config: StraitConfig) -> tuple[WorkerAgent, Store, list[Copier]]:
    made: list[Copier] = []

    def make(route: RouteConfig) -> Copier:
        made.append(Copier(route))
        return made[-1]

    store = Store()
    agent = WorkerAgent(config=config, worker_id="w1", store=store, make_copier=make)  # type: ignore[arg-type]
    for route in config.routes:
        agent._copiers[route.name] = make(route)
    agent._copiers["a"].assign([TASK])
    agent._tasks[KEY] = TASK
    return agent, store, made


def test_a_removed_route_is_held_until_revoked_then_its_copier_stops_and_an_added_one_starts() -> None:
    agent, store, made = _agent(_config(A))
    old = made[0]
    agent.reconfigure(_config(B), added=["b"], removed=["a"], changed=[])
    agent._reconfigure_routes()
    assert old.revoked == [TASK] and not old.stopped
    assert KEY in agent._held() and KEY in store.holding[-1]  # no new owner before the final commit
    assert [c.route.name for c in made[1:]] == ["b"] and made[1].started
    old.held.clear()  # the revoke finished
    agent._reconfigure_routes()
    assert old.stopped and KEY not in agent._held()
    assert set(agent._copiers) == {"b"}


def test_a_changed_route_gets_a_new_copier_once_the_old_one_stopped() -> None:
    agent, _store, made = _agent(_config(A))
    old = made[0]
    agent.reconfigure(_config({**A, "copy": "record"}), added=[], removed=[], changed=["a"])
    agent._reconfigure_routes()
    assert "a" not in agent._copiers and len(made) == 1
    # Assigned meanwhile: not taken by anyone until the new copier runs.
    assert agent._tasks_for({KEY}) == {}
    old.held.clear()
    agent._reconfigure_routes()
    assert old.stopped
    assert made[1].route.copy_mode == "record" and made[1].started and agent._copiers["a"] is made[1]
    assert set(agent._tasks_for({KEY})) == {KEY}
