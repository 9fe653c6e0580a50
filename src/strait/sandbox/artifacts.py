"""Resolve the real Kafka, ZooKeeper and MirrorMaker 2 jars from Maven Central.

Each runtime has its own Maven descriptor beside this module and its own classpath folder in
a cache outside git (``~/.cache/strait`` unless ``STRAIT_CACHE`` says otherwise). A folder is
complete only once its marker file is written, so an interrupted download is redone rather
than half-used, and a second run downloads nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from strait.sandbox.errors import SandboxError

RUNTIMES = ("kafka", "zookeeper", "mirrormaker")
_MAVEN_DIR = Path(__file__).with_name("maven")
_MARKER = ".complete"


def cache_root() -> Path:
    """Where Strait keeps downloaded jars and the default sandbox state."""
    return Path(os.environ.get("STRAIT_CACHE", Path.home() / ".cache" / "strait"))


def descriptor(runtime: str) -> Path:
    if runtime not in RUNTIMES:
        raise SandboxError(f"unknown runtime {runtime!r}; expected one of {', '.join(RUNTIMES)}")
    return _MAVEN_DIR / f"{runtime}.pom.xml"


def _lib_dir(runtime: str) -> Path:
    # Keyed by the descriptor's content, so changing a version resolves afresh.
    digest = hashlib.sha256(descriptor(runtime).read_bytes()).hexdigest()[:12]
    return cache_root() / "lib" / f"{runtime}-{digest}"


def resolve(runtime: str, *, quiet: bool = True) -> Path:
    """Return the folder holding every jar of ``runtime``, downloading them on first use."""
    target = _lib_dir(runtime)
    if (target / _MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SandboxError("Maven ('mvn') is not on PATH; it is needed once to fetch the Kafka/ZooKeeper jars")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn, "-B", "-f", str(descriptor(runtime)),
        f"-Dmaven.repo.local={cache_root() / 'm2'}",
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
    ]
    if quiet:
        cmd.insert(2, "-q")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        missing = re.search(r"(Could not (?:find|resolve|transfer) artifact [^\s]+)", output)
        cause = missing.group(1) if missing else output.strip().splitlines()[-1:] or ["unknown error"]
        raise SandboxError(f"resolving the {runtime} runtime from {descriptor(runtime).name} failed: {cause}")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / _MARKER).write_text("ok\n")
    return target


def classpath(runtime: str) -> str:
    """A Java classpath string with every jar of ``runtime``."""
    return str(resolve(runtime) / "*")
