"""The fault suite on the session sandbox: every scenario runs under continuous load and ends
with a verifier that counts every record. Required outcome: 0 lost; duplicates are reported,
and allowed only as re-sent ranges (see `tests.integration.faults`).

Seeded: the random choices (which worker dies) come from `SEED`, so a failure replays the same
sequence of faults. ZooKeeper's restart runs last in this module: it is the one fault that
touches what every other test shares.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strait import clients
from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox
from strait.sandbox.errors import SandboxError
from tests.integration.faults import (
    all_flowing,
    check,
    copy_modes,
    copy_route,
    create_topic,
    fleets,
    flowing,
    in_mode,
    load,
    order_of,
    owners,
)

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("STRAIT_FAULT_SEED", "20261129"))
PARTITIONS = 6
RATE = 50  # records/s per partition: 300 records/s per topic
SESSION_S = 3.0

FleetFactory = Callable[..., Fleet]
Props = dict[str, str]
# The faults that move partitions between owners run in both copy modes: record by record, and
# whole record batches (strait.worker.batch), whose hand-over and resend rules differ.
COPY_MODES = pytest.mark.parametrize("copy", ["record", "batch"])


def uid() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture
def make_fleet(sandbox: Sandbox, tmp_path: Path) -> Iterator[FleetFactory]:
    with fleets(sandbox, tmp_path) as make:
        yield make


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


def test_the_order_check_tells_resent_ranges_from_gaps_and_interleaving() -> None:
    clean = order_of({0: [0, 1, 2, 3], 1: []})
    assert clean.ordered and clean.resent_records == 0 and clean.records == 4
    resent = order_of({0: [0, 1, 2, 3, 1, 2, 3, 4, 5, 2, 3, 6]})
    assert resent.ordered and (resent.resent_ranges, resent.resent_records) == (2, 5)
    gap = order_of({0: [0, 1, 3, 2, 4]})
    assert gap.new_out_of_order == 1
    interleaved = order_of({0: [0, 1, 2, 3, 4, 1, 3, 2, 5]})
    assert interleaved.new_out_of_order == 0 and interleaved.interleaved == 2


@COPY_MODES
def test_repeated_kill_9_of_random_workers_loses_nothing(
    clusters: tuple[Props, Props],
    make_fleet: FleetFactory,
    record_property: Callable[[str, object], None],
    copy: str,
) -> None:
    src, dst = clusters
    rng = random.Random(SEED)
    topic = f"fkill-{uid()}"
    create_topic(src, topic, PARTITIONS)
    fleet = make_fleet(session_timeout_s=SESSION_S, route=copy_route(copy))
    workers = ["w1", "w2", "w3"]
    _start(fleet, workers)
    recoveries: list[float] = []
    with load(src, {topic: PARTITIONS}, RATE) as generator:
        _replicate(fleet, dst, topic)
        in_mode(fleet, topic, PARTITIONS, copy)
        for round_ in range(3):
            victim = rng.choice(workers)  # the seed alone decides the sequence of victims
            # A restarted worker gets its fair share back; wait for it so every kill orphans partitions.
            assert wait_until(lambda v=victim: v in set(owners(fleet, topic).values()), 60)
            orphaned = [p for p, w in owners(fleet, topic).items() if w == victim]
            fleet.signal(victim, signal.SIGKILL)
            fleet.wait_exit(victim, 10)
            killed = time.monotonic()
            assert wait_until(lambda v=victim: v not in set(owners(fleet, topic).values()), 60, interval_s=0.1)
            flowing(dst, topic, orphaned, PARTITIONS, 60)
            recoveries.append(time.monotonic() - killed)
            print(f"\nround {round_}: kill -9 {victim} (held {orphaned}) -> flowing again in {recoveries[-1]:.2f}s")
            fleet.start_worker(victim)  # same id: it waits for the dead session to expire
            assert wait_until(lambda v=victim: v in fleet.workers_in_state("active"), 60)
        all_flowing(dst, topic, PARTITIONS)
        in_mode(fleet, topic, PARTITIONS, copy)
        time.sleep(1)
    check(
        f"kill9_random_workers_{copy}",
        dst,
        topic,
        generator.produced(topic),
        record_property,
        {"worst_recovery_s": max(recoveries), "mean_recovery_s": sum(recoveries) / len(recoveries)},
    )


@COPY_MODES
def test_a_stopped_worker_past_its_session_does_not_lose_or_reorder(
    clusters: tuple[Props, Props],
    make_fleet: FleetFactory,
    record_property: Callable[[str, object], None],
    copy: str,
) -> None:
    src, dst = clusters
    topic = f"fzombie-{uid()}"
    create_topic(src, topic, PARTITIONS)
    fleet = make_fleet(session_timeout_s=SESSION_S, route=copy_route(copy))
    _start(fleet, ["w1", "w2"])
    with load(src, {topic: PARTITIONS}, RATE) as generator:
        _replicate(fleet, dst, topic)
        in_mode(fleet, topic, PARTITIONS, copy)
        frozen = [p for p, w in owners(fleet, topic).items() if w == "w1"]
        assert frozen
        fleet.signal("w1", signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # The controller sees the session expire and gives w1's partitions to w2.
            assert wait_until(lambda: "w1" not in set(owners(fleet, topic).values()), 60, interval_s=0.1)
            moved_s = time.monotonic() - stopped
            flowing(dst, topic, frozen, PARTITIONS, 60)
            flowing_s = time.monotonic() - stopped
            time.sleep(1)  # w2 copies past where the zombie stopped
        finally:
            fleet.signal("w1", signal.SIGCONT)
        resumed = time.monotonic()
        # The zombie learns its session is gone, stops its partitions and registers again.
        assert wait_until(lambda: "w1" in fleet.workers_in_state("active"), 60), fleet.api().call("GET", "/workers")
        rejoin_s = time.monotonic() - resumed
        assert fleet.processes["w1"].poll() is None, "the resumed worker crashed"
        time.sleep(2)
        print(f"\ncopy modes at the end: {copy_modes(fleet, topic)}")
    check(
        f"sigstop_zombie_{copy}",
        dst,
        topic,
        generator.produced(topic),
        record_property,
        {"moved_s": moved_s, "flowing_s": flowing_s, "rejoin_s": rejoin_s},
    )


def test_kill_9_of_the_leader_controller_with_a_standby(
    clusters: tuple[Props, Props], make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = clusters
    topic, later = f"fleader-{uid()}", f"flater-{uid()}"
    create_topic(src, topic, PARTITIONS)
    create_topic(src, later, 2)
    fleet = make_fleet(session_timeout_s=SESSION_S)
    fleet.start_controller("c1")
    assert wait_until(lambda: fleet.leader() == "c1", 30)
    _start(fleet, ["w1", "w2"], controllers=("c2",))
    with load(src, {topic: PARTITIONS, later: 2}, RATE) as generator:
        _replicate(fleet, dst, topic)
        fleet.signal("c1", signal.SIGKILL)
        killed = time.monotonic()
        assert wait_until(lambda: fleet.leader() == "c2", 60, interval_s=0.1)
        failover_s = time.monotonic() - killed
        # The new leader acts: it assigns a new topic and moves a dead worker's partitions.
        fleet.api("c2").add_topic(later)
        all_flowing(dst, later, 2)
        orphaned = [p for p, w in owners(fleet, topic).items() if w == "w1"]
        fleet.signal("w1", signal.SIGKILL)
        assert wait_until(lambda: set(owners(fleet, topic).values()) == {"w2"}, 60, interval_s=0.1)
        flowing(dst, topic, orphaned, PARTITIONS, 60)
        time.sleep(1)
    check("leader_kill9", dst, topic, generator.produced(topic), record_property, {"failover_s": failover_s})
    check("leader_kill9_new_topic", dst, later, generator.produced(later), record_property)


@COPY_MODES
def test_deleted_destination_topic_is_reported_and_others_keep_flowing(
    clusters: tuple[Props, Props],
    make_fleet: FleetFactory,
    record_property: Callable[[str, object], None],
    copy: str,
) -> None:
    src, dst = clusters
    healthy, doomed = f"fhealthy-{uid()}", f"fdoomed-{uid()}"
    create_topic(src, healthy, 4)
    create_topic(src, doomed, 2)
    fleet = make_fleet(session_timeout_s=SESSION_S, route=copy_route(copy))
    _start(fleet, ["w1", "w2"])
    with load(src, {healthy: 4, doomed: 2}, RATE) as generator:
        _replicate(fleet, dst, healthy, 4)
        _replicate(fleet, dst, doomed, 2)
        in_mode(fleet, doomed, 2, copy)
        admin = clients.admin(dst)  # must outlive its future, or librdkafka destroys the handle
        admin.delete_topics([doomed])[doomed].result(timeout=30)
        deleted = time.monotonic()

        def reported() -> bool:
            detail = fleet.api().call("GET", f"/topics/{doomed}")["partition_detail"]
            return all(str(p.get("state", "")).startswith("failed:") for p in detail)

        assert wait_until(reported, 90, interval_s=0.5), fleet.api().call("GET", f"/topics/{doomed}")
        detected_s = time.monotonic() - deleted
        detail = fleet.api().call("GET", f"/topics/{doomed}")["partition_detail"]
        print(f"\ndeleted destination reported after {detected_s:.1f}s: {detail[0]['state']}")
        for partition in detail:
            assert doomed in partition["state"] and "does not exist" in partition["state"], partition
        # The healthy topic never stops; the doomed one is not silently re-created.
        flowing(dst, healthy, list(range(4)), 4, 30)
        assert doomed not in admin.list_topics(timeout=10).topics
        assert all(p["state"] == "ok" for p in fleet.api().call("GET", f"/topics/{healthy}")["partition_detail"]), (
            fleet.api().call("GET", f"/topics/{healthy}")
        )
    check(
        f"deleted_destination_others_{copy}",
        dst,
        healthy,
        generator.produced(healthy),
        record_property,
        {"detected_s": detected_s},
    )


def _cut_off(fleet: Fleet, worker: str) -> bool:
    log = (Path(fleet.workdir) / f"{worker}.log").read_text(errors="replace")
    return "cut off from the coordination store" in log


def test_zookeeper_restart_while_replicating_loses_nothing(
    sandbox: Sandbox,
    clusters: tuple[Props, Props],
    make_fleet: FleetFactory,
    record_property: Callable[[str, object], None],
) -> None:
    src, dst = clusters
    topic, later = f"fzk-{uid()}", f"fzklater-{uid()}"
    create_topic(src, topic, PARTITIONS)
    create_topic(src, later, 2)
    fleet = make_fleet(session_timeout_s=SESSION_S)
    _start(fleet, ["w1", "w2"])
    with load(src, {topic: PARTITIONS, later: 2}, RATE) as generator:
        _replicate(fleet, dst, topic)
        sandbox.kill_zookeeper()
        killed = time.monotonic()
        try:
            # Without the store no lease is confirmed: each worker holds its fetches and, a third
            # of the session later, stops its partitions by itself (no checkpoint after that).
            assert wait_until(lambda: all(_cut_off(fleet, w) for w in ("w1", "w2")), 30), "no worker stopped itself"
        finally:
            try:
                sandbox.start_zookeeper(timeout_s=60)
            except SandboxError:  # start-up check can race the JVM's exec; it is serving or not
                time.sleep(2)
                sandbox.start_zookeeper(timeout_s=60)
        down_s = time.monotonic() - killed
        # Coordination resumes: a leader, both workers active, and a new topic is assigned.
        assert wait_until(lambda: fleet.leader() == "c1", 90), "no leader after ZooKeeper came back"
        assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 90), fleet.api().call(
            "GET", "/workers"
        )
        resumed_s = time.monotonic() - killed
        fleet.api().add_topic(later)
        all_flowing(dst, later, 2)
        flowing(dst, topic, list(range(PARTITIONS)), PARTITIONS, 30)
        time.sleep(1)
    check(
        "zookeeper_restart",
        dst,
        topic,
        generator.produced(topic),
        record_property,
        {"zookeeper_down_s": down_s, "coordination_back_s": resumed_s},
    )
    check("zookeeper_restart_new_topic", dst, later, generator.produced(later), record_property)
