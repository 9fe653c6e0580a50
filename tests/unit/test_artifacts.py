"""Fetching locked jars: verified files are reused, downloads are checked, and old cache folders still work.

Maven Central is replaced by an ``httpx.MockTransport`` here; the real download runs in
``tests/integration/test_bare_machine.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from strait.sandbox import artifacts, jarlock
from strait.sandbox.errors import SandboxError
from strait.sandbox.jarlock import LockedJar, RuntimeLock


def _jar(artifact: str, data: bytes) -> LockedJar:
    return LockedJar(
        "org.example", artifact, "1.0", "", "jar", len(data),
        hashlib.sha256(data).hexdigest(), hashlib.sha1(data).hexdigest(),
    )  # fmt: skip


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STRAIT_CACHE", str(tmp_path))
    monkeypatch.setattr(artifacts.time, "sleep", lambda _s: None)
    return tmp_path


def _serve(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response]) -> list[str]:
    asked: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return handler(request)

    monkeypatch.setattr(artifacts, "_client", lambda: httpx.Client(transport=httpx.MockTransport(record)))
    return asked


def test_a_verified_file_in_the_local_repository_is_not_downloaded(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = _jar("present", b"jar bytes")
    path = cache / "m2" / jar.repository_path
    path.parent.mkdir(parents=True)
    path.write_bytes(b"jar bytes")
    asked = _serve(monkeypatch, lambda r: httpx.Response(500))
    assert artifacts.fetch([jar]) == [path]
    assert asked == []


def test_a_missing_or_corrupt_file_is_downloaded_from_maven_central(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, corrupt = _jar("missing", b"first"), _jar("corrupt", b"second")
    damaged = cache / "m2" / corrupt.repository_path
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"secomd")
    bodies = {good.repository_path: b"first", corrupt.repository_path: b"second"}
    asked = _serve(monkeypatch, lambda r: httpx.Response(200, content=bodies[r.url.path.split("/maven2/", 1)[1]]))
    paths = artifacts.fetch([good, corrupt])
    assert [p.read_bytes() for p in paths] == [b"first", b"second"]
    assert sorted(asked) == sorted(f"{artifacts.MAVEN_CENTRAL}/{j.repository_path}" for j in (good, corrupt))


def test_a_download_that_does_not_match_the_lock_is_refused_and_not_kept(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = _jar("tampered", b"the real jar")
    _serve(monkeypatch, lambda r: httpx.Response(200, content=b"something else"))
    with pytest.raises(SandboxError, match="does not match the jar lock"):
        artifacts.fetch([jar])
    folder = cache / "m2" / jar.repository_path
    assert not folder.parent.exists() or list(folder.parent.iterdir()) == []


def test_server_errors_are_retried_and_a_missing_artifact_is_not(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = _jar("flaky", b"eventually")
    answers = iter([httpx.Response(503), httpx.Response(502), httpx.Response(200, content=b"eventually")])
    _serve(monkeypatch, lambda r: next(answers))
    assert artifacts.fetch([jar])[0].read_bytes() == b"eventually"

    asked = _serve(monkeypatch, lambda r: httpx.Response(404))
    with pytest.raises(SandboxError, match="404"):
        artifacts.fetch([_jar("absent", b"x")])
    assert len(asked) == 1


def test_resolve_builds_the_classpath_folder_from_the_lock(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = (_jar("one", b"1"), _jar("two", b"22"))
    digest = jarlock.descriptor_sha256("zookeeper")
    monkeypatch.setattr(jarlock, "locked", lambda runtime: RuntimeLock("zookeeper.pom.xml", digest, jars))
    bodies = {j.repository_path: d for j, d in zip(jars, (b"1", b"22"), strict=True)}
    _serve(monkeypatch, lambda r: httpx.Response(200, content=bodies[r.url.path.split("/maven2/", 1)[1]]))
    folder = artifacts.resolve("zookeeper")
    assert folder == cache / "lib" / f"zookeeper-{digest[:12]}"
    assert sorted(p.name for p in folder.iterdir()) == [".complete", "one-1.0.jar", "two-1.0.jar"]
    assert (folder / "two-1.0.jar").read_bytes() == b"22"
    assert not [p for p in folder.parent.iterdir() if "partial" in p.name]


def test_a_folder_maven_completed_before_the_lock_existed_is_used_as_it_is(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache layout is unchanged: lib/<runtime>-<descriptor digest> with its marker.
    folder = cache / "lib" / f"kafka-{jarlock.descriptor_sha256('kafka')[:12]}"
    folder.mkdir(parents=True)
    (folder / "kafka_2.13-4.4.0.jar").write_bytes(b"from mvn")
    (folder / ".complete").write_text("ok\n")
    asked = _serve(monkeypatch, lambda r: httpx.Response(500))
    assert artifacts.classpath("kafka") == f"{folder}/*"
    assert asked == []
