"""The disk balancer on secured clusters, as the least-privilege user `strait`.

The session's secure sandbox: `src` speaks SASL_SSL with SCRAM-SHA-512, `dst` mutual TLS, one
broker with two log dirs each. For this module `strait` holds only the ACLs of the `balancer`
role (`strait.security.acls.BALANCER`); the other roles' grants are taken away first and given
back at the end. Each cluster is balanced through the CLI a person would use
(`strait balance plan|execute|status|cancel --cluster NAME --config FILE`, the password given as
an `${env:}` reference): a plan between the broker's disks, a throttled detached execution
cancelled mid-copy (nothing left behind: no future replica, no throttle, no record lost), then
the same plan run to the end. The state topic `__strait_balance` is created, written and read
by `strait` alone. A wrong password, a missing client certificate and a user without ACLs are
each named (cluster, principal, cause) within seconds.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strait import clients
from strait.balancer.gateway import KafkaGateway
from strait.balancer.state import StateStore
from strait.balancer.throttle import BROKER_KEYS, DIR_RATE, TOPIC_KEYS
from strait.sandbox import Sandbox
from strait.security import acls
from tests.integration.balancing import wait

pytestmark = pytest.mark.integration

PASSWORD_VARIABLE = "SECURE_BALANCER_SRC_PASSWORD"  # no STRAIT_ prefix: that would be a config override
PRINCIPAL = "User:strait"
PARTITIONS = 4
# Per partition, of 1 KB: 2.5 MB a partition. A replica moving between disks is read in chunks of
# replica.fetch.max.bytes (1 MB), and the throttle only holds back the chunks after the first.
RECORDS = 2500
RECORD = b"b" * 1000
SLOW = "2KB"  # after its first chunk, a move stays in flight for minutes at this rate, even on a loaded machine


_wait = partial(wait, every=0.3)


def _filter(permission: acls.Permission) -> AclBindingFilter:
    return AclBindingFilter(
        permission.resource,
        permission.name,
        permission.pattern,
        PRINCIPAL,
        "*",
        permission.operation,
        AclPermissionType.ALLOW,
    )


def _holds_exactly(admin: Any, wanted: set[AclBinding]) -> bool:
    return _listed(admin) == wanted


def _listed(admin: Any) -> set[AclBinding]:
    # None matches any resource name and any host (the stubs only admit strings).
    anything: Any = None
    everything = AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        PRINCIPAL,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return set(admin.describe_acls(everything, request_timeout=30).result(timeout=30))


@pytest.fixture(scope="module")
def balancer_only(secure_sandbox: Sandbox) -> Iterator[None]:
    """`strait` holds only the balancer role's ACLs on both clusters while this module runs."""
    keep = {p.key for p in acls.BALANCER.permissions}
    extra = [p for p in acls.permissions(acls.ROLES) if p.key not in keep]
    admins = {name: clients.admin(secure_sandbox.clusters[name].admin_props()) for name in ("src", "dst")}
    try:
        for admin in admins.values():
            futures = admin.delete_acls([_filter(p) for p in extra], request_timeout=30)
            for future in futures.values():
                future.result(timeout=30)
        wanted = set(acls.bindings(PRINCIPAL, [acls.BALANCER]))
        for name, admin in admins.items():
            _wait(partial(_holds_exactly, admin, wanted), 30, f"strait to hold only the balancer ACLs on {name}")
        yield
    finally:
        for admin in admins.values():
            acls.grant(admin, PRINCIPAL, acls.ROLES)


