"""Traffic and tiers against a real 3-broker, 3-rack, 2-disk Kafka cluster.

Traffic is measured the way the balancer does it, with no JMX: log-end offsets, sizes and
committed offsets sampled over a window while a producer writes to a few partitions. Each
broker's first dir (disk-0) is classed SSD, the second (disk-1) HDD; hot partitions start on
HDD and cold ones on SSD, and a plan executed for real must swap them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strait import clients
from strait.balancer import executor, operations
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals
from strait.balancer.invariants import tier_violations, violations
from strait.balancer.model import rack_violations
from strait.balancer.plan import IntraBrokerMove, Plan, apply
from strait.balancer.sampler import measure
from strait.balancer.state import StateStore
from strait.balancer.tiers import DiskClasses
from strait.sandbox import Sandbox, SandboxSpec

pytestmark = pytest.mark.integration

CAPACITY = {"*": 64_000_000}
CLASSES = {"*/disk-0": "ssd", "*/disk-1": "hdd"}
RECORD = b"t" * 1000
HOT = (0, 1)


@pytest.fixture(scope="module")
def cluster(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Iterator[dict[str, Any]]:
    sb = sandbox_factory(SandboxSpec(clusters=("tiers",), brokers=3, racks=3, log_dirs=2, zookeeper=False))
    state = sb.clusters["tiers"]
    props = {"bootstrap.servers": state.bootstrap}
    admin = clients.legacy_admin(props)
    dirs = {b.id: sorted(b.log_dirs) for b in state.brokers}
    yield {"props": props, "admin": admin, "dirs": dirs}
    admin.close()


def _wait(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


def _create(c: dict[str, Any], topic: str, partitions: int) -> None:
    """RF 2 over the three brokers; hot partitions pinned to HDD (disk-1), cold ones to SSD (disk-0)."""
    assignments = {p: [1 + p % 3, 1 + (p + 1) % 3] for p in range(partitions)}
    c["admin"].create_topics({topic: {"num_partitions": -1, "replication_factor": -1, "assignments": assignments}})
    gw = KafkaGateway(c["props"])
    try:
        _wait(lambda: len(gw.replicas([topic])) == partitions, 30, f"topic {topic}")
        wanted = {(topic, p, b): c["dirs"][b][1 if p in HOT else 0] for p, reps in assignments.items() for b in reps}
        gw.move_dirs(wanted)
        _wait(
            lambda: all(
                d.current == wanted[k] and d.future is None
                for k, d in gw.replica_dirs(list(c["dirs"]), [topic]).items()
            ),
            30,
            f"{topic} pinned",
        )
    finally:
        gw.close()


class _Writer:
    """Writes to the hot partitions until stopped; with `group`, a consumer group also reads them
    and commits every half second."""

    def __init__(self, c: dict[str, Any], topic: str, group: str | None = None) -> None:
        self.c, self.topic, self.group = c, topic, group
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        consumer = clients.consumer(
            self.c["props"],
            **{"group.id": self.group, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 500},
        )
        consumer.subscribe([self.topic])
        while not self.stop.is_set():
            consumer.poll(0.2)
        consumer.close()

    def _run(self) -> None:
        producer = clients.producer(self.c["props"], **{"acks": "all", "linger.ms": 5})
        while not self.stop.is_set():
            for p in HOT:
                for _ in range(50):
                    producer.produce(self.topic, RECORD, partition=p)
                    self.sent += 1
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(30)

    def __enter__(self) -> _Writer:
        self.thread.start()
        if self.group:
            self.reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.group:
            self.reader.join(60)


def _seed(c: dict[str, Any], topic: str, partitions: int) -> None:
    producer = clients.producer(c["props"], **{"acks": "all"})
    for p in range(partitions):
        for _ in range(300):
            producer.produce(topic, RECORD, partition=p)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_traffic_is_measured_and_hot_replicas_end_on_ssd(cluster: dict[str, Any]) -> None:
    c = cluster
    topic = "tiered"
    _create(c, topic, 6)
    _seed(c, topic, 6)
    classes = DiskClasses.of(CLASSES)
    gw = KafkaGateway(c["props"], CAPACITY)
    try:
        with _Writer(c, topic) as writer:
            _wait(lambda: writer.sent > 500, 30, "the writer to start")
            model, traffic = measure(gw, c["props"], 5.0)
        rates = {p: traffic.rate((topic, p)) for p in range(6)}
        for p in HOT:
            # ~1000 records/s of 1000 bytes each per hot partition; a loaded machine writes less.
            assert rates[p].bytes_in > 50_000 and rates[p].records_in > 50, rates
        for p in range(2, 6):
            assert rates[p].bytes_in == 0.0, rates

        goals = Goals()
        plan = operations.rebalance(model, goals, traffic, classes)
        assert violations(model, plan, goals) == []
        assert tier_violations(model, plan, goals, traffic, classes) == []
        assert not [w for w in plan.warnings if w.startswith("tiers:")]
        # Every replica of the topic starts on the wrong tier: each partition has a move (intra-broker
        # to its SSD or HDD dir, or to another broker where the traffic phase sends it).
        assert {m.partition for m in plan.moves if m.topic == topic} == set(range(6)), plan.moves
        assert any(isinstance(m, IntraBrokerMove) and m.topic == topic for m in plan.moves)

        final = executor.start(gw, StateStore(c["props"]), plan, executor.Options(throttle=50_000_000)).run()
        assert final.status == "done", final.moves
        after = gw.load_model()
    finally:
        gw.close()
    for p in range(6):
        part = after.partitions[(topic, p)]
        want = "disk-0" if p in HOT else "disk-1"
        assert all(d.endswith(want) for d in part.dirs), (p, part)
    assert not [p.name for p in after.partitions.values() if rack_violations(after, p)]
    for d in after.all_dirs():
        assert d.used <= int(64_000_000 * goals.capacity_limit), d


def test_cli_plan_shows_traffic_per_broker_before_and_after(cluster: dict[str, Any]) -> None:
    c = cluster
    topic = "shown"
    _create(c, topic, 3)
    args = [
        "plan",
        "--bootstrap",
        c["props"]["bootstrap.servers"],
        "--capacity",
        "*=64MB",
        "--disk-class",
        "*/disk-0=ssd",
        "--disk-class",
        "*/disk-1=hdd",
        "--traffic-window",
        "4",
    ]
    with _Writer(c, topic, group="reader"):
        time.sleep(3.0)  # the group joins and catches up
        shown = _cli(*args)
        as_json = _cli(*args, "--json")
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)  # the tables, for whoever reads the test log
    assert "traffic per broker" in shown.stdout and "leader bytes in" in shown.stdout, shown.stdout
    assert as_json.returncode == 0, as_json.stderr
    plan = json.loads(as_json.stdout)
    loads = plan["stats"]["traffic_brokers"]
    assert set(loads) == {"net_in", "net_out", "leader_in"}
    # Partitions 0 and 1 are written, led by brokers 1 and 2, followed by 2 and 3.
    assert loads["leader_in"]["1"][0] > 0 and loads["leader_in"]["2"][0] > 0, loads
    assert all(v[0] > 0 for v in loads["net_in"].values()), loads
    # Broker 1 leads partition 0: it sends its writes to one follower and to the reading group,
    # whose committed offsets moved; without the reads net out would equal leader bytes in.
    assert loads["net_out"]["1"][0] > 1.5 * loads["leader_in"]["1"][0], loads
    # Once the plan is done, the hot partitions' replicas sit on SSD (disk-0), the cold one's on HDD.
    gw = KafkaGateway(c["props"], CAPACITY)
    try:
        after = apply(gw.load_model(), Plan.from_dict(plan).moves)
    finally:
        gw.close()
    for p in range(3):
        want = "disk-0" if p in HOT else "disk-1"
        assert all(d.endswith(want) for d in after.partitions[(topic, p)].dirs), (p, plan["moves"])
    bad = _cli("plan", "--bootstrap", c["props"]["bootstrap.servers"], "--disk-class", "*/disk-0=nvme")
    assert bad.returncode == 2 and "must be one of ssd, hdd" in bad.stderr


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from strait.cli.balance import app; app()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
