"""The build step pyproject.toml cannot express: what the wheel carries besides the sources.

- ``strait/web/static/vendor/``: the dashboard's Chart.js, extracted from the npm tarball pinned
  in ``scripts/vendor_ui.lock.json`` after its SHA-512 integrity was checked (the source tree's
  copy is git-ignored, so a clean clone has none);
- ``strait/_build_info.json``: the commit the package was built from, for ``strait --version``.

Everything else is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if done.returncode != 0 or not done.stdout.strip():
        return "unknown"
    status = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() + ("+changes" if status.stdout.strip() else "")


class BuildWithAssets(build_py):
    """build_py, then the vendored Chart.js and the build information into the build folder."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install serves the source tree, which `make setup` fills
            return
        package = Path(self.build_lib) / "strait"
        spec = importlib.util.spec_from_file_location("vendor_ui", ROOT / "scripts" / "vendor_ui.py")
        assert spec is not None and spec.loader is not None
        vendor_ui = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vendor_ui)
        vendor_ui.vendor(package / "web" / "static" / "vendor", force=True)
        (package / "_build_info.json").write_text(json.dumps({"commit": _commit()}) + "\n")


setup(cmdclass={"build_py": BuildWithAssets})
