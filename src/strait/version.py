"""What ``strait --version`` prints: the installed version and the commit it was built from."""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def package_version() -> str:
    """The installed `strait` distribution's version (from its metadata)."""
    try:
        return version("strait")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def build_commit() -> str:
    """The commit recorded when the wheel was built; from a git checkout (an editable install), its
    HEAD, with ``+changes`` when the sources differ from it; else ``unknown``."""
    try:
        recorded = json.loads(resources.files("strait").joinpath("_build_info.json").read_text())
        return str(recorded["commit"])
    except (OSError, ValueError, KeyError):
        pass
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / ".git").exists():
        return "unknown"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True, timeout=10
        )
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=checkout, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0 or not head.stdout.strip():
        return "unknown"
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def version_line() -> str:
    return f"strait {package_version()} (commit {build_commit()})"
