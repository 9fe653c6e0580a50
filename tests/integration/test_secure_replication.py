"""Strait on secured clusters, as the least-privilege user `strait`.

One fleet (a controller and two workers as real processes) on the secure sandbox: `src` speaks
SASL_SSL with SCRAM-SHA-512, `dst` mutual TLS. Three routes cover both directions and both
delivery modes: src -> dst at-least-once, src -> dst exactly-once, dst -> src at-least-once.
The `strait` user holds only the ACLs of `strait.security.acls`, so the copy completing proves
they are enough. The password and the API token are given as `${env:}`/`${file:}` references;
while the fleet runs, its logs, `/metrics`, the REST responses and `strait status --json` are
searched for them. A write ACL taken away mid-copy must show as a clear refusal and recover,
losing nothing, once it is granted again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from strait import clients
from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox
from strait.web.client import ControllerClient

pytestmark = pytest.mark.integration

PASSWORD_VARIABLE = "SECURE_TEST_SRC_PASSWORD"  # no STRAIT_ prefix: that would be a config override
PARTITIONS = 2
COUNT = 400


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _create(admin_props: Mapping[str, Any], topic: str) -> None:
    admin = clients.admin(admin_props)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)


def _produce(admin_props: Mapping[str, Any], topic: str, first: int, count: int) -> None:
    producer = clients.producer(admin_props, **{"enable.idempotence": True, "linger.ms": 5})
    for seq in range(first, first + count):
        for partition in range(PARTITIONS):
            producer.produce(topic, f"{partition}:{seq}".encode(), partition=partition)
    assert producer.flush(60) == 0


def _read(admin_props: Mapping[str, Any], topic: str, idle_s: float = 3.0) -> dict[int, list[int]]:
    consumer = clients.consumer(
        admin_props,
        **{"group.id": _name("verify"), "isolation.level": "read_committed", "enable.auto.commit": False},
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seqs: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    part, seq = (msg.value() or b"").split(b":")[:2]
                    seqs[int(part)].append(int(seq))
                    last = time.monotonic()
    except Exception:
        return seqs  # the topic may not exist yet
    finally:
        consumer.close()
    return seqs


def _copied(admin_props: Mapping[str, Any], topic: str, count: int) -> bool:
    return all(len(set(v)) >= count for v in _read(admin_props, topic, 1.0).values())


def _without_secret(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (f"${{env:{PASSWORD_VARIABLE}}}" if k == "sasl.password" else v) for k, v in props.items()}


@pytest.fixture(scope="module")
def secured(secure_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    src, dst = secure_sandbox.clusters["src"], secure_sandbox.clusters["dst"]
    workdir = tmp_path_factory.mktemp("secure-fleet")
    token = f"token-{uuid.uuid4().hex}"
    token_file = workdir / "api-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    password = src.props()["sasl.password"]
    os.environ[PASSWORD_VARIABLE] = password  # the fleet's processes inherit it
    fleet = Fleet(
        zookeeper=secure_sandbox.zookeeper,
        clusters={"src": _without_secret(src.props()), "dst": dst.props()},
        routes=[
            {"name": "forward", "source": "src", "destination": "dst"},
            {"name": "forward-eos", "source": "src", "destination": "dst", "delivery": "exactly-once"},
            {"name": "back", "source": "dst", "destination": "src"},
        ],
        workdir=workdir,
        api_token=f"${{file:{token_file}}}",
    )
    assert password not in fleet.config_path.read_text()
    try:
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        fleet.start_worker("w2")
        api = ControllerClient(f"http://127.0.0.1:{fleet.ports['c1']}", token=token)
        assert wait_until(lambda: len(api.call("GET", "/workers")) == 2, 60)
        yield {
            "fleet": fleet,
            "api": api,
            "token": token,
            "secrets": [password, token],
            "src": src.admin_props(),
            "dst": dst.admin_props(),
        }
    finally:
        fleet.stop(timeout_s=30)
        os.environ.pop(PASSWORD_VARIABLE, None)


def test_both_directions_and_both_modes_copy_everything_as_the_least_privileged_user(secured: dict[str, Any]) -> None:
    api, src, dst = secured["api"], secured["src"], secured["dst"]
    forward, exact, back = _name("sec-fwd"), _name("sec-eos"), _name("sec-back")
    _create(src, forward)
    _create(src, exact)
    _create(dst, back)
    for topic, props in ((forward, src), (exact, src), (back, dst)):
        _produce(props, topic, 0, COUNT)
    api.call("POST", f"/topics/{forward}", json={"route": "forward"})
    api.call("POST", f"/topics/{exact}", json={"route": "forward-eos"})
    api.call("POST", f"/topics/{back}", json={"route": "back"})
    for topic, props in ((forward, dst), (exact, dst), (back, src)):
        assert wait_until(partial(_copied, props, topic, COUNT), 180, interval_s=2.0), f"{topic} not copied"
    for topic, props, exactly in ((forward, dst, False), (exact, dst, True), (back, src, False)):
        seqs = _read(props, topic)
        for partition, got in seqs.items():
            assert sorted(set(got)) == list(range(COUNT)), f"{topic}/{partition}: records lost"
            if exactly:
                assert got == list(range(COUNT)), f"{topic}/{partition}: duplicates or disorder under exactly-once"


def test_no_secret_reaches_logs_metrics_rest_or_status(secured: dict[str, Any]) -> None:
    fleet: Fleet = secured["fleet"]
    secrets: list[str] = secured["secrets"]
    base = f"http://127.0.0.1:{fleet.ports['c1']}"
    headers = {"Authorization": f"Bearer {secured['token']}"}
    outputs: dict[str, str] = {}
    for path in ("/health", "/routes", "/topics", "/workers", "/assignment", "/metrics", "/openapi.json", "/docs"):
        response = httpx.get(base + path, headers=headers, timeout=10)
        assert response.status_code == 200, (path, response.status_code)
        outputs[path] = response.text
    targets = httpx.get(base + "/metrics/targets", timeout=10)
    if targets.status_code == 200:
        for index, target in enumerate(_target_urls(targets.json())):
            outputs[f"worker metrics {index}"] = httpx.get(target, timeout=10).text
    status = subprocess.run(
        [sys.executable, "-m", "strait", "status", "--api", base, "--token", secured["token"], "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert status.returncode == 0, status.stderr
    assert "partitions" in json.loads(status.stdout)
    outputs["status --json"] = status.stdout + status.stderr
    for log in Path(fleet.workdir).glob("*.log"):
        outputs[log.name] = log.read_text(errors="replace")
    assert any("strait.librdkafka" in text or "started" in text for text in outputs.values())
    leaks = [name for name, text in outputs.items() if any(secret in text for secret in secrets)]
    assert not leaks, f"a secret appears in: {leaks}"


def _target_urls(document: Any) -> list[str]:
    urls: list[str] = []
    entries = document if isinstance(document, list) else [document]
    for entry in entries:
        for target in entry.get("targets", []) if isinstance(entry, dict) else []:
            urls.append(target if "://" in target else f"http://{target}/metrics")
    return urls


def test_a_withdrawn_write_acl_is_reported_and_copying_resumes_when_granted(
    secured: dict[str, Any], secure_sandbox: Sandbox
) -> None:
    api, src, dst = secured["api"], secured["src"], secured["dst"]
    topic = _name("sec-acl")
    _create(src, topic)
    _produce(src, topic, 0, COUNT)
    api.call("POST", f"/topics/{topic}", json={"route": "forward"})
    assert wait_until(lambda: _copied(dst, topic, COUNT), 120, interval_s=2.0)
    # Take away the write permission on this one destination topic: a DENY beats every ALLOW.
    fields = (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:strait", "*", AclOperation.WRITE)
    deny = AclBinding(*fields, AclPermissionType.DENY)
    admin = clients.admin(dst)
    admin.create_acls([deny])[deny].result(timeout=30)
    try:
        _produce(src, topic, COUNT, COUNT)
        assert wait_until(lambda: _refusal_reported(secured["api"], topic), 90, interval_s=1.0), "no clear refusal"
    finally:
        for future in admin.delete_acls([AclBindingFilter(*fields, AclPermissionType.DENY)]).values():
            future.result(timeout=30)
    assert wait_until(lambda: _copied(dst, topic, 2 * COUNT), 120, interval_s=2.0), "did not resume"
    seqs = _read(dst, topic)
    for partition, got in seqs.items():
        assert sorted(set(got)) == list(range(2 * COUNT)), f"{topic}/{partition}: records lost"


def _refusal_reported(api: ControllerClient, topic: str) -> bool:
    detail = api.call("GET", f"/topics/{topic}", params={"route": "forward"})["partition_detail"]
    states = [str(p.get("state", "")) for p in detail]
    # mTLS destination: the principal is the certificate's CN, named with the certificate.
    wanted = ("cluster dst", "refused User:strait", "no ACL allows this on the topic")
    return any(s.startswith("retrying:") and all(w in s for w in wanted) for s in states)
