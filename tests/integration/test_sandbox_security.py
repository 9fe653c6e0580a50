"""Secured sandbox clusters: the ``strait`` user does Strait's work with only its ACLs, and
everyone else (a wrong password, no certificate, plaintext, a user without ACLs) is refused.

One session sandbox (``secure_sandbox``): ``src`` is SASL/SCRAM-SHA-512 over TLS, ``dst`` is
mutual TLS. A two-broker cluster checks replication between secured brokers, and a ``tls``
cluster is started through the CLI, the way a person would.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    NewTopic,
    OffsetSpec,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strait import clients
from strait.balancer.gateway import KafkaGateway
from strait.balancer.state import StateStore
from strait.sandbox import Sandbox, SandboxSpec
from strait.security import acls

pytestmark = pytest.mark.integration

RECORDS = 100


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _create_topic(props: Mapping[str, str], topic: str, partitions: int = 1) -> None:
    admin = clients.admin(props)  # must outlive the future, or librdkafka destroys the handle
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def _produce(props: Mapping[str, str], topic: str, values: list[bytes], **overrides: Any) -> list[KafkaError | None]:
    """Produce ``values`` to partition 0; every record's delivery error (None when delivered)."""
    outcomes: list[KafkaError | None] = []
    producer = clients.producer(props, **{"message.timeout.ms": 30000, **overrides})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, _msg: outcomes.append(err))
    assert producer.flush(60) == 0
    return outcomes


def _consume(props: Mapping[str, str], topic: str, count: int, **overrides: Any) -> list[bytes]:
    consumer = clients.consumer(props, **{"group.id": _name("strait-reader-"), **overrides})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(received) < count and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                received.append(msg.value())
    finally:
        consumer.close()
    return received


def _first_errors(props: Mapping[str, str], within_s: float = 30) -> tuple[list[KafkaError], float]:
    """What librdkafka reports (error_cb) while a producer connects, and how long it took."""
    errors: list[KafkaError] = []
    producer = Producer({**props, "error_cb": errors.append, "log_level": 0, "socket.timeout.ms": 5000})
    started = time.monotonic()
    while not errors and time.monotonic() - started < within_s:
        producer.poll(0.2)
    return errors, time.monotonic() - started


def _eventually(read: Callable[[], object], expected: object, within_s: float = 30) -> bool:
    """Whether ``read()`` returns ``expected`` within ``within_s`` (brokers apply config changes
    a moment after the controller accepted them)."""
    deadline = time.monotonic() + within_s
    while read() != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


def _add_scram_user(sandbox: Sandbox, cluster: str, user: str) -> str:
    """A new SCRAM user on ``cluster`` (no ACLs yet), created by the super user; returns its password."""
    password = secrets.token_urlsafe(16)
    admin = clients.admin(sandbox.clusters[cluster].admin_props())
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    admin.alter_user_scram_credentials([upsert])[user].result(timeout=30)
    return password


def _as_user(sandbox: Sandbox, cluster: str, user: str, password: str) -> dict[str, str]:
    return {**sandbox.clusters[cluster].props(), "sasl.username": user, "sasl.password": password}


@pytest.mark.parametrize("cluster", ["src", "dst"])
def test_strait_creates_topics_produces_consumes_and_lists_offsets(secure_sandbox: Sandbox, cluster: str) -> None:
    props = secure_sandbox.clusters[cluster].props()
    topic = _name("orders-")
    _create_topic(props, topic, partitions=2)
    values = [f"value-{i}".encode() for i in range(RECORDS)]
    # Idempotent like Strait's destination producer (InitProducerId is authorized too).
    assert _produce(props, topic, values, **{"enable.idempotence": True, "acks": "all"}) == [None] * RECORDS
    assert _consume(props, topic, RECORDS) == values

    admin = clients.admin(props)
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)}, request_timeout=30)
    latest = {tp.partition: f.result(timeout=30).offset for tp, f in futures.items()}
    assert latest == {0: RECORDS, 1: 0}