@pytest.fixture(scope="module")
def config_file(secure_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Strait configuration naming both clusters as `strait`; src's password by `${env:}` reference."""
    src, dst = secure_sandbox.clusters["src"].props(), secure_sandbox.clusters["dst"].props()
    os.environ[PASSWORD_VARIABLE] = src["sasl.password"]  # the CLI processes inherit it
    path = tmp_path_factory.mktemp("secure-balancer") / "strait.yaml"
    config = {
        "clusters": {"src": {**src, "sasl.password": f"${{env:{PASSWORD_VARIABLE}}}"}, "dst": dst},
        "routes": [{"name": "forward", "source": "src", "destination": "dst"}],
    }
    path.write_text(yaml.safe_dump(config))
    assert src["sasl.password"] not in path.read_text()
    yield path
    os.environ.pop(PASSWORD_VARIABLE, None)


def _cli(config: Path, cluster: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strait", "balance", args[0], "--cluster", cluster, "--config", str(config), *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ},
    )


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def _setup_topic(admin_props: Mapping[str, Any], topic: str, dirs: list[str]) -> int:
    """A topic of PARTITIONS 2.5 MB partitions, every replica on the first disk (as the super user)."""
    admin = clients.admin(admin_props)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = clients.producer(admin_props, **{"acks": "all", "linger.ms": 2, "batch.num.messages": 16})
    for partition in range(PARTITIONS):
        for _ in range(RECORDS):
            producer.produce(topic, RECORD, partition=partition)
            producer.poll(0)
    assert producer.flush(60) == 0
    gateway = KafkaGateway(admin_props)
    try:
        _wait(lambda: len(gateway.replicas([topic])) == PARTITIONS, 30, f"topic {topic}")
        gateway.move_dirs({(topic, p, 1): dirs[0] for p in range(PARTITIONS)})
        _wait(
            lambda: all(
                d.current == dirs[0] and d.future is None
                for (t, _, _), d in gateway.replica_dirs([1], [topic]).items()
                if t == topic
            ),
            60,
            f"{topic} pinned to the first disk",
        )
    finally:
        gateway.close()
    return PARTITIONS * RECORDS


def _count(admin_props: Mapping[str, Any], topic: str) -> int:
    consumer = clients.consumer(
        admin_props, **{"group.id": f"count-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 60
        while any(seen[p] < ends[p] for p in seen) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen[msg.partition() or 0] += 1
        return sum(seen.values())
    finally:
        consumer.close()


def _leftovers(gateway: KafkaGateway, topic: str) -> list[str]:
    """What an execution must not leave behind: reassignments, future replicas, throttles."""
    problems = [f"reassignment in progress: {k}" for k in gateway.reassignments()]
    problems += [f"future replica {k} -> {d.future}" for k, d in gateway.replica_dirs([1], [topic]).items() if d.future]
    problems += [f"topic {topic} {k}={v!r}" for k, v in gateway.topic_configs(topic, TOPIC_KEYS).items()]
    problems += [f"broker 1 {k}={v}" for k, v in gateway.broker_configs(1, BROKER_KEYS).items()]
    return problems


def _capacity(gateway: KafkaGateway) -> int:
    """A disk size that makes the pinned topic a clear skew: twice everything the broker holds."""
    model = gateway.load_model()
    return max(4_000_000, 2 * sum(d.used for d in model.log_dirs[1]))


@pytest.mark.parametrize("cluster", ["src", "dst"])
def test_strait_plans_executes_and_cancels_with_the_balancer_role_only(
    secure_sandbox: Sandbox, balancer_only: None, config_file: Path, cluster: str
) -> None:
    state = secure_sandbox.clusters[cluster]
    admin_props, props = state.admin_props(), state.props()
    dirs = list(state.brokers[0].log_dirs)
    topic = f"skewed-{cluster}-{uuid.uuid4().hex[:6]}"
    produced = _setup_topic(admin_props, topic, dirs)
    observer = KafkaGateway(props)  # strait, balancer ACLs only: sees what it must see
    try:
        capacity = f"*={_capacity(observer)}"

        # Plan (dry run): moves between the broker's two disks, our topic among them.
        plan_file = config_file.parent / f"plan-{cluster}.json"
        plan = _json(
            _cli(
                config_file,
                cluster,
                "plan",
                "--capacity",
                capacity,
                "--threshold",
                "0.05",
                "--json",
                "--out",
                str(plan_file),
            )
        )
        ours = [m for m in plan["moves"] if m["topic"] == topic]
        assert ours and all(m["kind"] == "intra" for m in ours), plan["moves"]
        assert all(d.current == dirs[0] for (t, _, _), d in observer.replica_dirs([1], [topic]).items() if t == topic)

        # Execute in the background under a low throttle, then cancel mid-copy.
        started = _json(
            _cli(config_file, cluster, "execute", "--plan", str(plan_file), "--throttle", SLOW, "--detach", "--json")
        )
        store = StateStore(props)
        try:
            _wait(
                lambda: (
                    (e := store.current()) is not None
                    and e.id == started["execution"]
                    and e.status == "running"
                    and any(v["state"] == "running" for v in e.progress.get("moves", {}).values())
                ),
                60,
                "the detached executor to start a move",
            )
            assert observer.broker_configs(1, [DIR_RATE]) == {DIR_RATE: "2000"}, "our throttle is set"
            assert any(d.future for d in observer.replica_dirs([1], [topic]).values()), "a copy is in flight"
            status = _json(_cli(config_file, cluster, "status", "--json"))
            assert status["status"] == "running" and status["alive"] and status["in_flight"] >= 1

            cancelled = _json(_cli(config_file, cluster, "cancel", "--json"))
            assert cancelled["status"] == "cancelled", cancelled
            _wait(lambda: not _leftovers(observer, topic), 30, "no future replica, reassignment or throttle left")
            assert all(
                d.current == dirs[0] for (t, _, _), d in observer.replica_dirs([1], [topic]).items() if t == topic
            ), "cancelled moves stay on their source disk"
            _wait(lambda: not _alive(started["pid"]), 30, "the detached executor to exit")
        finally:
            store.close()
        assert _count(admin_props, topic) == produced

        # The same plan, to the end, in the foreground.
        final = _json(_cli(config_file, cluster, "execute", "--plan", str(plan_file), "--throttle", "50MB", "--json"))
        assert final["status"] == "done" and final["failed"] == 0, final
        assert final["done"] == len(plan["moves"])
        placed = {d.current for (t, _, _), d in observer.replica_dirs([1], [topic]).items() if t == topic}
        assert placed == set(dirs), "the topic is spread over both disks"
        _wait(lambda: not _leftovers(observer, topic), 30, "no leftovers after the run")
        assert _json(_cli(config_file, cluster, "status", "--json"))["status"] == "done"
        assert _count(admin_props, topic) == produced
    finally:
        observer.close()

    # Nothing of the password reached the executor's log.
    log = Path(tempfile.gettempdir()) / f"strait-balance-{started['execution']}.log"
    if cluster == "src" and log.exists():
        assert props["sasl.password"] not in log.read_text(errors="replace")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours (spawned by the CLI process, which has exited) is reaped by init; treat it as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _config_with(path: Path, secure_sandbox: Sandbox, **clusters: Mapping[str, Any]) -> Path:
    """A configuration whose clusters are ``clusters`` (the other one as in the sandbox)."""
    props: dict[str, Any] = {name: state.props() for name, state in secure_sandbox.clusters.items()}
    props.update(clusters)
    path.write_text(
        yaml.safe_dump({"clusters": props, "routes": [{"name": "r", "source": "src", "destination": "dst"}]})
    )
    return path


def test_refusals_are_named_within_seconds(secure_sandbox: Sandbox, tmp_path: Path) -> None:
    src, dst = secure_sandbox.clusters["src"].props(), secure_sandbox.clusters["dst"].props()
    nobody_password = secrets.token_urlsafe(16)
    admin = clients.admin(secure_sandbox.clusters["src"].admin_props())
    upsert = UserScramCredentialUpsertion(
        "nobody", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), nobody_password.encode()
    )
    admin.alter_user_scram_credentials([upsert])["nobody"].result(timeout=30)
    cases = [
        ("src", {**src, "sasl.password": "wrong-" + src["sasl.password"]}, ["User:strait", "authentication failed"]),
        (
            "dst",
            {k: v for k, v in dst.items() if k not in ("ssl.certificate.location", "ssl.key.location")},
            ["TLS failed", "certificate"],
        ),
        (
            "src",
            {**src, "sasl.username": "nobody", "sasl.password": nobody_password},
            ["User:nobody", "CLUSTER_AUTHORIZATION_FAILED"],
        ),
    ]
    for index, (cluster, props, expected) in enumerate(cases):
        config = _config_with(tmp_path / f"case-{index}.yaml", secure_sandbox, **{cluster: props})
        started = time.monotonic()
        result = _cli(config, cluster, "plan", "--capacity", "*=1GB", "--json", timeout=120)
        seconds = time.monotonic() - started
        said = " ".join(result.stderr.split())  # rich wraps long lines
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert f"cluster {cluster} (" in said and all(e in said for e in expected), said
        assert "Traceback" not in result.stderr
        assert src["sasl.password"] not in result.stderr + result.stdout
        assert seconds < 60, f"{seconds:.0f}s: an answer, not a timeout"
