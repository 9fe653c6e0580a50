"""Vendor the dashboard's charting library (Chart.js, UMD build) from the npm registry, without npm.

The version, tarball and ``integrity`` (Subresource Integrity, SHA-512) come from the npm registry
once and are pinned in ``scripts/vendor_ui.lock.json``; every run downloads that tarball, refuses it
unless the hash matches, and extracts ``dist/chart.umd.js`` and the licence into
``src/strait/web/static/vendor/`` (git-ignored). A run that finds the pinned file present does
nothing. The tarball is kept in ``$STRAIT_CACHE/npm`` (``~/.cache/strait/npm``), and checked again
whenever it is used from there, so a second build needs no network. Building a wheel
(``setup.py``) vendors into the build from the tarball, so every wheel carries a checked copy.
Standard library only.

    python scripts/vendor_ui.py                   vendor the pinned version (what `make setup` runs)
    python scripts/vendor_ui.py --target DIR      ... into another folder
    python scripts/vendor_ui.py --lock [VERSION]  re-pin from the registry (a version or a dist-tag; latest)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = Path(__file__).with_name("vendor_ui.lock.json")
DEFAULT_TARGET = ROOT / "src" / "strait" / "web" / "static" / "vendor"
REGISTRY = "https://registry.npmjs.org"
PACKAGE = "chart.js"
# tarball member -> vendored file name
FILES = {"package/dist/chart.umd.js": "chart.umd.js", "package/LICENSE.md": "chart.js.LICENSE.md"}
STAMP = "chart.js.integrity"


def _get(url: str, attempts: int = 4) -> bytes:
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                body: bytes = response.read()
                return body
        except OSError as exc:  # URLError, timeouts and resets are all OSErrors
            if attempt == attempts - 1:
                raise SystemExit(f"vendor_ui: downloading {url} failed: {exc}") from exc
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def check_integrity(data: bytes, integrity: str) -> None:
    """Raise SystemExit unless ``data`` matches the npm ``integrity`` string (``sha512-<base64>``)."""
    algorithm, _, expected = integrity.partition("-")
    if algorithm not in ("sha512", "sha384", "sha256"):
        raise SystemExit(f"vendor_ui: unsupported integrity algorithm {algorithm!r}")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise SystemExit(f"vendor_ui: the tarball's {algorithm} is {actual}, the lock says {expected}: refusing it")


def _cache_dir() -> Path:
    return Path(os.environ.get("STRAIT_CACHE") or Path.home() / ".cache" / "strait") / "npm"


def tarball(pin: dict[str, str]) -> bytes:
    """The pinned tarball, integrity-checked: from the cache when it holds a good copy, else from
    the registry (then cached)."""
    cached = _cache_dir() / pin["tarball"].rsplit("/", 1)[-1]
    if cached.is_file():
        data = cached.read_bytes()
        try:
            check_integrity(data, pin["integrity"])
            return data
        except SystemExit:
            cached.unlink()  # a damaged copy: fetch it again
    data = _get(pin["tarball"])
    check_integrity(data, pin["integrity"])
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        part = cached.with_name(cached.name + ".part")
        part.write_bytes(data)
        part.replace(cached)
    except OSError:
        pass  # a read-only home: the next build downloads again
    return data


def vendor(target: Path, force: bool) -> None:
    pin = json.loads(LOCK.read_text())
    stamp = target / STAMP
    present = all((target / name).is_file() and (target / name).stat().st_size > 0 for name in FILES.values())
    if present and not force and stamp.is_file() and stamp.read_text().strip() == pin["integrity"]:
        return
    data = tarball(pin)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member, name in FILES.items():
            extracted = tar.extractfile(member)
            if extracted is None:
                raise SystemExit(f"vendor_ui: {member} is not a file in {pin['tarball']}")
            part = target / f"{name}.part"
            part.write_bytes(extracted.read())
            part.replace(target / name)
    stamp.write_text(pin["integrity"] + "\n")
    print(f"vendored {PACKAGE} {pin['version']} (integrity checked) -> {target / FILES['package/dist/chart.umd.js']}")


def lock(version: str) -> None:
    meta = json.loads(_get(f"{REGISTRY}/{PACKAGE}/{version}"))
    pin = {
        "package": PACKAGE,
        "version": meta["version"],
        "tarball": meta["dist"]["tarball"],
        "integrity": meta["dist"]["integrity"],
    }
    check_integrity(_get(pin["tarball"]), pin["integrity"])
    LOCK.write_text(json.dumps(pin, indent=1) + "\n")
    print(f"pinned {PACKAGE} {pin['version']} in {LOCK}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, default=DEFAULT_TARGET, help="folder to vendor into")
    parser.add_argument("--force", action="store_true", help="download again even if present")
    parser.add_argument("--lock", nargs="?", const="latest", metavar="VERSION", help="re-pin from the registry")
    args = parser.parse_args(argv)
    if args.lock:
        lock(args.lock)
    else:
        vendor(args.target, args.force)


if __name__ == "__main__":
    main(sys.argv[1:])