def test_strait_commits_checkpoints_only_in_its_own_groups(secure_sandbox: Sandbox) -> None:
    props = secure_sandbox.clusters["src"].props()
    topic = _name("checkpointed-")
    _create_topic(props, topic)
    _produce(props, topic, [b"x"] * 5)

    # As Strait's checkpoint consumer does: a group.id, no subscription, synchronous commits.
    consumer: Consumer = clients.consumer(props, **{"group.id": _name("strait-route-"), "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        assert [tp.offset for tp in consumer.committed([TopicPartition(topic, 0)], timeout=30)] == [5]
    finally:
        consumer.close()

    # Any other group is unusable: looking up its coordinator is refused, which poll() reports at
    # once (a commit would only wait for a coordinator, and hold close() until it gave up).
    stranger: Consumer = clients.consumer(props, **{"group.id": _name("someone-else-"), "enable.auto.commit": False})
    try:
        stranger.assign([TopicPartition(topic, 0, 0)])
        deadline, error = time.monotonic() + 30, None
        while error is None and time.monotonic() < deadline:
            msg = stranger.poll(0.5)
            error = msg.error() if msg is not None else None
    finally:
        stranger.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error


def test_strait_writes_transactions_only_with_its_own_ids(secure_sandbox: Sandbox) -> None:
    props = secure_sandbox.clusters["dst"].props()
    topic = _name("exactly-once-")
    _create_topic(props, topic)
    group = _name("strait.route-")
    producer = clients.producer(props, **{"transactional.id": _name("strait.route.w1.realtime-")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"copied", partition=0)
    # The checkpoint goes into the same transaction, in the destination group strait.<route>.
    metadata_consumer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], metadata_consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    committed = metadata_consumer.committed([TopicPartition(topic, 0)], timeout=30)
    metadata_consumer.close()
    assert [tp.offset for tp in committed] == [1]
    assert _consume(props, topic, 1, **{"isolation.level": "read_committed"}) == [b"copied"]

    stranger = clients.producer(props, **{"transactional.id": _name("other.")})
    with pytest.raises(KafkaException) as refused:
        stranger.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_wrong_password_is_refused_at_once(secure_sandbox: Sandbox) -> None:
    props = secure_sandbox.clusters["src"].props()
    errors, seconds = _first_errors({**props, "sasl.password": "not-" + props["sasl.password"]})
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert seconds < 20  # an answer from the broker, not a timeout
    assert props["sasl.password"] not in errors[0].str()


def test_a_client_without_certificate_is_refused(secure_sandbox: Sandbox) -> None:
    props = secure_sandbox.clusters["dst"].props()
    anonymous = {k: v for k, v in props.items() if k not in ("ssl.certificate.location", "ssl.key.location")}
    errors, seconds = _first_errors(anonymous)
    assert errors and errors[0].code() in (KafkaError._TRANSPORT, KafkaError._SSL), errors
    assert "certificate" in errors[0].str()
    assert seconds < 20
    with pytest.raises(KafkaException):
        clients.admin(anonymous, log_level=0).list_topics(timeout=5)


@pytest.mark.parametrize("cluster", ["src", "dst"])
def test_plaintext_to_a_secured_port_fails(secure_sandbox: Sandbox, cluster: str) -> None:
    plaintext = {"bootstrap.servers": secure_sandbox.clusters[cluster].bootstrap}
    errors, seconds = _first_errors(plaintext)
    assert errors and seconds < 20
    with pytest.raises(KafkaException):
        clients.admin(plaintext, log_level=0).list_topics(timeout=5)


def test_a_user_without_acls_is_refused(secure_sandbox: Sandbox) -> None:
    topic = _name("private-")
    _create_topic(secure_sandbox.clusters["src"].props(), topic)
    password = _add_scram_user(secure_sandbox, "src", "nobody")
    nobody = _as_user(secure_sandbox, "src", "nobody", password)
    outcomes = _produce(nobody, topic, [b"intruder"])
    assert [e.code() if e else None for e in outcomes] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # It authenticated (the refusal is authorization), and it cannot even see the topic.
    assert topic not in clients.admin(nobody).list_topics(timeout=30).topics


def test_the_balancer_role_alone_is_enough_to_balance(secure_sandbox: Sandbox) -> None:
    topic = _name("balanced-")
    _create_topic(secure_sandbox.clusters["src"].props(), topic)
    password = _add_scram_user(secure_sandbox, "src", "balancer")
    admin = clients.admin(secure_sandbox.clusters["src"].admin_props())
    acls.grant(admin, "User:balancer", [acls.BALANCER])
    props = _as_user(secure_sandbox, "src", "balancer", password)

    gateway = KafkaGateway(props)  # kafka-python: SCRAM over TLS through the same properties
    try:
        model = gateway.load_model()
        assert list(model.brokers) == [1] and model.log_dirs[1]
        rate, replicas = "leader.replication.throttled.rate", "leader.replication.throttled.replicas"
        gateway.alter_broker_configs(1, {rate: ("SET", "1000000")})
        assert _eventually(lambda: gateway.broker_configs(1, [rate]), {rate: "1000000"})
        gateway.alter_broker_configs(1, {rate: ("DELETE", None)})
        gateway.alter_topic_configs(topic, {replicas: ("SET", "0:1")})
        assert _eventually(lambda: gateway.topic_configs(topic, [replicas]), {replicas: "0:1"})
        gateway.alter_topic_configs(topic, {replicas: ("DELETE", None)})
    finally:
        gateway.close()

    store = StateStore(props)
    try:
        store.start("e1", {"moves": []}, {"throttle": 1})
        execution = store.load("e1")
        assert execution is not None and execution.plan == {"moves": []}
        # Ended, so a later execution on the shared secured cluster is not refused as a conflict.
        store.save_progress("e1", {"status": "done", "heartbeat": time.time(), "moves": {}})
    finally:
        store.close()
    # Least privilege: the balancer may not write anyone's data.
    assert [e.code() if e else None for e in _produce(props, topic, [b"x"])] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_state_and_secrets_are_kept_private_and_reloadable(secure_sandbox: Sandbox) -> None:
    loaded = Sandbox.load(secure_sandbox.state_dir)
    for name in ("src", "dst"):
        assert loaded.clusters[name].props() == secure_sandbox.clusters[name].props()
        assert loaded.clusters[name].admin_props() == secure_sandbox.clusters[name].admin_props()
    described = loaded.describe()["clusters"]
    assert described["src"]["security"] == "sasl_ssl" and described["dst"]["security"] == "mtls"
    assert described["src"]["client"]["sasl.username"] == "strait"
    assert described["dst"]["admin_client"]["ssl.certificate.location"].endswith("admin.crt")

    passwords = [
        secure_sandbox.clusters["src"].admin_props()["sasl.password"],
        secure_sandbox.clusters["src"].props()["sasl.password"],
    ]
    assert all(p not in repr(loaded.clusters["src"]) for p in passwords)
    state = (secure_sandbox.state_dir / "state.json").read_text()
    logs = [Path(b.log).read_text() for c in secure_sandbox.clusters.values() for b in c.brokers]
    assert not any(p in text for p in passwords for text in [state, *logs])
    security_dir = secure_sandbox.state_dir / "security"
    private = [
        security_dir / "passwords.json",
        security_dir / "broker-keystore.pem",
        security_dir / "strait.key",
        security_dir / "admin.key",
    ]
    private += [Path(b.config) for c in secure_sandbox.clusters.values() for b in c.brokers]
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_brokers_replicate_over_the_secured_listener(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> None:
    # Two brokers: they authenticate to each other (SCRAM user broker) and to the controller (TLS).
    sb = sandbox_factory(SandboxSpec(clusters=("pair",), brokers=2, log_dirs=1, zookeeper=False, security="sasl_ssl"))
    props = sb.clusters["pair"].props()
    admin = clients.admin(props)
    admin.create_topics([NewTopic("replicated", 2, 2, config={"min.insync.replicas": "2"})])["replicated"].result(60)
    assert _produce(props, "replicated", [b"twice"] * 10, acks="all") == [None] * 10
    partitions = admin.list_topics("replicated", timeout=30).topics["replicated"].partitions.values()
    assert [sorted(p.isrs) for p in partitions] == [[1, 2], [1, 2]]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strait", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ},
    )


def test_cli_tls_cluster_restarts_and_goes_down(tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path / "tls")]
    up = _cli("up", "--clusters", "t", "--security", "tls", "--no-zookeeper", "--log-dirs", "1", "--json", *state)
    assert up.returncode == 0, up.stderr
    try:
        cluster = json.loads(up.stdout)["clusters"]["t"]
        props = cluster["client"]
        assert cluster["security"] == "tls" and props == cluster["admin_client"]  # no identity, no ACLs
        assert props["security.protocol"] == "SSL" and Path(props["ssl.ca.location"]).exists()
        topic = _name("tls-")
        _create_topic(props, topic)
        assert _produce(props, topic, [b"over tls"]) == [None]
        assert _consume(props, topic, 1) == [b"over tls"]
        with pytest.raises(KafkaException):
            clients.admin({"bootstrap.servers": cluster["bootstrap"]}, log_level=0).list_topics(timeout=5)

        # Later processes find the secured cluster through state.json, and restart its broker.
        assert _cli("broker", "kill", "t", "1", *state).returncode == 0
        started = _cli("broker", "start", "t", "1", "--timeout", "240", *state)
        assert started.returncode == 0, started.stderr
        status = json.loads(_cli("status", "--json", *state).stdout)
        assert status["clusters"]["t"]["brokers"][0]["running"]
        assert _consume(props, topic, 1) == [b"over tls"]
    finally:
        down = _cli("down", *state)
    assert down.returncode == 0, down.stderr


def test_a_secured_broker_restarts_with_its_users_and_acls(secure_sandbox: Sandbox) -> None:
    # Last: the restarted broker must find its SCRAM users and ACLs in its own metadata log.
    props = secure_sandbox.clusters["src"].props()
    topic = _name("restart-")
    _create_topic(props, topic)
    secure_sandbox.kill_broker("src", 1)
    secure_sandbox.start_broker("src", 1, timeout_s=180)
    assert _produce(props, topic, [b"after restart"]) == [None]
    assert _consume(props, topic, 1) == [b"after restart"]
