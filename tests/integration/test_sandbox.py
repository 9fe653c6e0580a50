"""The sandbox runs real Kafka and ZooKeeper: data round-trips, and fault controls work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from strait import clients
from strait.sandbox import Sandbox, SandboxError, SandboxSpec

pytestmark = pytest.mark.integration

RECORDS = 10_000


def _create_topic(props: dict[str, str], topic: str, partitions: int) -> None:
    admin = clients.admin(props)  # must outlive the future, or librdkafka destroys the handle
    futures = admin.create_topics([NewTopic(topic, partitions, 1)])
    futures[topic].result(timeout=30)


@pytest.mark.parametrize("cluster", ["src", "dst"])
def test_keyed_records_round_trip(sandbox: Sandbox, cluster: str) -> None:
    props = sandbox.clusters[cluster].props()
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    _create_topic(props, topic, partitions=4)

    producer = clients.producer(props, **{"enable.idempotence": True, "linger.ms": 5})
    sent = {}
    for i in range(RECORDS):
        key, value = f"key-{i % 97}", f"value-{i}"
        sent[value] = key
        producer.produce(topic, key=key, value=value)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    consumer = clients.consumer(
        props, **{"group.id": f"smoke-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    received: dict[str, str] = {}
    idle = 0
    while len(received) < RECORDS and idle < 20:
        batch = consumer.consume(1000, timeout=1)
        idle = 0 if batch else idle + 1
        for msg in batch:
            assert msg.error() is None
            received[msg.value().decode()] = msg.key().decode()
    consumer.close()
    assert received == sent


def test_zookeeper_serves_and_survives_restart(sandbox: Sandbox) -> None:
    zk = KazooClient(hosts=sandbox.zookeeper, timeout=10)
    zk.start(timeout=10)
    path = f"/smoke/{uuid.uuid4().hex}"
    zk.create(path, b"hello", makepath=True)
    zk.stop()
    sandbox.kill_zookeeper()
    sandbox.start_zookeeper()
    zk = KazooClient(hosts=sandbox.zookeeper, timeout=10)
    zk.start(timeout=10)
    try:
        assert zk.get(path)[0] == b"hello"
    finally:
        zk.stop()


def test_rack_sandbox_reports_racks_and_log_dirs(sandbox_factory) -> None:  # type: ignore[no-untyped-def]
    sb = sandbox_factory(SandboxSpec(clusters=("big",), brokers=4, racks=2, log_dirs=2, zookeeper=False))
    description = sb.describe()["clusters"]["big"]
    assert [b["rack"] for b in description["brokers"]] == ["r1", "r2", "r1", "r2"]
    admin = clients.legacy_admin(sb.clusters["big"].props())
    try:
        reported = {
            entry["broker"]: sorted(d["log_dir"] for d in entry["log_dirs"]) for entry in admin.describe_log_dirs()
        }
    finally:
        admin.close()
    assert reported == {b["id"]: sorted(b["log_dirs"]) for b in description["brokers"]}

    # A broker other than the KRaft controller (1) can be killed and started again.
    sb.kill_broker("big", 3)
    assert not sb.describe()["clusters"]["big"]["brokers"][2]["running"]
    sb.start_broker("big", 3)
    assert sb.describe()["clusters"]["big"]["brokers"][2]["running"]


def test_cli_up_failure_names_cause_and_leaves_nothing(tmp_path: Path, sandbox: Sandbox) -> None:
    # Ask for the port the running ZooKeeper already uses: 'up' must refuse and start nothing.
    taken = sandbox.zookeeper.split(":")[1]
    state_dir = tmp_path / "failing"
    result = subprocess.run(
        [sys.executable, "-m", "strait", "sandbox", "up", "--state-dir", str(state_dir), "--zookeeper-port", taken],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert result.returncode != 0
    assert f"port {taken}" in result.stderr and "already in use" in result.stderr
    state = state_dir / "state.json"
    if state.exists():
        assert Sandbox.load(state_dir).running_pids() == []


def test_bad_spec_is_refused() -> None:
    with pytest.raises(SandboxError, match="--racks"):
        SandboxSpec(brokers=2, racks=3).validate()


def test_cli_up_json_and_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "cli"
    up = subprocess.run(
        [sys.executable, "-m", "strait", "sandbox", "up", "--clusters", "a", "--state-dir", str(state_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert up.returncode == 0, up.stderr
    description = json.loads(up.stdout)
    assert set(description) == {"zookeeper", "clusters"}
    assert description["zookeeper"] is None  # none unless asked for: Strait coordinates on Kafka by default
    assert description["clusters"]["a"]["brokers"][0]["id"] == 1
    pids = Sandbox.load(state_dir).running_pids()
    assert len(pids) == 1
    down = subprocess.run(
        [sys.executable, "-m", "strait", "sandbox", "down", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    assert not state_dir.exists()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
