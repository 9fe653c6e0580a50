"""The balance watch mode against a real 3-broker, 3-rack, 2-disk Kafka cluster.

Each test makes its own skew: a topic whose partitions all sit on one broker's first disk, filled
with a few MB of records. The watcher (the thread the leading controller runs) finds the skew,
alerts and proposes a plan; with `execute` on, the plan runs through the executor and the skew
goes down; a person's cancel holds the watch back; a broker that dies has its replicas moved to
the others with a throttle set (the last test: broker 3 stays dead). Disk sizes are configured (`balance.capacities`)
because every sandbox dir shares one filesystem.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from strait import clients
from strait.balancer import imbalance, service, watch
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals
from strait.balancer.settings import BalanceConfig
from strait.balancer.state import TOPIC, Execution, StateStore
from strait.balancer.watcher import BalanceWatcher
from strait.demo import Fleet
from strait.metrics.balance import WatchCollector
from strait.sandbox import Sandbox, SandboxSpec
from strait.web.balance import mount_balance_watch
from tests.integration.balancing import wait

pytestmark = pytest.mark.integration

NAME = "watch"
CAPACITY = {"*": 16_000_000}
RECORD = b"w" * 1000
ENDED = ("done", "failed", "cancelled")


@pytest.fixture(scope="module")
def cluster(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Iterator[dict[str, Any]]:
    sb = sandbox_factory(SandboxSpec(clusters=(NAME,), brokers=3, racks=3, log_dirs=2, zookeeper=False))
    state = sb.clusters[NAME]
    props = state.props()
    admin = clients.legacy_admin(props)
    yield {"props": props, "admin": admin, "dirs": {b.id: list(b.log_dirs) for b in state.brokers}, "sandbox": sb}
    admin.close()


def settings(**options: Any) -> BalanceConfig:
    return BalanceConfig(capacities={NAME: CAPACITY}, clusters=[NAME], watch=True, interval_s=1.0, **options)


_wait = partial(wait, every=0.5)


def assess(c: dict[str, Any]) -> imbalance.Assessment:
    gateway = KafkaGateway(c["props"], settings().capacities_of(NAME))
    try:
        return imbalance.assess(gateway.load_model(), Goals(threshold=0.10))
    finally:
        gateway.close()


def skew(c: dict[str, Any], topic: str, broker: int, records: int = 3000) -> None:
    """A topic of 4 partitions, every replica on `broker`'s first disk, `records` KB in all."""
    c["admin"].create_topics(
        {topic: {"num_partitions": -1, "replication_factor": -1, "assignments": {p: [broker] for p in range(4)}}}
    )
    first = c["dirs"][broker][0]
    gateway = KafkaGateway(c["props"])
    try:
        _wait(lambda: len(gateway.replicas([topic])) == 4, 60, f"topic {topic}")
        gateway.move_dirs({(topic, p, broker): first for p in range(4)})
        _wait(
            lambda: all(
                d.current == first and d.future is None for d in gateway.replica_dirs([broker], [topic]).values()
            ),
            60,
            f"{topic} on {first}",
        )
    finally:
        gateway.close()
    producer = clients.producer(c["props"], **{"acks": "all", "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, RECORD, partition=i % 4)
        producer.poll(0)
    assert producer.flush(60) == 0


def ended_execution(c: dict[str, Any], execution_id: str) -> Execution | None:
    store = StateStore(c["props"])
    try:
        found = store.load(execution_id)
    finally:
        store.close()
    return found if found is not None and found.finished() else None


def state_topic_exists(c: dict[str, Any]) -> bool:
    return TOPIC in clients.admin(c["props"]).list_topics(timeout=10).topics


def running(watcher: BalanceWatcher) -> threading.Thread:
    thread = threading.Thread(target=watcher.run, name="balance-watch-test", daemon=True)
    thread.start()
    return thread


def test_watch_alerts_and_proposes_a_plan_without_executing(cluster: dict[str, Any]) -> None:
    assert assess(cluster).balanced  # a fresh cluster: nothing to find yet
    watcher = BalanceWatcher({NAME: cluster["props"]}, settings(after_s=3), leading=lambda: True)
    thread = running(watcher)
    try:
        _wait(lambda: watcher.view()[NAME]["phase"] == watch.BALANCED, 120, "the watch to find the cluster balanced")
        assert watcher.proposal(NAME) is None
        skew(cluster, "skew-a", broker=1)
        skewed = time.monotonic()
        proposal = _wait(lambda: watcher.proposal(NAME), 300, "a proposal")
        took = time.monotonic() - skewed
        print(f"\nskew to proposal: {took:.1f} s (after_s 3, interval 1 s; load average {os.getloadavg()[0]:.1f})")
    finally:
        watcher.stop()
        thread.join(timeout=60)
    row = watcher.view()[NAME]
    assert row["alert"] and "disk_spread" in row["reasons"] and row["out_of_balance_s"] >= 3
    assert proposal["moves"] > 0 and not proposal["executed"]
    assert proposal["spread_after"] < proposal["spread_before"]
    assert not state_topic_exists(cluster)  # watching alone writes nothing to the cluster
    http = TestClient(_app(watcher))
    served = http.get(f"/balance/{NAME}/proposal").json()
    assert served["id"] == proposal["id"] and served["plan"]["moves"]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(watcher.view))
    text = generate_latest(registry).decode()
    assert f'strait_balance_alert{{cluster="{NAME}"}} 1.0' in text
    assert f'strait_balance_out_of_balance{{cluster="{NAME}",reason="disk_spread"}} 1.0' in text
    # A controller that does not lead watches nothing.
    standby = BalanceWatcher({NAME: cluster["props"]}, settings(after_s=0), leading=lambda: False)
    standby.check(NAME)
    assert standby.view()[NAME]["phase"] == watch.STANDBY and standby.proposal(NAME) is None


def test_watch_executes_its_plan_and_the_skew_goes_down(cluster: dict[str, Any]) -> None:
    skew(cluster, "skew-b", broker=1)
    before = assess(cluster)
    assert "disk_spread" in before.reasons and before.spread is not None
    watcher = BalanceWatcher(
        {NAME: cluster["props"]}, settings(after_s=2, execute=True, throttle="20MB"), leading=lambda: True
    )
    started = time.monotonic()
    thread = running(watcher)
    try:
        execution = _wait(lambda: watcher.view()[NAME]["execution"], 300, "the watch to start an execution")
        proposed = time.monotonic() - started
        final = _wait(lambda: ended_execution(cluster, execution), 600, "the execution to end")
        ended = time.monotonic() - started
    finally:
        watcher.stop()
        thread.join(timeout=60)
    assert final.status == "done", final.progress
    after = assess(cluster)
    assert after.spread is not None and after.spread < before.spread
    print(
        f"\nwatch with execute: execution started {proposed:.1f} s and done {ended:.1f} s after the watch began; "
        f"disk spread {before.spread:.3f} -> {after.spread:.3f} (load average {os.getloadavg()[0]:.1f})"
    )


def test_a_person_cancelling_holds_the_watch_until_the_imbalance_changes(cluster: dict[str, Any]) -> None:
    # Whatever the previous test's watcher started has ended.
    _wait(lambda: (found := service.current(cluster["props"])) is None or found["status"] in ENDED, 600, "quiet")
    skew(cluster, "skew-c", broker=2, records=4000)
    assert "disk_spread" in assess(cluster).reasons
    # A slow throttle keeps the execution in flight long enough to cancel it.
    watcher = BalanceWatcher(
        {NAME: cluster["props"]}, settings(after_s=0, execute=True, throttle="20KB"), leading=lambda: True
    )
    watcher.check(NAME)  # out of balance for 0 s is enough: proposes and executes at once
    execution = watcher.view()[NAME]["execution"]
    assert execution is not None
    _wait(lambda: (found := service.current(cluster["props"])) and found["status"] == "running", 120, "it to run")
    final = service.cancel(cluster["props"], wait=180)
    assert final is not None and final["status"] == "cancelled"
    for _ in range(3):
        watcher.check(NAME)
        row = watcher.view()[NAME]
        assert row["phase"] == watch.HELD and row["held"] and "disk_spread" in row["reasons"], row
    current = service.current(cluster["props"])
    assert current is not None and current["execution_id"] == execution  # nothing new was started
    # A new leader honours the cancel too.
    successor = BalanceWatcher(
        {NAME: cluster["props"]}, settings(after_s=0, execute=True, throttle="20KB"), leading=lambda: True
    )
    successor.check(NAME)
    assert successor.view()[NAME]["phase"] == watch.HELD
    assert service.current(cluster["props"])["execution_id"] == execution  # type: ignore[index]


def _app(watcher: BalanceWatcher) -> FastAPI:
    app = FastAPI()
    mount_balance_watch(app, watcher)
    return app


@dataclass
class WatchingFleet(Fleet):
    """A controller whose configuration turns the watch mode on for the test's cluster."""

    balance: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "balance": self.balance}


