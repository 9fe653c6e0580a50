"""Faults in the fleet: workers killed or stopped, the leader killed, everything restarted.

Every test counts each record: nothing may be lost; a clean hand-over may not duplicate either.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from strait.demo import Fleet, Generator, create_topic, wait_until
from strait.sandbox import Sandbox
from tests.integration.test_replication import FleetFactory, assigned, make_fleet, uid
from tests.integration.verify import copied_counts, verify

pytestmark = pytest.mark.integration

__all__ = ["make_fleet"]  # the fixture, shared with test_replication

PARTITIONS = 6


def _flowing(fleet: Fleet, dst: dict[str, str], topic: str) -> None:
    assert wait_until(lambda: all(n > 0 for n in copied_counts(dst, topic, PARTITIONS).values()), 30)
    assert wait_until(lambda: len(assigned(fleet, "main", topic)) == PARTITIONS, 10)


def _owned_by(fleet: Fleet, topic: str, worker: str) -> list[int]:
    prefix = f"main/{topic}/"
    return sorted(
        int(k[len(prefix) :])
        for k, w in fleet.api().call("GET", "/assignment").items()
        if w == worker and k.startswith(prefix)
    )


def test_kill_9_worker_loses_nothing(
    sandbox: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"kill9-{uid()}"
    create_topic(src, topic, PARTITIONS)
    fleet = make_fleet()
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 30)
    generator = Generator(src, rate_per_partition=100).start()
    generator.add(topic, PARTITIONS)
    try:
        fleet.api().add_topic(topic)
        _flowing(fleet, dst, topic)
        time.sleep(1)
        victims = _owned_by(fleet, topic, "w1")
        assert victims
        fleet.signal("w1", signal.SIGKILL)
        killed = time.monotonic()
        fleet.wait_exit("w1", 10)
        # Counted once w2 owns them (after w1's session ended), the records that reach the
        # victims' copies are w2's: none can be a late write of w1.
        assert wait_until(lambda: set(victims) <= set(_owned_by(fleet, topic, "w2")), 60, interval_s=0.1)
        baseline = copied_counts(dst, topic, PARTITIONS)
        assert wait_until(
            lambda: all(copied_counts(dst, topic, PARTITIONS)[p] > baseline[p] for p in victims), 60, interval_s=0.1
        )
        recovery_s = time.monotonic() - killed
        record_property("kill9_to_flowing_s", round(recovery_s, 2))
        print(
            f"\nMEASURE worker kill -9 -> its partitions flowing again: {recovery_s:.2f}s"
            f" (session timeout {fleet.session_timeout_s}s)"
        )
        assert _owned_by(fleet, topic, "w2") == list(range(PARTITIONS))
        assert "w1" in fleet.workers_in_state("dead")
        time.sleep(1)
    finally:
        generator.stop()
    report = verify(dst, topic, generator.produced(topic))
    print(f"kill -9: {report}")
    assert report.lost == 0, report
    assert report.bad_metadata == 0


def test_sigterm_and_drain_hand_over_without_loss_or_duplicates(sandbox: Sandbox, make_fleet: FleetFactory) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"term-{uid()}"
    create_topic(src, topic, PARTITIONS)
    fleet = make_fleet()
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 30)
    generator = Generator(src, rate_per_partition=100).start()
    generator.add(topic, PARTITIONS)
    try:
        fleet.api().add_topic(topic)
        _flowing(fleet, dst, topic)
        time.sleep(1)
        fleet.signal("w1", signal.SIGTERM)
        assert fleet.wait_exit("w1", 30) == 0
        assert "w1" in fleet.workers_in_state("left")
        assert wait_until(lambda: _owned_by(fleet, topic, "w2") == list(range(PARTITIONS)), 10)
        time.sleep(1)
        # A third worker joins, then w2 is drained through the API: w3 ends up with everything.
        fleet.start_worker("w3")
        assert wait_until(lambda: len(_owned_by(fleet, topic, "w3")) == PARTITIONS // 2, 30)
        time.sleep(1)
        fleet.api().call("POST", "/workers/w2/drain")
        assert fleet.wait_exit("w2", 30) == 0
        assert wait_until(lambda: _owned_by(fleet, topic, "w3") == list(range(PARTITIONS)), 10)
        time.sleep(1)
    finally:
        generator.stop()
    report = verify(dst, topic, generator.produced(topic))
    print(f"\nSIGTERM + drain: {report}")
    assert report.exact, report


def test_standby_takes_over_when_the_leader_dies(
    sandbox: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic, later = f"lead-{uid()}", f"later-{uid()}"
    create_topic(src, topic, PARTITIONS)
    create_topic(src, later, 2)
    fleet = make_fleet()
    fleet.start_controller("c1")
    assert wait_until(lambda: fleet.leader() == "c1", 15)
    fleet.start_controller("c2")
    assert fleet.leader() == "c1"
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    generator = Generator(src, rate_per_partition=100).start()
    generator.add(topic, PARTITIONS)
    generator.add(later, 2)
    try:
        fleet.api("c2").add_topic(topic)  # a standby accepts writes: they go to ZooKeeper
        _flowing(fleet, dst, topic)
        fleet.signal("c1", signal.SIGKILL)
        killed = time.monotonic()
        assert wait_until(lambda: fleet.leader() == "c2", 30, interval_s=0.1)
        record_property("leader_failover_s", round(time.monotonic() - killed, 2))
        print(f"\nMEASURE leader kill -9 -> standby leads: {time.monotonic() - killed:.2f}s")
        fleet.api("c2").add_topic(later)
        assert wait_until(lambda: sum(copied_counts(dst, later, 2).values()) > 0, 30)
        time.sleep(1)
    finally:
        generator.stop()
    report = verify(dst, topic, generator.produced(topic))
    assert report.exact, report
    assert verify(dst, later, generator.produced(later)).exact


def test_restarting_everything_resumes_from_checkpoints(sandbox: Sandbox, make_fleet: FleetFactory) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"restart-{uid()}"
    create_topic(src, topic, PARTITIONS)
    fleet = make_fleet()
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    generator = Generator(src, rate_per_partition=100).start()
    generator.add(topic, PARTITIONS)
    try:
        fleet.api().add_topic(topic)
        _flowing(fleet, dst, topic)
        fleet.stop()
        # Every process has exited (stop waits for them), so nothing can copy from here on.
        assert all(process.poll() is not None for process in fleet.processes.values())
        stopped = copied_counts(dst, topic, PARTITIONS)
        source_at_stop = copied_counts(src, topic, PARTITIONS)
        # The source moves on while nothing copies: the restart has records to resume with.
        assert wait_until(
            lambda: all(n > source_at_stop[p] + 50 for p, n in copied_counts(src, topic, PARTITIONS).items()), 30
        )
        assert copied_counts(dst, topic, PARTITIONS) == stopped
        fleet.start_controller()
        fleet.start_worker("w1")
        fleet.start_worker("w2")
        assert wait_until(lambda: sum(copied_counts(dst, topic, PARTITIONS).values()) > sum(stopped.values()), 30)
        time.sleep(1)
    finally:
        generator.stop()
    report = verify(dst, topic, generator.produced(topic))
    print(f"\nrestart: {report}")
    assert report.exact, report
