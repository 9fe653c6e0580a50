"""The documentation site builds without warnings, and its reference pages cover the code.

Every configuration key, `strait` command, metric, REST endpoint and ACL role that the code
defines has an entry in the built site; each is enumerated here independently of the generator
(`scripts/gen_docs.py`), so a kind of key or command it does not render fails this test.
"""

from __future__ import annotations

import html
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel

from strait.cli.main import app
from strait.config import StraitConfig
from strait.security import acls

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(MKDOCS.parent)},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return target


def _page(site: Path, name: str) -> str:
    return html.unescape((site / name / "index.html").read_text())


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field holds: ``X``, ``X | None``, ``list[X]``."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for argument in typing.get_args(annotation):
        found += _models(argument)
    return found


def _config_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        path = prefix + (field.alias or name)
        paths.append(path)
        repeated = "[]" if "list[" in str(field.annotation) else ""
        for nested in _models(field.annotation):
            paths += _config_paths(nested, f"{path}{repeated}.")
    return paths


def _commands(command: Any, path: str) -> list[str]:
    found = [path]
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command, info_name=path)
        for name in command.list_commands(ctx):
            found += _commands(command.get_command(ctx, name), f"{path} {name}")
    return found


def _metric_names() -> set[str]:
    constructor = re.compile(r"(?:MetricFamily|\bCounter|\bGauge|\bHistogram|\bSummary)\(\s*\"(strait_\w+)\"")
    names: set[str] = set()
    for path in (ROOT / "src" / "strait").rglob("*.py"):
        if {"bench", "sandbox"} & set(path.relative_to(ROOT / "src" / "strait").parts):
            continue
        names |= set(constructor.findall(path.read_text()))
    return names


def test_every_configuration_key_has_its_entry(site: Path) -> None:
    page = _page(site, "reference/configuration")
    paths = _config_paths(StraitConfig)
    assert len(paths) > 50
    missing = [p for p in paths if f"<code>{p}</code>" not in page]
    assert missing == [], f"configuration keys without a reference entry: {missing}"
    assert "<code>STRAIT_WORKER__BATCH_SHARING__PACE</code>" in page


def test_every_command_has_its_entry(site: Path) -> None:
    page = _page(site, "reference/cli")
    commands = _commands(typer.main.get_command(app), "strait")
    assert "strait topics add" in commands and "strait balance execute" in commands
    missing = [c for c in commands if f"<code>{c}</code>" not in page]
    assert missing == [], f"commands without a reference entry: {missing}"


def test_every_metric_has_its_entry(site: Path) -> None:
    page = _page(site, "reference/metrics")
    names = _metric_names()
    assert "strait_copied_records" in names and "strait_balance_alert" in names
    missing = sorted(n for n in names if f'id="{n}"' not in page)
    assert missing == [], f"metrics without a reference entry: {missing}"


def test_every_endpoint_and_acl_role_has_its_entry(site: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_docs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    document = gen_docs.openapi_document()
    api = _page(site, "reference/rest-api")
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"<code>{method.upper()} {path}</code>" in api
    assert {"/topics/{topic}", "/observability", "/balance/watch"} <= set(document["paths"])
    for hidden in ("GET /ui", "GET /metrics"):  # served, but outside the OpenAPI document
        assert f"<code>{hidden}</code>" in api
    page = _page(site, "reference/acls")
    for role in acls.ROLES:
        assert role.name in page
        for permission in role.permissions:
            assert permission.why in page


def test_the_results_pages_are_the_repository_files(site: Path) -> None:
    for name, page in (("BENCHMARKS.md", "results/benchmarks"), ("RELIABILITY.md", "results/reliability")):
        first_heading = (ROOT / name).read_text().splitlines()[0].lstrip("# ").strip()
        assert first_heading in _page(site, page)


def test_the_results_files_are_generated_from_the_result_files_alone() -> None:
    from strait.bench import report
    from strait.bench.chaos import report as chaos_report

    results = ROOT / "bench" / "results"
    benchmarks = report.render_markdown(
        {name: {**doc, "_results_dir": str(results)} for name, doc in report.load_all(results).items()}, results
    )
    assert (ROOT / "BENCHMARKS.md").read_text() == benchmarks, "BENCHMARKS.md is stale: run `strait bench report`"
    reliability = chaos_report.render(chaos_report.load_all(results))
    assert (ROOT / "RELIABILITY.md").read_text() == reliability, (
        "RELIABILITY.md is stale: run `strait bench chaos-report`"
    )
    for name, text in (("BENCHMARKS.md", benchmarks), ("RELIABILITY.md", reliability)):
        assert not re.search(r"(?i)end of session|\bsession\)|\bissue \d|\bhelper", text), name
        commands = [line for line in text.splitlines() if line.startswith("Command:")]
        assert commands and all("commit `" in line for line in commands), name
    assert all("load average" in line for line in benchmarks.splitlines() if line.startswith("Command:"))


def test_no_results_folder_is_named_after_work_sessions_or_issues() -> None:
    names = [p.name for p in (ROOT / "bench" / "results").rglob("*")]
    assert not [n for n in names if re.search(r"(?i)session-start|before-session|issue\d|eighth|tenth|twelfth", n)]


def test_every_configuration_key_is_described_by_the_code() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_docs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert [k.path for k in gen_docs.config_keys() if not k.description] == []
