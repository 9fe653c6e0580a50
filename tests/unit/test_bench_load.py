"""Every measured `strait bench` command refuses a busy machine before it starts anything, unless
told `--ignore-load`; what was checked is recorded in the result's params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from strait.bench import machine, report
from strait.cli import bench, bench_events
from strait.sandbox import Sandbox

# The measured commands: each gets as far as its load check with its defaults.
MEASURED = [
    "throughput",
    "security",
    "latency",
    "isolation",
    "add-topics",
    "worker-failure",
    "failover",
    "smoke",
    "profile",
    "all",
    "delivery",
    "assignment",
    "zookeeper",
    "planner",
    "longtail",
]


class Started(Exception):
    """Raised where a command would start its first cluster or computation."""


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "load_average", lambda: [9.5, 7.0, 6.0])

    def start(*_args: Any, **_kwargs: Any) -> Any:
        raise Started()

    monkeypatch.setattr(Sandbox, "up", start)
    from strait.bench import assignment, balancer_longtail, balancer_plan

    monkeypatch.setattr(assignment, "run", start)
    monkeypatch.setattr(balancer_longtail, "run", start)
    monkeypatch.setattr(balancer_plan, "run", start)


@pytest.mark.parametrize("command", MEASURED)
def test_a_busy_machine_is_refused_before_anything_starts(busy: None, command: str) -> None:
    result = CliRunner().invoke(bench.app, [command])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "load average 9.5 (1 minute) is above 1.0" in result.output
    assert "--ignore-load" in result.output


@pytest.mark.parametrize("command", ["smoke", "latency", "delivery", "assignment", "planner"])
def test_ignore_load_or_a_higher_threshold_lets_it_start(busy: None, command: str) -> None:
    for options in (["--ignore-load"], ["--max-load", "10"]):
        result = CliRunner().invoke(bench.app, [command, *options])
        assert isinstance(result.exception, Started), (result.output, result.exception)


def test_the_options_are_defined_once_and_named_alike_everywhere() -> None:
    commands = typer.main.get_command(bench.app).commands  # type: ignore[attr-defined]
    for name in MEASURED:
        params = {p.name: p for p in commands[name].params}
        assert params["max_load"].opts == ["--max-load"] and params["max_load"].default == 1.0, name
        assert params["ignore_load"].opts == ["--ignore-load"] and params["ignore_load"].default is False, name


def test_the_load_checked_is_recorded_in_every_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    saved: list[dict[str, Any]] = []

    class FakeSandbox:
        def down(self, keep: bool = False) -> None:
            pass

    monkeypatch.setattr(machine, "load_average", lambda: [0.5, 0.4, 0.3])
    monkeypatch.setattr(machine, "describe", lambda: {})
    monkeypatch.setattr(Sandbox, "up", lambda *_a, **_k: FakeSandbox())

    def save(result: dict[str, Any], *_args: Any, **_kwargs: Any) -> Path:
        saved.append(result)
        return tmp_path / "r.json"

    monkeypatch.setattr(report, "save", save)
    monkeypatch.setattr(report, "plot", lambda *_a, **_k: None)
    monkeypatch.setattr(report, "write_markdown", lambda *_a, **_k: None)
    bench._session(
        "strait",
        tmp_path,
        tmp_path / "B.md",
        tmp_path / "work",
        False,
        lambda _bench: [{"scenario": "a"}, {"scenario": "b", "params": {"rate": 1}}],
        max_load=2.0,
        ignore_load=False,
    )
    checked = {"max_load": 2.0, "ignore_load": False, "load_at_check": [0.5, 0.4, 0.3]}
    assert [r["params"] for r in saved] == [checked, {"rate": 1, **checked}]


@pytest.mark.parametrize(
    ("option", "passed"), [([], None), (["--copy", "record"], "record"), (["--copy", "batch"], "batch")]
)
def test_add_topics_runs_the_copy_mode_it_names(
    monkeypatch: pytest.MonkeyPatch, option: list[str], passed: str
) -> None:
    # Batch is the route default, so `--copy record` must say so to the route (None means the
    # default).
    from strait.bench import scenarios

    asked: list[str | None] = []
    monkeypatch.setattr(bench_events, "_session", lambda *args, **_kwargs: args[5](object()))

    def add_topics(_bench: object, **kwargs: Any) -> dict[str, Any]:
        asked.append(kwargs["copy"])
        return {}

    monkeypatch.setattr(scenarios, "add_topics", add_topics)
    result = CliRunner().invoke(bench.app, ["add-topics", *option])
    assert result.exit_code == 0, (result.output, result.exception)
    assert asked == [passed]
