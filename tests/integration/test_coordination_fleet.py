"""The replication faults that coordination decides, on the Kafka store: controller and worker
processes coordinating on the destination cluster (no ZooKeeper), under continuous load, each
ending with a verifier that counts every record (0 lost, new records in order).

The same scenarios on ZooKeeper are in tests/integration/test_faults.py.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox
from tests.integration.faults import all_flowing, check, create_topic, fleets, flowing, load, owners

pytestmark = pytest.mark.integration

PARTITIONS = 6
RATE = 50  # records/s per partition
SESSION_S = 4.0  # the default: what "a dead worker's partitions flow again in under 5 s" is measured at

FleetFactory = Callable[..., Fleet]
Props = dict[str, str]


def uid() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture
def make_fleet(sandbox: Sandbox, tmp_path: Path) -> Iterator[FleetFactory]:
    with fleets(sandbox, tmp_path) as make:

        def on_kafka(**options: object) -> Fleet:
            return make(coordination_cluster="dst", session_timeout_s=SESSION_S, **options)

        yield on_kafka


@pytest.fixture
def clusters(sandbox: Sandbox) -> tuple[Props, Props]:
    return sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()


def _start(fleet: Fleet, workers: list[str], controllers: tuple[str, ...] = ("c1",)) -> None:
    for name in controllers:
        fleet.start_controller(name)
    for name in workers:
        fleet.start_worker(name)
    assert wait_until(lambda: fleet.workers_in_state("active") == set(workers), 60), fleet.api().call("GET", "/workers")


def _replicate(fleet: Fleet, dst: Props, topic: str, partitions: int = PARTITIONS) -> None:
    fleet.api().add_topic(topic)
    all_flowing(dst, topic, partitions)
    assert wait_until(lambda: all(owners(fleet, topic).get(p) for p in range(partitions)), 30)


def test_a_killed_worker_and_a_frozen_one_lose_nothing(
    clusters: tuple[Props, Props], make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = clusters
    topic = f"kcoord-{uid()}"
    create_topic(src, topic, PARTITIONS)
    fleet = make_fleet()
    _start(fleet, ["w1", "w2", "w3"])
    with load(src, {topic: PARTITIONS}, RATE) as generator:
        _replicate(fleet, dst, topic)
        # kill -9: its heartbeats stop; the leader reassigns once they are stale.
        orphaned = [p for p, w in owners(fleet, topic).items() if w == "w1"]
        assert orphaned
        fleet.signal("w1", signal.SIGKILL)
        fleet.wait_exit("w1", 10)
        killed = time.monotonic()
        assert wait_until(lambda: "w1" not in set(owners(fleet, topic).values()), 30, interval_s=0.1)
        flowing(dst, topic, orphaned, PARTITIONS, 30)
        recovery_s = time.monotonic() - killed
        print(f"\nkill -9 w1 (held {orphaned}) -> flowing again in {recovery_s:.2f}s")

        # SIGSTOP past the session: w2 must have stopped copying before its partitions move,
        # and learns on waking that its session is gone.
        frozen = [p for p, w in owners(fleet, topic).items() if w == "w2"]
        assert frozen
        fleet.signal("w2", signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert wait_until(lambda: "w2" not in set(owners(fleet, topic).values()), 30, interval_s=0.1)
            flowing(dst, topic, frozen, PARTITIONS, 30)
            frozen_s = time.monotonic() - stopped
            time.sleep(1)  # w3 copies past where the frozen worker stopped
        finally:
            fleet.signal("w2", signal.SIGCONT)
        assert wait_until(lambda: "w2" in fleet.workers_in_state("active"), 60), fleet.api().call("GET", "/workers")
        assert fleet.processes["w2"].poll() is None, "the resumed worker crashed"
        time.sleep(1)
    check(
        "kafka_store_worker_faults",
        dst,
        topic,
        generator.produced(topic),
        record_property,
        {"kill9_recovery_s": recovery_s, "sigstop_flowing_s": frozen_s},
    )


def test_kill_9_of_the_leader_controller_with_a_standby(
    clusters: tuple[Props, Props], make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = clusters
    topic, later = f"kleader-{uid()}", f"klater-{uid()}"
    create_topic(src, topic, PARTITIONS)
    create_topic(src, later, 2)
    fleet = make_fleet()
    fleet.start_controller("c1")
    assert wait_until(lambda: fleet.leader() == "c1", 30)
    _start(fleet, ["w1", "w2"], controllers=("c2",))
    with load(src, {topic: PARTITIONS, later: 2}, RATE) as generator:
        _replicate(fleet, dst, topic)
        fleet.signal("c1", signal.SIGKILL)
        killed = time.monotonic()
        assert wait_until(lambda: fleet.leader() == "c2", 30, interval_s=0.1)
        failover_s = time.monotonic() - killed
        # The new leader acts: it assigns a new topic.
        fleet.api("c2").add_topic(later)
        all_flowing(dst, later, 2)
        acting_s = time.monotonic() - killed
        print(f"\nkill -9 of the leader -> c2 leads in {failover_s:.2f}s, a new topic flows at {acting_s:.2f}s")
        time.sleep(1)
    check(
        "kafka_store_leader_kill9", dst, topic, generator.produced(topic), record_property, {"failover_s": failover_s}
    )
    check("kafka_store_leader_kill9_new_topic", dst, later, generator.produced(later), record_property)


def test_a_frozen_leader_is_replaced_and_stands_down_when_it_wakes(
    clusters: tuple[Props, Props], make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = clusters
    topic, later = f"kfrozen-{uid()}", f"kthawed-{uid()}"
    create_topic(src, topic, PARTITIONS)
    create_topic(src, later, 2)
    fleet = make_fleet()
    fleet.start_controller("c1")
    assert wait_until(lambda: fleet.leader() == "c1", 30)
    _start(fleet, ["w1", "w2"], controllers=("c2",))
    with load(src, {topic: PARTITIONS, later: 2}, RATE) as generator:
        _replicate(fleet, dst, topic)
        fleet.signal("c1", signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert wait_until(lambda: fleet.leader() == "c2", 30, interval_s=0.1)
            failover_s = time.monotonic() - stopped
            fleet.api("c2").add_topic(later)
            all_flowing(dst, later, 2)
        finally:
            fleet.signal("c1", signal.SIGCONT)
        # Awake, c1 finds the leader record is c2's (its own transactions fenced): it stands by.
        assert wait_until(lambda: fleet.api("c1").call("GET", "/health")["leader"] is False, 30)
        assert fleet.leader() == "c2"
        moved = [p for p, w in owners(fleet, topic).items() if w == "w1"]
        fleet.signal("w1", signal.SIGKILL)  # c2 still acts
        assert wait_until(lambda: set(owners(fleet, topic).values()) == {"w2"}, 30, interval_s=0.1)
        flowing(dst, topic, moved, PARTITIONS, 30)
        time.sleep(1)
    check(
        "kafka_store_frozen_leader", dst, topic, generator.produced(topic), record_property, {"failover_s": failover_s}
    )
    check("kafka_store_frozen_leader_new_topic", dst, later, generator.produced(later), record_property)
