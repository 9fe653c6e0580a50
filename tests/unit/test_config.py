"""Configuration: the documented shape loads, the environment overrides, errors name the key."""

from __future__ import annotations

import copy
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from strait.config import ConfigError, load_config, parse_config

BASIC = """
zookeeper: {connect: "127.0.0.1:2181", root: /strait}
clusters:
  src: {bootstrap.servers: "127.0.0.1:9092", security.protocol: SSL}
  dst: {bootstrap.servers: "127.0.0.1:9093"}
routes:
  - {name: src-dst, source: src, destination: dst, include: ["orders\\\\..*"], exclude: [".*-tmp"]}
controller: {listen: "127.0.0.1:9000", api_token: null}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "strait.yaml"
    path.write_text(text)
    return path


def test_the_documented_shape_loads(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, BASIC), environ={})
    assert config.zookeeper.root == "/strait"
    assert config.clusters["src"]["security.protocol"] == "SSL"  # librdkafka props pass through
    assert config.controller.port == 9000
    assert config.controller.refresh_interval_s == 10.0
    route = config.routes[0]
    assert route.matches("orders.eu") and not route.matches("orders.eu-tmp") and not route.matches("payments")


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    environ = {
        "STRAIT_ZOOKEEPER__CONNECT": "zk1:2181,zk2:2181",
        "STRAIT_CONTROLLER__REFRESH_INTERVAL_S": "2",
        "STRAIT_CONTROLLER__API_TOKEN": "12:30",
        "OTHER": "ignored",
    }
    config = load_config(_write(tmp_path, BASIC), environ=environ)
    assert config.zookeeper.connect == "zk1:2181,zk2:2181"
    assert config.controller.refresh_interval_s == 2.0
    assert config.controller.api_token == "12:30"


def test_null_in_the_environment_unsets_an_optional_value_at_any_depth(tmp_path: Path) -> None:
    text = BASIC.replace("api_token: null", "api_token: secret") + "worker: {batch_sharing: {latency_budget_ms: 30}}\n"
    path = _write(tmp_path, text)
    config = load_config(path, environ={})
    assert (config.controller.api_token, config.worker.batch_sharing.latency_budget_ms) == ("secret", 30.0)
    environ = {"STRAIT_CONTROLLER__API_TOKEN": "null", "STRAIT_WORKER__BATCH_SHARING__LATENCY_BUDGET_MS": "null"}
    config = load_config(path, environ=environ)
    # None, not the text "null": a token of "null" would have been a guessable password.
    assert config.controller.api_token is None
    assert config.worker.batch_sharing.latency_budget_ms is None
    # A required value cannot be unset: the error names it.
    with pytest.raises(ConfigError, match=r"zookeeper\.connect"):
        load_config(path, environ={"STRAIT_ZOOKEEPER__CONNECT": "null"})


def test_null_unsets_a_client_property(tmp_path: Path) -> None:
    path = _write(tmp_path, BASIC)
    assert load_config(path, environ={}).clusters["src"]["security.protocol"] == "SSL"
    config = load_config(path, environ={"STRAIT_CLUSTERS__SRC__SECURITY.PROTOCOL": "null"})
    assert config.clusters["src"] == {"bootstrap.servers": "127.0.0.1:9092"}  # librdkafka's default applies
    in_file = load_config(_write(tmp_path, BASIC.replace("security.protocol: SSL", "security.protocol: null")), {})
    assert "security.protocol" not in in_file.clusters["src"]


def test_parsing_leaves_the_callers_mapping_alone() -> None:
    raw = yaml.safe_load(BASIC)
    before = copy.deepcopy(raw)
    parse_config(raw, {"STRAIT_ZOOKEEPER__CONNECT": "zk9:2181", "STRAIT_CONTROLLER__API_TOKEN": "t"})
    assert raw == before
    # Read-only sections (any Mapping) are copied where an override changes them, not written to.
    frozen = {**raw, "zookeeper": MappingProxyType(dict(raw["zookeeper"]))}
    config = parse_config(frozen, {"STRAIT_ZOOKEEPER__CONNECT": "zk9:2181"})
    assert config.zookeeper.connect == "zk9:2181" and frozen["zookeeper"]["connect"] == "127.0.0.1:2181"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (("destination: dst", "destination: nowhere"), "routes.0.destination"),
        (('listen: "127.0.0.1:9000"', 'listen: "nine-thousand"'), "controller.listen"),
        (("root: /strait", "root: strait"), "zookeeper.root"),
        (('include: ["orders\\\\..*"]', 'include: ["("]'), "routes.0.include"),
        (("api_token: null", "api_tokn: x"), "controller.api_tokn"),
        (("name: src-dst", "name: 'a/b'"), "routes.0.name"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, change: tuple[str, str], names: str) -> None:
    assert change[0] in BASIC
    with pytest.raises(ConfigError, match=rf"{names}\b"):
        load_config(_write(tmp_path, BASIC.replace(*change)), environ={})


def test_environment_values_are_validated_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"zookeeper\.session_timeout_s"):
        load_config(_write(tmp_path, BASIC), environ={"STRAIT_ZOOKEEPER__SESSION_TIMEOUT_S": "soon"})


def test_duplicate_routes_and_missing_file_are_reported(tmp_path: Path) -> None:
    doubled = BASIC.replace("routes:\n", "routes:\n  - {name: src-dst, source: src, destination: dst}\n")
    with pytest.raises(ConfigError, match="duplicate route name"):
        load_config(_write(tmp_path, doubled), environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", environ={})
