"""Replication through real controller and worker processes: topics come and go, nothing is lost.

Each test runs its own fleet on a private ZooKeeper root of the session's sandbox (or, for the
tests marked to run on both stores, also on private coordination topics of the destination
cluster), with unique topic names, so tests do not see each other's state.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource, NewPartitions  # type: ignore[attr-defined]

from strait import clients
from strait.demo import Fleet, Generator, create_topic, wait_until
from strait.sandbox import Sandbox
from tests.integration.faults import copy_route, in_mode
from tests.integration.verify import copied_counts, verify

pytestmark = pytest.mark.integration

FleetFactory = Callable[..., Fleet]
MAIN_ROUTE = {"name": "main", "source": "src", "destination": "dst"}


def uid() -> str:
    return uuid.uuid4().hex[:6]


# The tests that run on both coordination stores (the rest on ZooKeeper; the Kafka store's own
# fleet faults are in test_coordination_fleet.py and its chaos run in test_chaos.py).
both_stores = pytest.mark.parametrize("store", ["zookeeper", "kafka"])


@pytest.fixture
def make_fleet(sandbox: Sandbox, tmp_path: Path, store: str) -> Iterator[FleetFactory]:
    fleets: list[Fleet] = []

    def make(routes: list[dict[str, Any]] | None = None, **options: Any) -> Fleet:
        if store == "kafka":
            options.setdefault("coordination_cluster", "dst")
        fleet = Fleet(
            zookeeper=sandbox.zookeeper,
            clusters={"src": sandbox.clusters["src"].props(), "dst": sandbox.clusters["dst"].props()},
            routes=routes or [MAIN_ROUTE],
            workdir=tmp_path / f"fleet-{len(fleets)}",
            **options,
        )
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.stop(timeout_s=30)


def assigned(fleet: Fleet, route: str, topic: str) -> set[int]:
    prefix = f"{route}/{topic}/"
    return {
        int(k[len(prefix) :]) for k, w in fleet.api().call("GET", "/assignment").items() if k.startswith(prefix) and w
    }


def partition_detail(fleet: Fleet, topic: str) -> object:
    """What the fleet reports per partition of `topic` (owner, state, checkpoint, lag), for failure
    messages: a lost run with the checkpoint at the source end is a skip, one with lag a stall."""
    try:
        return fleet.api().call("GET", f"/topics/{topic}")["partition_detail"]
    except Exception as exc:  # diagnostics only: never hide the real failure
        return f"unavailable: {exc}"


@both_stores
def test_adding_a_topic_disturbs_no_other_and_removing_stops_it(
    sandbox: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    steady, added = f"steady-{uid()}", f"added-{uid()}"
    create_topic(src, steady, 4)
    create_topic(src, added, 3, configs={"retention.ms": "7200000", "cleanup.policy": "delete"})
    fleet = make_fleet()
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    generator = Generator(src, rate_per_partition=100).start()
    generator.add(steady, 4)
    generator.add(added, 3)
    try:
        fleet.api().add_topic(steady)
        assert wait_until(lambda: all(n > 0 for n in copied_counts(dst, steady, 4).values()), 30)

        def settled() -> bool:
            # w1 may start copying before w2 registered: the spread onto w2 is a hand-over
            # (written unowned, then to w2), and must be over before the comparison starts.
            owners = fleet.api().call("GET", "/assignment")
            return len(owners) == 4 and None not in owners.values() and len(set(owners.values())) == 2

        assert wait_until(settled, 60), fleet.api().call("GET", "/assignment")
        before = fleet.api().call("GET", "/assignment")

        started = time.monotonic()
        assert fleet.api().add_topic(added)["partitions"] == 3
        assert wait_until(lambda: sum(copied_counts(dst, added, 3).values()) > 0, 30, interval_s=0.05)
        first_record_s = time.monotonic() - started
        record_property("add_topic_to_first_record_s", round(first_record_s, 2))
        print(f"\nMEASURE add-topic -> first record in destination: {first_record_s:.2f}s")

        after = fleet.api().call("GET", "/assignment")
        assert {k: after[k] for k in before} == before, "adding a topic moved an existing partition"

        # The destination topic was created like the source one.
        admin = clients.admin(dst)
        assert len(admin.list_topics(added, timeout=10).topics[added].partitions) == 3
        resource = ConfigResource("TOPIC", added)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["retention.ms"].value == "7200000"

        fleet.api().call("DELETE", f"/topics/{added}")
        assert wait_until(lambda: not assigned(fleet, "main", added), 15)
        assert wait_until(
            lambda: not any(added in h for w in fleet.api().call("GET", "/workers") for h in w["holding"]), 15
        )
        frozen, source_at_freeze = copied_counts(dst, added, 3), copied_counts(src, added, 3)
        # Barrier: the generator has written to the removed topic since it was released. Then, once
        # the steady topic's records written after that are copied, the workers have had every
        # chance to copy the removed topic's new records.
        assert wait_until(lambda: copied_counts(src, added, 3) != source_at_freeze, 30), (
            "nothing was written to the removed topic after its release"
        )
        steady_now = copied_counts(src, steady, 4)
        assert wait_until(lambda: all(n >= steady_now[p] for p, n in copied_counts(dst, steady, 4).items()), 60)
        assert copied_counts(dst, added, 3) == frozen, "a removed topic is still being copied"
        assert added not in {t["topic"] for t in fleet.api().call("GET", "/topics")}
    finally:
        generator.stop()
    report = verify(dst, steady, generator.produced(steady))
    assert report.lost == 0 and report.exact, report
    # The removed topic's copy is a clean prefix: what was copied is complete up to the stop.
    partial = verify(dst, added, {p: n for p, n in frozen.items()}, timeout_s=10)
    assert partial.duplicates == 0 and partial.out_of_order == 0 and partial.bad_metadata == 0


def test_pattern_topics_and_new_partitions_are_picked_up(
    sandbox: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    prefix = f"pat-{uid()}"
    topic = f"{prefix}-orders"
    fleet = make_fleet(routes=[{**MAIN_ROUTE, "include": [f"{prefix}-.*"], "exclude": [".*-tmp"]}])
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    generator = Generator(src, rate_per_partition=50).start()
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 30)
    try:
        create_topic(src, f"{prefix}-tmp", 1)
        started = time.monotonic()
        create_topic(src, topic, 2)
        generator.add(topic, 2)
        assert wait_until(lambda: sum(copied_counts(dst, topic, 2).values()) > 0, 20, interval_s=0.1)
        print(f"\nMEASURE pattern topic created -> first record in destination: {time.monotonic() - started:.2f}s")
        topics = {t["topic"]: t for t in fleet.api().call("GET", "/topics")}
        assert topics[topic]["origin"] == "pattern" and f"{prefix}-tmp" not in topics

        admin = clients.admin(src)  # must outlive its future, or librdkafka destroys the handle
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
        grown = time.monotonic()
        generator.add(topic, 4)
        assert wait_until(lambda: assigned(fleet, "main", topic) == {0, 1, 2, 3}, 15)
        assert wait_until(lambda: all(n > 0 for n in copied_counts(dst, topic, 4).values()), 30, interval_s=0.1)
        record_property("partition_expansion_to_first_record_s", round(time.monotonic() - grown, 2))
        print(f"MEASURE partition expansion -> new partitions flowing: {time.monotonic() - grown:.2f}s")
        generator.pause(topic)
        time.sleep(0.5)
        report = verify(dst, topic, generator.produced(topic), source=src)
        assert report.exact, (generator.errors[:5], report, partition_detail(fleet, topic))

        # Removed explicitly: a pattern does not bring it back...
        fleet.api().call("DELETE", f"/topics/{topic}")
        generator.add(topic, 4)
        # A topic matching the pattern, created after the removal, is picked up by a discovery
        # turn that also saw the removed one.
        create_topic(src, f"{prefix}-later", 1)
        assert wait_until(lambda: f"{prefix}-later" in {t["topic"] for t in fleet.api().call("GET", "/topics")}, 30)
        assert topic not in {t["topic"] for t in fleet.api().call("GET", "/topics")}
        # ...until it is added again explicitly.
        assert fleet.api().add_topic(topic)["origin"] == "api"
        assert wait_until(lambda: assigned(fleet, "main", topic) == {0, 1, 2, 3}, 15)
    finally:
        generator.stop()


@both_stores
def test_two_routes_at_once(sandbox: Sandbox, make_fleet: FleetFactory) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    forward, backward = f"fwd-{uid()}", f"back-{uid()}"
    create_topic(src, forward, 3)
    create_topic(dst, backward, 2)
    fleet = make_fleet(
        routes=[
            {"name": "src-dst", "source": "src", "destination": "dst"},
            {"name": "dst-src", "source": "dst", "destination": "src"},
        ]
    )
    fleet.start_controller()
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    to_dst, to_src = Generator(src).start(), Generator(dst).start()
    to_dst.add(forward, 3)
    to_src.add(backward, 2)
    try:
        fleet.api().add_topic(forward, route="src-dst", destination_topic=f"{forward}-mirror")
        fleet.api().add_topic(backward, route="dst-src")
        assert wait_until(lambda: sum(copied_counts(dst, f"{forward}-mirror", 3).values()) > 0, 30)
        assert wait_until(lambda: sum(copied_counts(src, backward, 2).values()) > 0, 30)
        time.sleep(2)
    finally:
        to_dst.stop()
        to_src.stop()
    assert verify(dst, f"{forward}-mirror", to_dst.produced(forward)).exact
    assert verify(src, backward, to_src.produced(backward)).exact
    workers = fleet.api().call("GET", "/workers")
    assert {r for w in workers for r in w["routes"]} == {"src-dst", "dst-src"}


# Both copy modes: a batch-mode partition resolves `latest` and starts mid-log the same way.
@pytest.mark.parametrize("copy", ["record", "batch"])
def test_partitions_added_to_a_topic_started_at_latest_are_copied_from_their_first_record(
    sandbox: Sandbox, make_fleet: FleetFactory, copy: str
) -> None:
    # `start` applies to the partitions the topic had when added: inherited by new partitions,
    # `latest` would skip every record written to them before a worker picked them up.
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    topic = f"latest-grow-{uid()}"
    create_topic(src, topic, 2)
    fleet = make_fleet([{**MAIN_ROUTE, **copy_route(copy)}])
    fleet.start_controller()
    fleet.start_worker("w1")
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1"}, 30)
    fleet.api().add_topic(topic, start="latest")
    assert wait_until(lambda: assigned(fleet, "main", topic) == {0, 1}, 30)
    producer = clients.producer(src)

    def flowing() -> bool:
        # `latest` is resolved when the worker starts a partition: keep writing until it has.
        for partition in (0, 1):
            producer.produce(topic, b"after-add", partition=partition)
        producer.flush(10)
        return all(n >= 1 for n in copied_counts(dst, topic, 2).values())

    assert wait_until(flowing, 60, interval_s=0.5)

    admin = clients.admin(src)
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
    producer = clients.producer(src)  # a fresh one knows the new partitions
    assert wait_until(lambda: len(producer.list_topics(topic, timeout=5).topics[topic].partitions) == 4, 30)
    # Written at once, before any worker can have started the new partitions.
    for partition in (2, 3):
        for i in range(1000):
            producer.produce(topic, f"new-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    assert wait_until(lambda: assigned(fleet, "main", topic) == {0, 1, 2, 3}, 30)
    assert wait_until(
        lambda: copied_counts(dst, topic, 4).get(2) == 1000 and copied_counts(dst, topic, 4).get(3) == 1000, 60
    )
    counts = copied_counts(dst, topic, 4)
    assert counts[2] == 1000 and counts[3] == 1000, counts
    in_mode(fleet, topic, 4, copy)
