"""The reload decision: what a running worker or controller applies of a new configuration, and
what it names as needing a restart, over generated pairs of configurations."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strait.config import StraitConfig, parse_config
from strait.reload.plan import ReloadPlan, Role, plan

ROLES: tuple[Role, ...] = ("worker", "controller")
SECRET = "secret-"  # every generated credential starts so; none may appear in a key named


def _raw() -> dict[str, Any]:
    return {
        "coordination": {"zookeeper": {"connect": "127.0.0.1:2181"}},
        "clusters": {
            "src": {
                "bootstrap.servers": "127.0.0.1:9092",
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": "strait",
                "sasl.password": "password-one",
            },
            "dst": {"bootstrap.servers": "127.0.0.1:9093"},
        },
        "routes": [
            {"name": "a", "source": "src", "destination": "dst", "include": ["orders.*"]},
            {"name": "b", "source": "dst", "destination": "src"},
        ],
    }


def _config(raw: dict[str, Any]) -> StraitConfig:
    return parse_config(raw, {})


def _set_password(raw: dict[str, Any], value: str) -> None:
    raw["clusters"]["src"]["sasl.password"] = SECRET + value


def _set_username(raw: dict[str, Any], value: str) -> None:
    raw["clusters"]["src"]["sasl.username"] = SECRET + value


def _add_property(raw: dict[str, Any], value: str) -> None:
    raw["clusters"]["dst"]["client.id"] = value


def _change_tls(raw: dict[str, Any], value: str) -> None:
    raw["clusters"]["src"]["ssl.ca.location"] = f"/etc/{value}.pem"


def _move_store(raw: dict[str, Any], value: str) -> None:
    raw["coordination"]["zookeeper"]["connect"] = f"{value}:2181"


def _refresh(raw: dict[str, Any], _value: str) -> None:
    raw.setdefault("controller", {})["refresh_interval_s"] = 3


def _include(raw: dict[str, Any], value: str) -> None:
    raw["routes"][0]["include"] = [f"{value}.*"]


def _pools(raw: dict[str, Any], value: str) -> None:
    raw["routes"][0]["pools"] = [value]


def _copy_record(raw: dict[str, Any], _value: str) -> None:
    raw["routes"][-1]["copy"] = "record"


def _source(raw: dict[str, Any], _value: str) -> None:
    raw["routes"][0]["source"] = "dst"


def _append(raw: dict[str, Any], route: dict[str, Any]) -> None:
    if all(r["name"] != route["name"] for r in raw["routes"]):
        raw["routes"].append(route)


def _add_route(raw: dict[str, Any], value: str) -> None:
    _append(raw, {"name": f"new-{value}", "source": "src", "destination": "dst"})


def _add_pooled_route(raw: dict[str, Any], value: str) -> None:
    _append(raw, {"name": f"pooled-{value}", "source": "src", "destination": "dst", "pools": ["p"]})


def _add_exactly_once_route(raw: dict[str, Any], value: str) -> None:
    _append(raw, {"name": f"eos-{value}", "source": "src", "destination": "dst", "delivery": "exactly-once"})


def _remove_route(raw: dict[str, Any], _value: str) -> None:
    if len(raw["routes"]) > 1:
        raw["routes"].pop()


def _add_cluster(raw: dict[str, Any], value: str) -> None:
    raw["clusters"][f"c-{value}"] = {"bootstrap.servers": "127.0.0.1:9094"}


def _drop_password(raw: dict[str, Any], _value: str) -> None:
    raw["clusters"]["src"].pop("sasl.password", None)


CHANGES = [
    _set_password,
    _set_username,
    _add_property,
    _change_tls,
    _move_store,
    _refresh,
    _include,
    _pools,
    _copy_record,
    _source,
    _add_route,
    _add_pooled_route,
    _add_exactly_once_route,
    _remove_route,
    _add_cluster,
    _drop_password,
]


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[StraitConfig, StraitConfig, list[str]]:
    old_raw = _raw()
    for change in draw(st.lists(st.sampled_from(CHANGES), max_size=3)):
        change(old_raw, draw(st.text("abcdefgh", min_size=4, max_size=8)))
    new_raw = copy.deepcopy(old_raw)
    names = []
    for change in draw(st.lists(st.sampled_from(CHANGES), max_size=5)):
        change(new_raw, draw(st.text("abcdefgh", min_size=4, max_size=8)))
        names.append(change.__name__)
    return _config(old_raw), _config(new_raw), names


def _check(old: StraitConfig, new: StraitConfig, role: Role, decided: ReloadPlan) -> None:
    # Applied once, nothing more applies, and the same keys still wait for a restart.
    again = plan(decided.config, new, role)
    assert not again.applies, again
    assert again.restart == decided.restart
    # The running configuration differs from the old one only in what applies live.
    assert plan(old, decided.config, role).restart == ()
    # Keys, never values: a password cannot reach a log line through the decision.
    for key in decided.restart:
        assert SECRET not in key and "password-one" not in key, key
    # Credentials in force are the new file's.
    for cluster, credentials in decided.credentials.items():
        for key, value in credentials.items():
            assert decided.config.clusters[cluster][key] == new.clusters[cluster][key] == value
    # A section that needs a restart keeps its running value.
    assert decided.config.coordination == old.coordination
    assert decided.config.controller == old.controller
    assert set(decided.config.clusters) == set(old.clusters)
    names = [route.name for route in decided.config.routes]
    assert len(names) == len(set(names))


@settings(max_examples=300, deadline=None)
@given(_pairs(), st.sampled_from(ROLES))
def test_a_reload_applies_once_and_keeps_what_needs_a_restart(pair: Any, role: Role) -> None:
    old, new, _names = pair
    _check(old, new, role, plan(old, new, role))


@settings(max_examples=200, deadline=None)
@given(_pairs())
def test_a_worker_runs_every_route_of_the_new_file_whose_clusters_stay(pair: Any) -> None:
    old, new, _names = pair
    decided = plan(old, new, "worker")
    running = {route.name: route for route in decided.config.routes}
    before = {route.name: route for route in old.routes}
    for route in new.routes:
        previous = before.get(route.name)
        if previous is None or (previous.source, previous.destination) == (route.source, route.destination):
            assert running[route.name] == route
    assert set(running) <= {route.name for route in new.routes} | set(before)
    assert set(decided.removed) == set(before) - {route.name for route in new.routes}


@pytest.mark.parametrize("role", ROLES)
def test_the_same_file_changes_nothing(role: Role) -> None:
    config = _config(_raw())
    decided = plan(config, _config(_raw()), role)
    assert not decided.applies and decided.restart == ()


@pytest.mark.parametrize("role", ROLES)
def test_a_new_password_applies_live(role: Role) -> None:
    new = _raw()
    _set_password(new, "two")
    decided = plan(_config(_raw()), _config(new), role)
    assert decided.credentials == {"src": {"sasl.password": SECRET + "two"}}
    assert decided.restart == ()


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (_move_store, "coordination.zookeeper.connect"),
        (_refresh, "controller.refresh_interval_s"),
        (_change_tls, "clusters.src.ssl.ca.location"),
        (_add_property, "clusters.dst.client.id"),
        (_drop_password, "clusters.src.sasl.password"),
        (_source, "routes.a.source"),
        (_add_cluster, "clusters.c-x"),
    ],
)
@pytest.mark.parametrize("role", ROLES)
def test_what_needs_a_restart_is_named_by_its_key(change: Any, key: str, role: Role) -> None:
    new = _raw()
    change(new, "x")
    decided = plan(_config(_raw()), _config(new), role)
    assert key in decided.restart
    assert not decided.applies


def test_a_worker_keeps_its_copier_for_what_only_controllers_read() -> None:
    new = _raw()
    _pools(new, "p")
    _include(new, "payments")
    decided = plan(_config(_raw()), _config(new), "worker")
    assert not decided.applies and decided.restart == ()
    assert decided.config.route("a") == _config(new).route("a")


def test_a_worker_applies_route_changes_a_controller_reads_only_at_start() -> None:
    new = _raw()
    _pools(new, "p")
    _copy_record(new, "")
    _add_exactly_once_route(new, "x")
    _include(new, "payments")
    old = _config(_raw())
    worker = plan(old, _config(new), "worker")
    assert worker.changed == ("b",) and worker.added == ("eos-x",) and worker.restart == ()
    controller = plan(old, _config(new), "controller")
    assert controller.added == () and controller.changed == ()
    assert set(controller.restart) == {"routes.a.pools", "routes.b.copy_mode", "routes.eos-x.delivery"}
    # The controller keeps route a whole (its include too) until it restarts.
    assert controller.config.route("a") == old.route("a")


def test_a_controller_applies_new_patterns_and_added_routes() -> None:
    new = _raw()
    _include(new, "payments")
    _remove_route(new, "")
    _add_route(new, "x")
    decided = plan(_config(_raw()), _config(new), "controller")
    assert decided.changed == ("a",) and decided.added == ("new-x",) and decided.removed == ("b",)
    assert decided.restart == ()
