"""Reloading a running fleet on the secure sandbox: a rotated SCRAM password, a bad new file, a
route added and removed.

A SCRAM password rotated while records flow, applied by SIGHUP, loses nothing.

A controller and a worker run on the secure sandbox as a user of their own on `src`
(SASL/SCRAM-SHA-512 over TLS) whose password the configuration reads from a `${file:}` secret.
While a producer writes numbered records, the user's password changes on the broker (SCRAM
keeps one password per mechanism, so the old one stops working at that moment) and in the
file, and both processes get SIGHUP. The `src` broker is then restarted, so that every
connection the fleet holds is opened again and authenticates with the new password alone. At
the end every produced record is read back from the destination.

A bad new file is refused with its error (noticed by polling, without a signal) and the worker
keeps copying with the configuration it runs.

A route added to the file starts copying on SIGHUP (the controller accepts its topics, the
worker starts its copier); removed again, after its topic, its copier stops.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strait import clients
from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox
from strait.security import acls

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _set_password(admin_props: dict[str, Any], user: str, password: str) -> None:
    admin = clients.admin(admin_props)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())])
    for future in futures.values():
        future.result(timeout=30)


def _refused(props: dict[str, Any]) -> bool:
    """Whether the cluster refuses these credentials now (a fresh client, so a new connection)."""
    try:
        clients.admin({**props, "log_level": 0}).list_topics(timeout=10)
    except KafkaException:
        return True
    return False


class Producer:
    """Writes numbered records to every partition until stopped; remembers what was acknowledged."""

    def __init__(self, props: dict[str, Any], topic: str) -> None:
        self._producer = clients.producer(props, **{"enable.idempotence": True, "linger.ms": 5})
        self._topic = topic
        self.acked: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert self._producer.flush(60) == 0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add((msg.partition(), int(msg.value().split(b":")[1])))

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            for partition in range(PARTITIONS):
                self._producer.produce(
                    self._topic, f"{partition}:{seq}".encode(), partition=partition, on_delivery=self._delivered
                )
            self._producer.poll(0.02)
            seq += 1


def _read(props: dict[str, Any], topic: str) -> set[tuple[int, int]]:
    """Every record on ``topic`` up to its end offsets as of now."""
    consumer = clients.consumer(props, **{"group.id": f"verify-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    seen: set[tuple[int, int]] = set()
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        positions = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    part, seq = (msg.value() or b"").split(b":")[:2]
                    seen.add((int(part), int(seq)))
                    positions[msg.partition()] = max(positions[msg.partition()], (msg.offset() or 0) + 1)
    except KafkaException:
        return seen  # the destination topic may not exist yet
    finally:
        consumer.close()
    return seen


@pytest.fixture(scope="module")
def rotating(secure_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    src, dst = secure_sandbox.clusters["src"], secure_sandbox.clusters["dst"]
    workdir = tmp_path_factory.mktemp("reload-fleet")
    user = f"rotating-{uuid.uuid4().hex[:6]}"
    first = f"first-{uuid.uuid4().hex}"
    _set_password(src.admin_props(), user, first)
    admin = clients.admin(src.admin_props())
    acls.grant(admin, f"User:{user}", acls.ROLES)
    secret = workdir / "src-password"
    secret.write_text(first + "\n")
    secret.chmod(0o600)
    props = {**src.props(), "sasl.username": user, "sasl.password": f"${{file:{secret}}}"}
    fleet = Fleet(
        zookeeper=secure_sandbox.zookeeper,
        clusters={"src": props, "dst": dst.props()},
        routes=[{"name": "rotated", "source": "src", "destination": "dst"}],
        workdir=workdir,
    )
    try:
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        assert wait_until(lambda: len(fleet.api().call("GET", "/workers")) == 1, 60)
        yield {
            "fleet": fleet,
            "sandbox": secure_sandbox,
            "user": user,
            "secret": secret,
            "first": first,
            "plain": {**src.props(), "sasl.username": user, "sasl.password": first},
            "src": src.admin_props(),
            "dst": dst.admin_props(),
        }
    finally:
        fleet.stop(timeout_s=30)


def _log(fleet: Fleet, name: str) -> str:
    return (Path(fleet.workdir) / f"{name}.log").read_text(errors="replace")


def _copy_under_way(rotating: dict[str, Any], name: str) -> tuple[str, Producer]:
    topic = f"{name}-{uuid.uuid4().hex[:6]}"
    admin = clients.admin(rotating["src"])
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer(rotating["src"], topic)
    producer.start()
    rotating["fleet"].api().call("POST", f"/topics/{topic}", json={"route": "rotated"})
    assert wait_until(lambda: len(producer.acked) > 200 and len(_read(rotating["dst"], topic)) > 100, 120, 1.0)
    return topic, producer


def _everything_copied(rotating: dict[str, Any], topic: str, producer: Producer) -> None:
    producer.stop()
    expected = producer.acked
    assert wait_until(lambda: _read(rotating["dst"], topic) >= expected, 180, 2.0), "records missing on dst"
    assert _read(rotating["dst"], topic) >= expected


def test_a_rotated_scram_password_applies_on_sighup_and_nothing_is_lost(rotating: dict[str, Any]) -> None:
    fleet: Fleet = rotating["fleet"]
    topic, producer = _copy_under_way(rotating, "rotate")
    second = f"second-{uuid.uuid4().hex}"
    _set_password(rotating["src"], rotating["user"], second)
    rotating["secret"].write_text(second + "\n")
    for name in ("w1", "c1"):
        fleet.signal(name, signal.SIGHUP)
    for name in ("w1", "c1"):
        assert wait_until(lambda n=name: "applied new credentials for cluster src" in _log(fleet, n), 30), name
    assert _refused(rotating["plain"]), "the old password still works"
    # Every connection opens again: only the new password authenticates them.
    sandbox: Sandbox = rotating["sandbox"]
    broker = sandbox.clusters["src"].brokers[0].id
    sandbox.stop_broker("src", broker)
    sandbox.start_broker("src", broker, timeout_s=300)
    copied_before = len(_read(rotating["dst"], topic))
    assert wait_until(lambda: len(_read(rotating["dst"], topic)) > copied_before + 200, 120, 2.0), "copying stopped"
    _everything_copied(rotating, topic, producer)
    for name in ("w1", "c1"):
        assert fleet.processes[name].poll() is None, f"{name} exited"
        text = _log(fleet, name)
        assert rotating["first"] not in text and second not in text, f"a password in {name}.log"


def test_a_bad_new_file_is_refused_and_copying_goes_on(rotating: dict[str, Any]) -> None:
    fleet: Fleet = rotating["fleet"]
    topic, producer = _copy_under_way(rotating, "refuse")
    good = fleet.config_path.read_text()
    try:
        # Noticed without a signal: the file changed.
        fleet.config_path.write_text(
            good.replace("routes:", "routes:\n- {name: broken, source: nowhere, destination: dst}")
        )
        for name in ("w1", "c1"):
            assert wait_until(lambda n=name: "unknown cluster 'nowhere'" in _log(fleet, n), 30), name
            assert "refused, the running configuration stays" in _log(fleet, name)
        copied_before = len(_read(rotating["dst"], topic))
        assert wait_until(lambda: len(_read(rotating["dst"], topic)) > copied_before + 200, 60, 2.0)
    finally:
        fleet.config_path.write_text(good)
    _everything_copied(rotating, topic, producer)
    assert fleet.processes["w1"].poll() is None


def test_a_route_added_by_reload_copies_and_stops_when_removed(rotating: dict[str, Any]) -> None:
    fleet: Fleet = rotating["fleet"]
    good = fleet.config_path.read_text()
    added = good.replace(
        "routes:", "routes:\n- {name: added, source: src, destination: dst, naming: {prefix: added.}}", 1
    )
    assert added != good
    fleet.config_path.write_text(added)
    for name in ("c1", "w1"):
        fleet.signal(name, signal.SIGHUP)
    for name in ("c1", "w1"):
        assert wait_until(lambda n=name: "route added added" in _log(fleet, n), 30), name
    assert wait_until(lambda: "route added: copier started" in _log(fleet, "w1"), 30)
    topic = f"added-{uuid.uuid4().hex[:6]}"
    admin = clients.admin(rotating["src"])
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer(rotating["src"], topic)
    producer.start()
    fleet.api().call("POST", f"/topics/{topic}", json={"route": "added"})
    assert wait_until(lambda: len(producer.acked) > 200, 60)
    producer.stop()
    expected = producer.acked
    assert wait_until(lambda: _read(rotating["dst"], f"added.{topic}") >= expected, 180, 2.0), "records missing"
    # Its topic first (the controller stops assigning it), then the route.
    fleet.api().call("DELETE", f"/topics/{topic}", params={"route": "added"})
    fleet.config_path.write_text(good)
    for name in ("c1", "w1"):
        fleet.signal(name, signal.SIGHUP)
    for name in ("c1", "w1"):
        assert wait_until(lambda n=name: "route added removed" in _log(fleet, n), 30), name
    assert wait_until(lambda: "route added: copier stopped" in _log(fleet, "w1"), 60)
    assert fleet.processes["w1"].poll() is None
