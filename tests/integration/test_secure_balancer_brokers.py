"""Moves between brokers on a secured cluster, as the least-privilege user `strait`.

The session's secure sandbox has one broker per cluster, so only moves between disks run there.
This module starts a two-broker cluster speaking SASL_SSL with SCRAM-SHA-512 (the brokers
replicate to each other over that listener, as the user `broker`), and takes from `strait` every
ACL but the balancer role's. As `strait`: a move of two partitions from broker 1 to broker 2 runs
under a low throttle (the throttle rates and throttled replicas are set on both brokers and the
topic while the copy is in flight), is cancelled mid-copy (nothing left behind, the replicas stay
on broker 1), then runs again to the end (the replicas live on broker 2 alone, every record is
still there, no throttle is left).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.balancer import executor
from strait.balancer.gateway import KafkaGateway
from strait.balancer.plan import InterBrokerMove, Plan
from strait.balancer.state import StateStore
from strait.balancer.throttle import (
    BROKER_KEYS,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    TOPIC_KEYS,
)
from strait.sandbox import Sandbox, SandboxSpec
from strait.security import acls
from tests.integration.balancing import wait
from tests.integration.test_secure_balancer import PRINCIPAL, _filter, _holds_exactly

pytestmark = pytest.mark.integration

PARTITIONS = 2
RECORDS = 1500  # of 1 KB per partition: 1.5 MB to move each
RECORD = b"m" * 1000
SLOW = 20_000  # bytes/s: a move stays in flight long after its first fetch
BROKERS = (1, 2)


_wait = partial(wait, every=0.3)


@pytest.fixture(scope="module")
def secured_pair(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Iterator[dict[str, Any]]:
    """A two-broker SASL_SSL cluster on which `strait` holds only the balancer role's ACLs."""
    sb = sandbox_factory(
        SandboxSpec(
            clusters=("secpair",),
            brokers=2,
            log_dirs=1,
            zookeeper=False,
            security="sasl_ssl",
            startup_timeout_s=300,
        )
    )
    state = sb.clusters["secpair"]
    admin = clients.admin(state.admin_props())
    keep = {p.key for p in acls.BALANCER.permissions}
    extra = [p for p in acls.permissions(acls.ROLES) if p.key not in keep]
    for future in admin.delete_acls([_filter(p) for p in extra], request_timeout=30).values():
        future.result(timeout=30)
    wanted = set(acls.bindings(PRINCIPAL, [acls.BALANCER]))
    _wait(lambda: _holds_exactly(admin, wanted), 30, "strait to hold only the balancer ACLs")
    yield {
        "props": state.props(),
        "admin_props": state.admin_props(),
        "dirs": {b.id: list(b.log_dirs) for b in state.brokers},
    }


def _fill(admin_props: dict[str, str], topic: str) -> int:
    """A topic whose partitions all live on broker 1, filled as the super user."""
    admin = clients.admin(admin_props)
    new = NewTopic(topic, PARTITIONS, replica_assignment=[[1] for _ in range(PARTITIONS)])
    admin.create_topics([new])[topic].result(timeout=60)
    producer = clients.producer(admin_props, **{"acks": "all", "linger.ms": 2, "batch.num.messages": 16})
    for partition in range(PARTITIONS):
        for _ in range(RECORDS):
            producer.produce(topic, RECORD, partition=partition)
            producer.poll(0)
    assert producer.flush(120) == 0
    return PARTITIONS * RECORDS


def _count(admin_props: dict[str, str], topic: str) -> int:
    consumer = clients.consumer(
        admin_props, **{"group.id": f"count-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 120
        while any(seen[p] < ends[p] for p in seen) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen[msg.partition() or 0] += 1
        return sum(seen.values())
    finally:
        consumer.close()


def _leftovers(gateway: KafkaGateway, topic: str) -> list[str]:
    problems = [f"reassignment in progress: {k}" for k in gateway.reassignments()]
    problems += [f"topic {topic} {k}={v!r}" for k, v in gateway.topic_configs(topic, TOPIC_KEYS).items()]
    for broker in BROKERS:
        problems += [f"broker {broker} {k}={v}" for k, v in gateway.broker_configs(broker, BROKER_KEYS).items()]
    return problems


def _plan(gateway: KafkaGateway, topic: str, dirs: dict[int, list[str]]) -> Plan:
    cluster_id = gateway.load_model().cluster_id
    moves = tuple(
        InterBrokerMove(topic, p, (1,), (2,), {2: dirs[2][0]}, RECORDS * len(RECORD)) for p in range(PARTITIONS)
    )
    return Plan(operation="manual", cluster_id=cluster_id, moves=moves)


def test_a_throttled_move_between_brokers_runs_and_cancels_as_strait(secured_pair: dict[str, Any]) -> None:
    props, admin_props, dirs = secured_pair["props"], secured_pair["admin_props"], secured_pair["dirs"]
    topic = f"moving-{uuid.uuid4().hex[:6]}"
    produced = _fill(admin_props, topic)
    gateway = KafkaGateway(props)  # strait, with the balancer role's ACLs only
    store = StateStore(props)
    try:
        _wait(lambda: len(gateway.replicas([topic])) == PARTITIONS, 60, f"topic {topic} visible to strait")
        plan = _plan(gateway, topic, dirs)

        # Slow: the throttles are set while the copies to broker 2 are in flight; then cancel.
        run = executor.start(gateway, store, plan, executor.Options(throttle=SLOW))
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(final=run.run()), daemon=True)
        thread.start()
        _wait(lambda: run.snapshot().in_flight == PARTITIONS, 120, "both moves in flight")
        _wait(lambda: gateway.reassignments(), 60, "Kafka to report the reassignments")
        # The source broker sends, the new one receives, both at the throttle's rate.
        assert gateway.broker_configs(1, BROKER_KEYS) == {LEADER_RATE: str(SLOW)}
        assert gateway.broker_configs(2, BROKER_KEYS) == {FOLLOWER_RATE: str(SLOW)}
        throttled = gateway.topic_configs(topic, TOPIC_KEYS)
        assert set(throttled) == set(TOPIC_KEYS), throttled
        assert all(f"{p}:1" in throttled[LEADER_REPLICAS].split(",") for p in range(PARTITIONS)), throttled
        assert all(f"{p}:2" in throttled[FOLLOWER_REPLICAS].split(",") for p in range(PARTITIONS)), throttled
        cancelled = executor.cancel(gateway, store, wait=120, by="test")
        thread.join(180)
        assert not thread.is_alive(), "the executor did not stop after the cancel"
        assert cancelled is not None and result["final"].status == "cancelled", result
        _wait(lambda: not _leftovers(gateway, topic), 120, "no reassignment or throttle left after the cancel")
        assert all(gateway.replicas([topic])[(topic, p)] == (1,) for p in range(PARTITIONS)), "cancelled moves stay"
        assert _count(admin_props, topic) == produced

        # The same plan to the end, under a throttle that lets it finish.
        final = executor.start(gateway, store, plan, executor.Options(throttle=50_000_000)).run()
        assert final.status == "done", final.moves
        assert all(gateway.replicas([topic])[(topic, p)] == (2,) for p in range(PARTITIONS)), "moved to broker 2"
        _wait(lambda: not _leftovers(gateway, topic), 120, "no reassignment or throttle left after the run")
        assert _count(admin_props, topic) == produced
    finally:
        store.close()
        gateway.close()
