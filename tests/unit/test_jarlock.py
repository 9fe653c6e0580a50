"""The checked-in jar lock: fresh for every Maven descriptor, complete, and read back as written."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from strait.sandbox import jarlock
from strait.sandbox.errors import SandboxError
from strait.sandbox.jarlock import LockedJar, RuntimeLock

_POM = {"m": "http://maven.apache.org/POM/4.0.0"}


def _direct_dependencies(pom: Path) -> set[tuple[str, str, str]]:
    root = ET.parse(pom).getroot()
    props = {el.tag.split("}")[1]: el.text or "" for el in root.findall("m:properties/*", _POM)}
    found = set()
    for dep in root.findall("m:dependencies/m:dependency", _POM):
        version = re.sub(r"\$\{([^}]+)\}", lambda m: props[m[1]], dep.findtext("m:version", "", _POM))
        found.add((dep.findtext("m:groupId", "", _POM), dep.findtext("m:artifactId", "", _POM), version))
    return found


@pytest.mark.parametrize("runtime", jarlock.RUNTIMES)
def test_the_lock_was_written_from_the_current_descriptor(runtime: str) -> None:
    # A descriptor edited without `strait sandbox lock` fails here, not on a fresh machine.
    entry = jarlock.locked(runtime)
    assert entry.descriptor == jarlock.descriptor(runtime).name
    assert entry.descriptor_sha256 == jarlock.descriptor_sha256(runtime)


@pytest.mark.parametrize("runtime", jarlock.RUNTIMES)
def test_every_direct_dependency_is_locked_at_its_descriptor_version(runtime: str) -> None:
    locked = {(j.group, j.artifact, j.version) for j in jarlock.locked(runtime).jars if not j.classifier}
    assert _direct_dependencies(jarlock.descriptor(runtime)) <= locked


@pytest.mark.parametrize("runtime", jarlock.RUNTIMES)
def test_locked_jars_have_distinct_file_names_and_full_checksums(runtime: str) -> None:
    jars = jarlock.locked(runtime).jars
    assert len({j.file_name for j in jars}) == len(jars)
    for jar in jars:
        assert re.fullmatch(r"[0-9a-f]{64}", jar.sha256), jar
        assert re.fullmatch(r"[0-9a-f]{40}", jar.sha1), jar
        assert jar.size > 0


def test_file_name_and_repository_path_follow_the_maven_layout() -> None:
    jar = LockedJar("io.netty", "netty-tcnative-boringssl-static", "2.0.74.Final", "linux-x86_64", "jar", 1, "a", "b")
    assert jar.file_name == "netty-tcnative-boringssl-static-2.0.74.Final-linux-x86_64.jar"
    assert jar.repository_path == (
        "io/netty/netty-tcnative-boringssl-static/2.0.74.Final/netty-tcnative-boringssl-static-2.0.74.Final-linux-x86_64.jar"
    )
    assert replace(jar, classifier="").file_name == "netty-tcnative-boringssl-static-2.0.74.Final.jar"


def test_parse_dependency_list_reads_plain_classified_and_module_annotated_lines() -> None:
    text = """
The following files have been resolved:
   org.slf4j:slf4j-api:jar:2.0.17:compile:/r/m2/org/slf4j/slf4j-api/2.0.17/slf4j-api-2.0.17.jar
   io.netty:netty-epoll:jar:linux-x86_64:4.1.130.Final:runtime:/r/m2/io/netty/x.jar
   org.apache.kafka:kafka-clients:jar:4.4.0:compile:/r/m2/k.jar -- module kafka.clients
"""
    assert jarlock.parse_dependency_list(text) == [
        ("org.slf4j", "slf4j-api", "jar", "", "2.0.17", Path("/r/m2/org/slf4j/slf4j-api/2.0.17/slf4j-api-2.0.17.jar")),
        ("io.netty", "netty-epoll", "jar", "linux-x86_64", "4.1.130.Final", Path("/r/m2/io/netty/x.jar")),
        ("org.apache.kafka", "kafka-clients", "jar", "", "4.4.0", Path("/r/m2/k.jar")),
    ]


def test_dump_then_load_gives_the_same_lock(tmp_path: Path) -> None:
    lock = jarlock.load()
    jarlock.dump(lock, tmp_path / "lock.json")
    assert jarlock.load(tmp_path / "lock.json") == lock


def test_the_checked_in_lock_is_in_dump_format(tmp_path: Path) -> None:
    # `strait sandbox lock` output is what is committed (no hand edits, stable diffs).
    jarlock.dump(jarlock.load(), tmp_path / "lock.json")
    assert (tmp_path / "lock.json").read_text() == jarlock.LOCK_FILE.read_text()


def test_a_stale_or_missing_lock_names_the_refresh_command(tmp_path: Path) -> None:
    stale = {name: RuntimeLock(entry.descriptor, "0" * 64, entry.jars) for name, entry in jarlock.load().items()}
    jarlock.dump(stale, tmp_path / "stale.json")
    with pytest.raises(SandboxError, match="strait sandbox lock"):
        jarlock.locked("kafka", tmp_path / "stale.json")
    with pytest.raises(SandboxError, match="strait sandbox lock"):
        jarlock.locked("kafka", tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"runtimes": {"kafka": {}}}')
    with pytest.raises(SandboxError, match="malformed"):
        jarlock.locked("kafka", tmp_path / "bad.json")
