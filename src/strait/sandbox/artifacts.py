"""The real Kafka, ZooKeeper and MirrorMaker 2 jars, fetched from Maven Central by Python.

What to fetch is the checked-in jar lock (``strait.sandbox.jarlock``): coordinates and checksums
of every jar, so neither Maven nor a JDK is needed to set up. Jars land in a cache outside git
(``~/.cache/strait`` unless ``STRAIT_CACHE`` says otherwise) in two layers Maven also uses:

- ``m2/``: a Maven repository layout, one verified file per coordinate; a file already there
  whose SHA-256 matches the lock (from an earlier run, or from Maven) is not downloaded again;
- ``lib/<runtime>-<digest of its descriptor>/``: the runtime's classpath folder, hard links into
  ``m2``. It is complete only once its marker file is written, so an interrupted set-up is redone
  rather than half-used; folders that Maven filled before the lock existed are used as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from strait.sandbox import jarlock
from strait.sandbox.errors import SandboxError
from strait.sandbox.jarlock import RUNTIMES, LockedJar

__all__ = [
    "MAVEN_CENTRAL",
    "RUNTIMES",
    "cache_root",
    "check_central_sha1",
    "classpath",
    "fetch",
    "local_repository",
    "resolve",
]

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
_MARKER = ".complete"
_ATTEMPTS = 4
_PARALLEL = 8

Progress = Callable[[str], None]


def cache_root() -> Path:
    """Where Strait keeps downloaded jars and the default sandbox state."""
    return Path(os.environ.get("STRAIT_CACHE", Path.home() / ".cache" / "strait"))


def local_repository() -> Path:
    """The cache's Maven repository layout (shared with ``mvn`` when the lock is refreshed)."""
    return cache_root() / "m2"


def _lib_dir(runtime: str) -> Path:
    # Keyed by the descriptor's content, so changing a version resolves afresh (and folders that
    # Maven filled for the same descriptor before the lock existed are still found).
    return cache_root() / "lib" / f"{runtime}-{jarlock.descriptor_sha256(runtime)[:12]}"


def resolve(runtime: str, *, progress: Progress | None = None) -> Path:
    """Return the folder holding every jar of ``runtime``, fetching missing ones on first use."""
    target = _lib_dir(runtime)
    if (target / _MARKER).exists():
        return target
    entry = jarlock.locked(runtime)
    fetched = fetch(entry.jars, progress=progress)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-", dir=target.parent))
    try:
        for jar, source in zip(entry.jars, fetched, strict=True):
            _link(source, staging / jar.file_name)
        (staging / _MARKER).write_text("ok\n")
        if (target / _MARKER).exists():  # another process finished first: use its folder
            return target
        shutil.rmtree(target, ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:
            if not (target / _MARKER).exists():  # not a concurrent finish: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def classpath(runtime: str) -> str:
    """A Java classpath string with every jar of ``runtime``."""
    return str(resolve(runtime) / "*")


def fetch(jars: Iterable[LockedJar], *, progress: Progress | None = None) -> list[Path]:
    """Make every jar present and verified in the local repository; return their paths in order."""
    wanted = list(jars)
    repo = local_repository()
    missing = [jar for jar in wanted if not _verified(repo / jar.repository_path, jar)]
    if missing and progress is not None:
        megabytes = sum(jar.size for jar in missing) / 1e6
        progress(f"downloading {len(missing)} jars ({megabytes:.1f} MB) from {MAVEN_CENTRAL}")
    if missing:
        with _client() as client, ThreadPoolExecutor(max_workers=_PARALLEL) as pool:
            # list() re-raises the first failure; leaving the pool waits for the other downloads
            list(pool.map(lambda jar: _download(client, jar, repo / jar.repository_path), missing))
    return [repo / jar.repository_path for jar in wanted]


def _client() -> httpx.Client:
    return httpx.Client(timeout=httpx.Timeout(60.0, connect=20.0), follow_redirects=True)


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _verified(path: Path, jar: LockedJar) -> bool:
    try:
        return path.stat().st_size == jar.size and _digest(path, "sha256") == jar.sha256
    except FileNotFoundError:
        return False


def _download(client: httpx.Client, jar: LockedJar, dest: Path) -> None:
    url = f"{MAVEN_CENTRAL}/{jar.repository_path}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f"{dest.name}.{os.getpid()}.{id(jar)}.part")
    last: Exception | None = None
    for attempt in range(_ATTEMPTS):
        try:
            sha256, sha1 = hashlib.sha256(), hashlib.sha1()
            with client.stream("GET", url) as response, open(part, "wb") as out:
                response.raise_for_status()
                for chunk in response.iter_bytes(1 << 16):
                    sha256.update(chunk)
                    sha1.update(chunk)
                    out.write(chunk)
            if sha256.hexdigest() != jar.sha256 or sha1.hexdigest() != jar.sha1:
                # A mismatch is not retried: Maven Central serves immutable files, so this is
                # tampering, a broken proxy or a wrong lock, and each needs a human.
                raise SandboxError(
                    f"{url} does not match the jar lock: sha256 {sha256.hexdigest()} (locked {jar.sha256}), "
                    f"sha1 {sha1.hexdigest()} (locked {jar.sha1})"
                )
            os.replace(part, dest)
            return
        except SandboxError:
            raise
        except httpx.HTTPStatusError as exc:
            last = exc
            if exc.response.status_code < 500:
                break
        except (httpx.TransportError, OSError) as exc:
            last = exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        time.sleep(min(8.0, 0.5 * 2**attempt))
    raise SandboxError(f"downloading {url} failed: {last}")


def _link(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:  # a file system without hard links
        shutil.copy2(source, dest)


def check_central_sha1(jars: Iterable[LockedJar]) -> list[str]:
    """Compare each jar's SHA-1 with the ``.sha1`` file Maven Central publishes; return the mismatches."""
    wanted = list(jars)

    def check(client: httpx.Client, jar: LockedJar) -> str | None:
        url = f"{MAVEN_CENTRAL}/{jar.repository_path}.sha1"
        response = client.get(url)
        if response.status_code != 200:
            return f"{url}: HTTP {response.status_code}"
        published = response.text.split()[0].strip().lower() if response.text.strip() else ""
        return None if published == jar.sha1 else f"{url}: Central says {published!r}, the lock {jar.sha1}"

    with _client() as client, ThreadPoolExecutor(max_workers=_PARALLEL) as pool:
        results = list(pool.map(lambda jar: check(client, jar), wanted))
    return [r for r in results if r is not None]
