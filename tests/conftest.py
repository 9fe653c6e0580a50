"""Shared fixtures: real Kafka clusters and a real ZooKeeper from Strait's own sandbox.

The default sandbox (clusters ``src`` and ``dst``, one broker each, two log dirs per broker,
one ZooKeeper) starts once per test session. Tests that need another shape (several brokers,
racks) ask ``sandbox_factory`` for one; it is stopped when their module ends. ``secure_sandbox``
is a second session sandbox whose clusters need credentials. Teardown runs even when tests
fail, so no JVM outlives the session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strait.sandbox import Sandbox, SandboxSpec


@pytest.fixture
def store() -> str:
    """Where a test fleet coordinates (tests/integration/test_replication.py's make_fleet, shared
    by other modules); the tests chosen to run on both stores parametrize it."""
    return "zookeeper"


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """The session's sandbox: ZooKeeper plus clusters ``src`` and ``dst`` (1 broker, 2 log dirs each)."""
    state_dir = tmp_path_factory.mktemp("sandbox")
    sb = Sandbox.up(SandboxSpec(clusters=("src", "dst"), brokers=1, log_dirs=2, state_dir=state_dir))
    try:
        yield sb
    finally:
        sb.down(keep=True)  # keep logs under pytest's tmp dir for post-mortems


@pytest.fixture(scope="session")
def secure_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """ZooKeeper plus ``src`` (SASL/SCRAM-SHA-512 over TLS) and ``dst`` (mutual TLS), 1 broker and 2 log
    dirs each (so the balancer has disks to move replicas between). ``props()`` is the least-privilege
    user ``strait``; ``admin_props()`` the super user."""
    state_dir = tmp_path_factory.mktemp("secure-sandbox")
    spec = SandboxSpec(
        clusters=("src", "dst"),
        brokers=1,
        log_dirs=2,
        state_dir=state_dir,
        security={"src": "sasl_ssl", "dst": "mtls"},
        startup_timeout_s=240,
    )
    sb = Sandbox.up(spec)
    try:
        yield sb
    finally:
        sb.down(keep=True)


@pytest.fixture(scope="module")
def sandbox_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[SandboxSpec], Sandbox]]:
    """Start sandboxes of any shape; all of them stop when the requesting module ends."""
    started: list[Sandbox] = []

    def start(spec: SandboxSpec) -> Sandbox:
        state_dir: Path = tmp_path_factory.mktemp("sandbox-" + "-".join(spec.clusters))
        sb = Sandbox.up(SandboxSpec(**{**spec.__dict__, "state_dir": state_dir}))
        started.append(sb)
        return sb

    try:
        yield start
    finally:
        for sb in started:
            sb.down(keep=True)
