"""Broker restarts under load, on multi-broker clusters with replicated topics.

One sandbox for the module: clusters `fsrc` and `fdst`, three brokers each, topics with
replication factor 3 and min.insync.replicas 2 on both sides. A broker that is not the KRaft
controller (broker 1 is) is stopped cleanly and started again, first on the source, then on
the destination, while a fleet replicates; each test ends with the verifier: 0 lost.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox, SandboxSpec
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
    owners,
)

pytestmark = pytest.mark.integration

PARTITIONS = 6
RATE = 50
REPLICATED = {"min.insync.replicas": "2"}

FleetFactory = Callable[..., Fleet]


@pytest.fixture(scope="module")
def multi(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Sandbox:
    return sandbox_factory(
        SandboxSpec(clusters=("fsrc", "fdst"), brokers=3, log_dirs=1, zookeeper=True, startup_timeout_s=180)
    )


@pytest.fixture
def make_fleet(multi: Sandbox, tmp_path: Path) -> Iterator[FleetFactory]:
    with fleets(multi, tmp_path, src="fsrc", dst="fdst") as make:
        yield make


def _leaders(props: dict[str, str], topic: str) -> dict[int, int]:
    from strait import clients

    metadata = clients.admin(props).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in metadata.topics[topic].partitions.items()}


def _restart_under_load(
    multi: Sandbox,
    make_fleet: FleetFactory,
    record_property: Callable[[str, object], None],
    *,
    cluster: str,
    broker: int,
    scenario: str,
    copy: str,
) -> None:
    src, dst = multi.clusters["fsrc"].props(), multi.clusters["fdst"].props()
    topic = f"{scenario}-{uuid.uuid4().hex[:6]}"
    create_topic(src, topic, PARTITIONS, replicas=3, configs=REPLICATED)
    # The destination topic exists beforehand with the durability wanted there; the copier uses it.
    create_topic(dst, topic, PARTITIONS, replicas=3, configs=REPLICATED)
    fleet = make_fleet(session_timeout_s=3.0, route={"replication_factor": 3, **copy_route(copy)})
    fleet.start_controller("c1")
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 60)
    props = multi.clusters[cluster].props()
    with load(src, {topic: PARTITIONS}, RATE) as generator:
        fleet.api().add_topic(topic)
        all_flowing(dst, topic, PARTITIONS)
        assert wait_until(lambda: all(owners(fleet, topic).get(p) for p in range(PARTITIONS)), 30)
        in_mode(fleet, topic, PARTITIONS, copy)
        led = sorted(p for p, leader in _leaders(props, topic).items() if leader == broker)
        print(f"\n{cluster} broker {broker} leads partitions {led} of {topic}; stopping it")
        stopped = time.monotonic()
        multi.stop_broker(cluster, broker)
        stop_s = time.monotonic() - stopped
        # Two replicas of three stay in sync: the copy goes on while the broker is down.
        flowing(dst, topic, list(range(PARTITIONS)), PARTITIONS, 60)
        down_flowing_s = time.monotonic() - stopped
        time.sleep(1)
        multi.start_broker(cluster, broker, timeout_s=120)
        restarted_s = time.monotonic() - stopped
        flowing(dst, topic, list(range(PARTITIONS)), PARTITIONS, 60)
        time.sleep(2)
        modes = copy_modes(fleet, topic)
    print(f"\ncopy modes at the end: {modes}")
    assert fleet.workers_in_state("active") == {"w1", "w2"}
    check(
        scenario,
        dst,
        topic,
        generator.produced(topic),
        record_property,
        {"stop_s": stop_s, "flowing_while_down_s": down_flowing_s, "broker_back_s": restarted_s},
    )
    assert not generator.errors, generator.errors[:5]


# Both copy modes: record by record, and whole batches, whose fetches and produces follow the
# leaders themselves (strait.worker.batch.link) rather than librdkafka's.
COPY_MODES = pytest.mark.parametrize("copy", ["record", "batch"])


@COPY_MODES
def test_source_broker_restart_loses_nothing(
    multi: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None], copy: str
) -> None:
    _restart_under_load(
        multi, make_fleet, record_property, cluster="fsrc", broker=2, scenario=f"src_broker_restart_{copy}", copy=copy
    )


@COPY_MODES
def test_destination_broker_restart_loses_nothing(
    multi: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None], copy: str
) -> None:
    _restart_under_load(
        multi, make_fleet, record_property, cluster="fdst", broker=3, scenario=f"dst_broker_restart_{copy}", copy=copy
    )
