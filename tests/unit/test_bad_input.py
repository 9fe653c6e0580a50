"""Bad input at the edges: malformed configuration and plan files are refused before anything
connects anywhere, with a non-zero exit and a message that names what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strait.cli.balance import app as balance_app
from strait.cli.main import app

runner = CliRunner()

GOOD = """\
zookeeper: {connect: "127.0.0.1:1", root: /strait}
clusters:
  src: {bootstrap.servers: "127.0.0.1:1"}
  dst: {bootstrap.servers: "127.0.0.1:2"}
routes:
  - {name: main, source: src, destination: dst}
"""

# (case id, file text, what the message must name)
BAD_CONFIGS = [
    ("yaml-syntax", "clusters: {src: [unclosed\nroutes: -", "invalid YAML"),
    ("yaml-tab-indent", "clusters:\n\tsrc: {}\n", "invalid YAML"),
    ("top-level-list", "- clusters\n- routes\n", "top level must be a mapping"),
    ("empty-file", "", "clusters"),
    ("missing-routes", GOOD.split("routes:")[0], "routes"),
    (
        "missing-clusters",
        GOOD.replace(
            'clusters:\n  src: {bootstrap.servers: "127.0.0.1:1"}\n  dst: {bootstrap.servers: "127.0.0.1:2"}\n', ""
        ),
        "clusters",
    ),
    (
        "empty-routes",
        GOOD.replace("  - {name: main, source: src, destination: dst}\n", "  []\n").replace(
            "routes:\n  []", "routes: []"
        ),
        "routes",
    ),
    ("route-missing-source", GOOD.replace("source: src, ", ""), "routes.0.source"),
    ("route-missing-name", GOOD.replace("name: main, ", ""), "routes.0.name"),
    (
        "unknown-source-cluster",
        GOOD.replace("source: src", "source: nowhere"),
        "routes.0.source: unknown cluster 'nowhere'",
    ),
    (
        "unknown-destination-cluster",
        GOOD.replace("destination: dst", "destination: dts"),
        "routes.0.destination: unknown cluster 'dts'",
    ),
    (
        "duplicate-route",
        GOOD + "  - {name: main, source: dst, destination: src}\n",
        "routes.1.name: duplicate route name 'main'",
    ),
    ("bad-route-name", GOOD.replace("name: main", "name: 'a/b'"), "routes.0.name"),
    ("bad-include-regex", GOOD.replace("destination: dst}", "destination: dst, include: ['(']}"), "routes.0.include"),
    ("include-not-a-list", GOOD.replace("destination: dst}", "destination: dst, include: 7}"), "routes.0.include"),
    (
        "replication-factor-zero",
        GOOD.replace("destination: dst}", "destination: dst, replication_factor: 0}"),
        "routes.0.replication_factor",
    ),
    (
        "replication-factor-text",
        GOOD.replace("destination: dst}", "destination: dst, replication_factor: three}"),
        "routes.0.replication_factor",
    ),
    (
        "session-timeout-text",
        GOOD.replace("root: /strait}", "root: /strait, session_timeout_s: soon}"),
        "zookeeper.session_timeout_s",
    ),
    (
        "session-timeout-negative",
        GOOD.replace("root: /strait}", "root: /strait, session_timeout_s: -3}"),
        "zookeeper.session_timeout_s",
    ),
    ("relative-root", GOOD.replace("root: /strait", "root: strait"), "zookeeper.root"),
    (
        "zookeeper-not-a-mapping",
        GOOD.replace('zookeeper: {connect: "127.0.0.1:1", root: /strait}', "zookeeper: 127.0.0.1:2181"),
        "zookeeper",
    ),
    ("clusters-not-a-mapping", GOOD.replace("clusters:\n", "clusters: [src, dst]\nx:\n"), "clusters"),
    (
        "cluster-props-not-a-mapping",
        GOOD.replace('src: {bootstrap.servers: "127.0.0.1:1"}', "src: 127.0.0.1:9092"),
        "clusters.src",
    ),
    (
        "cluster-property-a-list",
        GOOD.replace('src: {bootstrap.servers: "127.0.0.1:1"}', "src: {bootstrap.servers: [a:1, b:2]}"),
        "clusters: src.bootstrap.servers",
    ),
    ("unknown-top-level-key", GOOD + "contoller: {listen: '127.0.0.1:9000'}\n", "contoller"),
    ("unknown-nested-key", GOOD + "worker: {commit_interval: 1}\n", "worker.commit_interval"),
    ("bad-listen", GOOD + "controller: {listen: 'localhost'}\n", "controller.listen"),
    ("listen-port-out-of-range", GOOD + "controller: {listen: '127.0.0.1:70000'}\n", "controller.listen"),
    ("refresh-zero", GOOD + "controller: {refresh_interval_s: 0}\n", "controller.refresh_interval_s"),
    ("commit-interval-list", GOOD + "worker: {commit_interval_s: [1, 2]}\n", "worker.commit_interval_s"),
    ("api-token-mapping", GOOD + "controller: {api_token: {a: b}}\n", "controller.api_token"),
]


def _ids(cases: list[tuple[str, str, str]]) -> list[str]:
    return [case[0] for case in cases]


@pytest.mark.parametrize("command", ["controller", "worker"])
@pytest.mark.parametrize(("case", "text", "named"), BAD_CONFIGS, ids=_ids(BAD_CONFIGS))
def test_a_malformed_config_is_refused_naming_the_key(
    tmp_path: Path, command: str, case: str, text: str, named: str
) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    result = runner.invoke(app, [command, "--config", str(path), "--id", "x"])
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "error:" in result.output and named in result.output, result.output
    assert "Traceback" not in result.output


def test_the_good_config_of_these_cases_is_valid(tmp_path: Path) -> None:
    """Each bad case differs from this one file by the fault it names, so the fault is what is refused."""
    from strait.config import load_config

    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert load_config(path, environ={}).routes[0].name == "main"


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["worker", "--config", str(missing), "--id", "x"])
    assert result.exit_code == 2 and "cannot read config file" in result.output and str(missing) in result.output


def test_a_bad_environment_override_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    monkeypatch.setenv("STRAIT_ZOOKEEPER__SESSION_TIMEOUT_S", "soon")
    result = runner.invoke(app, ["controller", "--config", str(path)])
    assert result.exit_code == 2 and "zookeeper.session_timeout_s" in result.output, result.output


# --- plan files --------------------------------------------------------------------------------

INTER = {"kind": "inter", "topic": "orders", "partition": 3, "source": [1, 2], "target": [2, 3], "bytes": 10}
INTRA = {
    "kind": "intra",
    "topic": "orders",
    "partition": 4,
    "broker": 1,
    "source_dir": "/a",
    "target_dir": "/b",
    "bytes": 10,
}


def _plan(moves: object, **top: object) -> dict[str, object]:
    return {"format": 1, "operation": "rebalance", "cluster_id": "x", "moves": moves, **top}


def _without(move: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in move.items() if k != key}


BAD_PLANS: list[tuple[str, object, str]] = [
    ("not-json", "{moves: [", "not valid JSON"),
    ("truncated", json.dumps(_plan([INTER]))[:-10], "not valid JSON"),
    ("a-list", [INTER], "must be a JSON object"),
    ("no-format", {"moves": [INTER]}, "format"),
    ("wrong-format", _plan([INTER], format=99), "format 99"),
    ("no-moves", {"format": 1, "operation": "rebalance"}, "'moves'"),
    ("moves-not-a-list", _plan({"0": INTER}), "'moves'"),
    ("move-not-an-object", _plan(["orders-3"]), "move #0"),
    ("move-without-kind", _plan([_without(INTER, "kind")]), "'kind'"),
    ("move-without-topic", _plan([_without(INTER, "topic")]), "'topic'"),
    ("move-without-partition", _plan([_without(INTER, "partition")]), "'partition'"),
    ("move-without-target", _plan([_without(INTER, "target")]), "'target'"),
    ("intra-without-target-dir", _plan([_without(INTRA, "target_dir")]), "'target_dir'"),
    ("unknown-kind", _plan([{**INTER, "kind": "sideways"}]), "unknown move kind 'sideways'"),
    ("partition-not-a-number", _plan([{**INTER, "partition": "three"}]), "move #0"),
    ("broker-not-a-number", _plan([{**INTER, "target": [2, "x"]}]), "orders-3"),
    ("bytes-not-a-number", _plan([{**INTER, "bytes": "big"}]), "orders-3"),
    ("duplicate-target", _plan([{**INTER, "target": [3, 3]}]), "orders-3"),
    ("empty-target", _plan([{**INTER, "source": [], "target": []}]), "orders-3"),
    ("replica-count-changes", _plan([{**INTER, "target": [1, 2, 3]}]), "target has 3 replicas, source has 2"),
    ("same-partition-twice", _plan([INTER, INTER]), "orders-3 twice"),
    ("second-move-bad", _plan([INTER, {**INTRA, "broker": None}]), "move #1"),
]


@pytest.mark.parametrize(("case", "content", "named"), BAD_PLANS, ids=[c[0] for c in BAD_PLANS])
def test_a_malformed_plan_is_refused_naming_what_is_wrong(
    tmp_path: Path, case: str, content: object, named: str
) -> None:
    path = tmp_path / f"{case}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    # Port 1: nothing listens, so a plan that were accepted would fail differently (and later).
    result = runner.invoke(balance_app, ["execute", "--bootstrap", "127.0.0.1:1", "--plan", str(path)])
    assert result.exit_code == 2, (result.exit_code, result.output)
    text = " ".join(result.output.split())  # rich wraps long lines
    assert "error:" in text and named in text, text
    assert "Traceback" not in result.output
