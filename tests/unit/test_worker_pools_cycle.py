"""Worker pools and forgotten workers in the controller's cycle, against the in-memory store."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from strait.config import parse_config
from strait.controller.loop import Controller
from strait.controller.roster import gone_workers_to_forget
from strait.coordination.model import LeaderInfo, TopicSpec, WorkerRecord, WorkerState
from tests.unit.test_assignment_cycle import MemoryStore, NoMetadata

CONFIG = parse_config(
    {
        "clusters": {"src": {}, "dst": {}},
        "routes": [
            {"name": "gold", "source": "src", "destination": "dst", "pools": ["vip"]},
            {"name": "bulk", "source": "src", "destination": "dst"},
        ],
        "controller": {"forget_left_workers_s": 60},
    },
    environ={},
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _controller(store: MemoryStore, clock: Clock | None = None) -> Controller:
    return Controller(
        config=CONFIG,
        store=store,  # type: ignore[arg-type]  # the subset the loop uses
        metadata=NoMetadata(),
        identity=LeaderInfo("c1", "http://c1"),
        clock=clock or Clock(),
    )


def _add(store: MemoryStore, route: str, topic: str, partitions: int) -> None:
    store.create_topic(TopicSpec(route=route, topic=topic, destination_topic=topic, partitions=partitions))


def _settle(store: MemoryStore, controller: Controller) -> None:
    for _ in range(5):
        controller.cycle()
        store.hold_what_is_assigned()


def test_a_route_runs_only_in_its_pools_and_waits_when_they_are_empty() -> None:
    store = MemoryStore()
    controller = _controller(store)
    store.join("d1", pool="default")
    _add(store, "gold", "orders", 4)
    _add(store, "bulk", "logs", 4)
    _settle(store, controller)
    owners = store.owners()
    assert {k for k in owners if k.startswith("gold/")} == set()  # waits: no vip worker
    assert {w for k, w in owners.items() if k.startswith("bulk/")} == {"d1"}
    assert {str(k) for k in controller.stranded} == {f"gold/orders/{p}" for p in range(4)}

    store.join("v1", pool="vip")
    _settle(store, controller)
    owners = store.owners()
    assert {w for k, w in owners.items() if k.startswith("gold/")} == {"v1"}
    assert controller.stranded == {}
    # bulk may use any pool: the two workers share the eight partitions evenly.
    assert sorted(list(owners.values()).count(w) for w in ("d1", "v1")) == [4, 4]

    del store.workers["v1"]  # the vip worker dies: gold waits again, never moves to d1
    _settle(store, controller)
    owners = store.owners()
    assert not any(k.startswith("gold/") for k in owners)
    assert {w for k, w in owners.items() if k.startswith("bulk/")} == {"d1"}


def test_gone_workers_are_forgotten_after_the_configured_time() -> None:
    store = MemoryStore()
    clock = Clock()
    controller = _controller(store, clock)
    store.join("w1")
    store.join("w2")
    _add(store, "bulk", "logs", 2)
    _settle(store, controller)
    store.workers["w2"] = replace(store.workers["w2"], live=False, state=WorkerState.DEAD, holding=frozenset())
    store.workers["w3"] = WorkerRecord(
        id="w3", state=WorkerState.LEFT, live=False, gone_since=clock.now - 30, pool="vip"
    )
    controller.cycle()
    assert set(store.workers) == {"w1", "w2", "w3"}  # still listed
    clock.now += 31
    controller.cycle()
    assert set(store.workers) == {"w1", "w2"}  # w3 left 61 s ago
    clock.now += 30
    controller.cycle()
    assert set(store.workers) == {"w1"}  # w2 first seen dead 61 s ago


def test_a_gone_worker_still_named_by_the_assignment_is_kept() -> None:
    gone = WorkerRecord(id="w", state=WorkerState.DEAD, live=False)
    forget, seen = gone_workers_to_forget({"w": gone}, {"w": 0.0}, {"w"}, now=1000.0, after_s=60)
    assert forget == [] and seen == {"w": 0.0}
    forget, _ = gone_workers_to_forget({"w": gone}, {"w": 0.0}, set(), now=1000.0, after_s=60)
    assert forget == ["w"]


def test_a_worker_back_alive_restarts_its_clock() -> None:
    dead = WorkerRecord(id="w", state=WorkerState.DEAD, live=False)
    _, seen = gone_workers_to_forget({"w": dead}, {}, set(), now=10.0, after_s=60)
    assert seen == {"w": 10.0}
    _, seen = gone_workers_to_forget({"w": replace(dead, live=True)}, seen, set(), now=20.0, after_s=60)
    assert seen == {}
    forget, seen = gone_workers_to_forget({"w": dead}, seen, set(), now=75.0, after_s=60)
    assert forget == [] and seen == {"w": 75.0}


def test_pools_in_the_configuration() -> None:
    import pytest

    from strait.config import ConfigError

    base = {"clusters": {"src": {}, "dst": {}}, "routes": [{"name": "r", "source": "src", "destination": "dst"}]}
    config = parse_config(base, environ={})
    assert config.worker.pool == "default" and config.routes[0].pools is None
    assert config.controller.forget_left_workers_s == 3600
    assert parse_config(base, environ={"STRAIT_WORKER__POOL": "vip"}).worker.pool == "vip"
    with pytest.raises(ConfigError, match=r"routes\.0\.pools"):
        parse_config({**base, "routes": [{"name": "r", "source": "src", "destination": "dst", "pools": []}]}, {})
    with pytest.raises(ConfigError, match="invalid pool name"):
        parse_config({**base, "routes": [{"name": "r", "source": "src", "destination": "dst", "pools": ["a b"]}]}, {})


def test_waiting_for_the_first_worker_is_a_note_then_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Right after a start no worker has registered yet: partitions wait, said at INFO. Once the
    grace is over with still no worker, or once workers exist but none of the route's pools, it is
    a WARNING (said once per change, not every cycle)."""
    store = MemoryStore()
    clock = Clock()
    controller = _controller(store, clock)
    _add(store, "bulk", "logs", 2)
    with caplog.at_level(logging.INFO, logger="strait.controller.loop"):
        _settle(store, controller)
        said = [(r.levelno, r.getMessage()) for r in caplog.records if "wait" in r.getMessage()]
        assert said == [(logging.INFO, "route bulk: 2 partitions wait for the first worker to register")]
        caplog.clear()
        clock.now += 31
        _settle(store, controller)
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "wait" in r.getMessage()]
        assert warned == ["route bulk: no live worker in its pools (any): 2 partitions wait"]
    store2, clock2 = MemoryStore(), Clock()
    fresh = _controller(store2, clock2)
    store2.join("d1", pool="default")
    _add(store2, "gold", "orders", 1)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="strait.controller.loop"):
        _settle(store2, fresh)  # a worker exists, only not of gold's pool: a warning at once
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "wait" in r.getMessage()]
    assert warned == ["route gold: no live worker in its pools (vip): 1 partitions wait"]
