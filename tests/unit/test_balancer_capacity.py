"""Disk capacities from the configuration file and the command line, and the refusal to balance
dirs that share one filesystem without them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from strait.balancer import operations
from strait.balancer.capacity import (
    Capacities,
    parse_key,
    require_capacities,
    same_filesystem,
    shared_filesystems,
)
from strait.balancer.errors import CapacityError
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition
from strait.cli.balance import app
from strait.cli.balance_args import CliError, target
from strait.config import ConfigError, parse_config

GB = 1000**3


def test_rule_keys() -> None:
    assert parse_key("*") == (None, "*")
    assert parse_key("/data/ssd*") == (None, "/data/ssd*")
    assert parse_key("3") == (3, "*")
    assert parse_key(3) == (3, "*")
    assert parse_key("3:*") == (3, "*")
    assert parse_key("3:/data/d1") == (3, "/data/d1")
    for bad in ("", "data", "3:", "x:/d"):
        with pytest.raises(ValueError, match="capacity key"):
            parse_key(bad)


def test_most_specific_rule_wins_then_the_first_listed() -> None:
    caps = Capacities.of({"*": 1, "/data/d*": 2, "/data/d1": 3, "3": 4, "3:/data/d*": 5, "3:/data/d2": 6, "/data/*": 7})
    assert caps.size_for(1, "/other") == 1
    assert caps.size_for(1, "/data/d9") == 2  # two globs match: the first listed
    assert caps.size_for(1, "/data/d1") == 3
    assert caps.size_for(3, "/other") == 4
    assert caps.size_for(3, "/data/d1") == 5
    assert caps.size_for(3, "/data/d2") == 6
    assert Capacities.of({"/data/d1": 9}).size_for(1, "/data/d2") is None


def test_command_line_overrides_the_file_dir_by_dir() -> None:
    config = {"*": 100, "3:/data/d1": 50}
    merged = Capacities.of({"/data/d2": 7}).over(config)
    assert merged.size_for(3, "/data/d2") == 7  # the flag's rule, though less specific than none
    assert merged.size_for(3, "/data/d1") == 50  # no flag matches: the file decides
    assert merged.size_for(1, "/x") == 100


def _config(tmp_path: Path, balance: str) -> Path:
    path = tmp_path / "strait.yaml"
    path.write_text(
        "clusters:\n  big: {bootstrap.servers: '127.0.0.1:1'}\n"
        "routes: [{name: r, source: big, destination: big}]\n" + balance
    )
    return path


def test_config_file_capacities_are_typed_and_checked_at_load(tmp_path: Path) -> None:
    base = {
        "clusters": {"big": {"bootstrap.servers": "x:1"}},
        "routes": [{"name": "r", "source": "big", "destination": "big"}],
    }
    loaded = parse_config({**base, "balance": {"capacities": {"big": {"*": "100GB", 3: "2TiB", "3:/d1": 5000}}}}, {})
    assert loaded.balance.capacities["big"] == {"*": 100 * GB, "3": 2 * 1024**4, "3:/d1": 5000}
    assert loaded.balance.capacities_of("big").size_for(3, "/d1") == 5000
    assert not loaded.balance.capacities_of("other")
    assert not parse_config(base, {}).balance.capacities
    problems = {
        "nope": {"capacities": {"nope": {"*": "1GB"}}},
        "lots": {"capacities": {"big": {"*": "lots"}}},
        "'data'": {"capacities": {"big": {"data": "1GB"}}},
        "says the same": {"capacities": {"big": {"3": "1GB", "3:*": "2GB"}}},
        "more than zero": {"capacities": {"big": {"*": 0}}},
        "capacity": {"capacity": {}},
    }
    for needle, balance in problems.items():
        with pytest.raises(ConfigError, match="balance") as info:
            parse_config({**base, "balance": balance}, {})
        assert needle in str(info.value)


def test_cli_takes_capacities_from_the_file_and_flags_over_them(tmp_path: Path) -> None:
    path = _config(tmp_path, "balance:\n  capacities:\n    big:\n      '*': 10GB\n      2: 20GB\n")
    where = target(None, "big", path, ["2=5GB"])
    assert where.props == {"bootstrap.servers": "127.0.0.1:1"}
    assert where.capacities.size_for(1, "/d") == 10 * GB
    assert where.capacities.size_for(2, "/d") == 5 * GB
    assert target("h:9", "big", path).props == {"bootstrap.servers": "h:9"}  # --bootstrap wins for the address
    assert target("h:9", None, None, ["*=1GB"]).capacities.size_for(7, "/x") == GB
    with pytest.raises(CliError, match="--config"):
        target(None, "big", None)


def test_cli_names_a_bad_capacity_in_the_file_before_connecting(tmp_path: Path) -> None:
    path = _config(tmp_path, "balance:\n  capacities:\n    big:\n      '*': plenty\n")
    result = CliRunner().invoke(app, ["plan", "--cluster", "big", "--config", str(path)])
    assert result.exit_code == 2
    assert "balance.capacities.big" in result.stderr and "plenty" in result.stderr
    result = CliRunner().invoke(app, ["plan", "--bootstrap", "127.0.0.1:1", "--capacity", "data=1GB"])
    assert result.exit_code == 2 and "capacity key 'data'" in result.stderr


# ---- dirs sharing a filesystem ----------------------------------------------------------------------


def _shared(configured: bool = False) -> ClusterModel:
    """Broker 1's two dirs on one filesystem (the sandbox's case), broker 2's on two disks."""
    total, free = 500 * GB, 120 * GB
    dirs = [
        LogDir(1, "/k/b1/d0", 10_000_000 if configured else total, 3_000_000, total, free, configured),
        LogDir(1, "/k/b1/d1", 10_000_000 if configured else total, 0, total, free, configured),
        LogDir(2, "/k/b2/d0", 2 * GB, 1_000_000, 2 * GB, GB),
        LogDir(2, "/k/b2/d1", 2 * GB, 0, 2 * GB, 2 * GB - 5),
    ]
    parts = [Partition("t", i, (1,), ("/k/b1/d0",), 1_000_000) for i in range(3)]
    parts.append(Partition("u", 0, (2,), ("/k/b2/d0",), 1_000_000))
    return ClusterModel.build([Broker(1), Broker(2)], dirs, parts)