def test_the_controller_process_runs_the_watch_when_leading(
    cluster: dict[str, Any], sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> None:
    skew(cluster, "skew-d", broker=1)  # out of balance whatever the earlier tests left
    fleet = WatchingFleet(
        zookeeper=sandbox.zookeeper,
        clusters={
            "src": sandbox.clusters["src"].props(),
            "dst": sandbox.clusters["dst"].props(),
            NAME: cluster["props"],
        },
        routes=[{"name": "watch-route", "source": "src", "destination": "dst"}],
        workdir=tmp_path_factory.mktemp("watch-fleet"),
        balance={"capacities": {NAME: CAPACITY}, "clusters": [NAME], "watch": True, "after_s": 1, "interval_s": 1},
    )
    try:
        url = fleet.start_controller("c1")
        row = _wait(
            lambda: (
                (found := httpx.get(f"{url}/balance/watch", timeout=30).json().get(NAME))
                and found["proposal"]
                and found
            ),
            300,
            "the controller's watch to propose",
        )
        assert row["alert"] and "disk_spread" in row["reasons"]
        served = httpx.get(f"{url}/balance/{NAME}/proposal", timeout=30)
        assert served.status_code == 200 and served.json()["plan"]["moves"]
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        assert f'strait_balance_alert{{cluster="{NAME}"}} 1.0' in metrics
        view = httpx.get(f"{url}/observability", timeout=30).json()
        assert view["balance_watch"][NAME]["alert"]
    finally:
        fleet.stop()


def test_a_gone_broker_is_found_and_its_replicas_moved(cluster: dict[str, Any]) -> None:
    topic = "spread"
    assignments = {0: [1, 3], 1: [3, 2], 2: [2, 3], 3: [3, 1]}
    cluster["admin"].create_topics(
        {topic: {"num_partitions": -1, "replication_factor": -1, "assignments": assignments}}
    )
    producer = clients.producer(cluster["props"], **{"acks": "all", "linger.ms": 5})
    for i in range(400):
        producer.produce(topic, RECORD, partition=i % 4)
        producer.poll(0)
    assert producer.flush(60) == 0
    # With a throttle: rates go to the live brokers only (a dead one would refuse the request).
    watcher = BalanceWatcher(
        {NAME: cluster["props"]}, settings(after_s=2, execute=True, throttle="20MB"), leading=lambda: True
    )
    cluster["sandbox"].kill_broker(NAME, 3)
    killed = time.monotonic()
    thread = running(watcher)
    try:
        _wait(lambda: "broker_gone" in watcher.view()[NAME]["reasons"], 300, "the watch to find broker 3 gone")
        found = time.monotonic() - killed
        execution = _wait(lambda: watcher.view()[NAME]["execution"], 300, "the watch to start an execution")
        proposed = time.monotonic() - killed
        final = _wait(lambda: ended_execution(cluster, execution), 600, "the execution to end")
        ended = time.monotonic() - killed
    finally:
        watcher.stop()
        thread.join(timeout=60)
    assert final.status == "done", final.progress
    assert final.options.get("throttle") == 20_000_000, final.options
    assert watcher.view()[NAME]["assessment"]["gone_brokers"] == [3]
    gateway = KafkaGateway(cluster["props"])
    try:
        replicas = gateway.replicas([topic])
    finally:
        gateway.close()
    assert len(replicas) == 4 and all(3 not in r and len(r) == 2 for r in replicas.values()), replicas
    print(
        f"\nbroker 3 killed: found gone after {found:.1f} s, execution started after {proposed:.1f} s, "
        f"done after {ended:.1f} s (load average {os.getloadavg()[0]:.1f})"
    )
