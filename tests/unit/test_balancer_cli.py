"""`strait balance` refuses bad input with a message naming what was wrong, before touching Kafka."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from strait.balancer.plan import InterBrokerMove, Plan
from strait.cli.balance import app

runner = CliRunner()


def _plan_file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_cluster_must_be_named() -> None:
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2
    assert "--bootstrap" in result.stderr


def test_bad_throttle_is_named() -> None:
    result = runner.invoke(app, ["execute", "--bootstrap", "127.0.0.1:1", "--throttle", "fast"])
    assert result.exit_code == 2
    assert "--throttle" in result.stderr and "fast" in result.stderr


def test_bad_mode_is_named() -> None:
    result = runner.invoke(app, ["execute", "--bootstrap", "127.0.0.1:1", "--mode", "yolo"])
    assert result.exit_code == 2
    assert "yolo" in result.stderr


def test_malformed_plan_names_the_partition(tmp_path: Path) -> None:
    plan = Plan(operation="x", moves=(InterBrokerMove("orders", 7, (1, 2), (3, 3), {}, 5),))
    data = json.loads(plan.to_json())
    result = runner.invoke(app, ["execute", "--bootstrap", "127.0.0.1:1", "--plan", str(_plan_file(tmp_path, data))])
    assert result.exit_code == 2
    assert "orders-7" in result.stderr


def test_unreadable_plan_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["execute", "--bootstrap", "127.0.0.1:1", "--plan", str(tmp_path / "missing.json")])
    assert result.exit_code == 2
    assert "missing.json" in result.stderr
    result = runner.invoke(app, ["execute", "--bootstrap", "127.0.0.1:1", "--plan", str(_plan_file(tmp_path, "{"))])
    assert result.exit_code == 2
    assert "not valid JSON" in result.stderr


def test_bad_capacity_is_named() -> None:
    result = runner.invoke(app, ["plan", "--bootstrap", "127.0.0.1:1", "--capacity", "/data=lots"])
    assert result.exit_code == 2
    assert "/data=lots" in result.stderr