def test_dirs_reporting_one_filesystem_are_found_per_broker() -> None:
    found = shared_filesystems(_shared())
    assert list(found) == [1]
    assert [d.path for d in found[1]] == ["/k/b1/d0", "/k/b1/d1"]
    assert shared_filesystems(_shared(configured=True)) == {}
    assert shared_filesystems(_shared(), excluded=[1]) == {}


def test_one_filesystem_allows_for_writes_between_the_brokers_two_readings() -> None:
    total = 500 * GB
    one = LogDir(1, "/a", total, 0, total, 100 * GB)
    assert same_filesystem(one, LogDir(1, "/b", total, 9, total, 100 * GB - 4096))
    assert not same_filesystem(one, LogDir(1, "/b", total, 9, total, 99 * GB))  # two disks of one size
    assert not same_filesystem(one, LogDir(1, "/b", total + 1, 9, total + 1, 100 * GB))
    assert not same_filesystem(LogDir(1, "/a", 5, 0), LogDir(1, "/b", 5, 0))  # nothing reported


@pytest.mark.parametrize("operation", ["rebalance", "drain", "fill"])
def test_balancing_by_usage_is_refused_naming_the_broker_and_dirs(operation: str) -> None:
    model = _shared()
    with pytest.raises(CapacityError) as info:
        if operation == "rebalance":
            operations.rebalance(model)
        elif operation == "drain":
            operations.drain(model, [2])
        else:
            operations.fill(model, [2])
    text = str(info.value)
    assert "broker 1" in text and "/k/b1/d0" in text and "/k/b1/d1" in text
    assert "--capacity" in text and "balance.capacities" in text
    assert "broker 2" not in text


def test_capacities_lift_the_refusal_and_other_operations_never_need_them() -> None:
    plan = operations.rebalance(_shared(configured=True))
    assert any(m.kind == "intra" for m in plan.moves), "with sizes, broker 1's skew shows and is fixed"
    assert plan.capacities["1:/k/b1/d0"] == 10_000_000
    operations.fix_racks(_shared())
    operations.leaders(_shared())
    operations.drain(_shared(), [1])  # the shared dirs are being emptied: their sizes do not matter
    require_capacities(_shared(), excluded=[1])
