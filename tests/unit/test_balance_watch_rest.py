"""The watch mode over REST, in the metrics and on the dashboard's feed, and its configuration."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from strait.balancer.settings import BalanceConfig
from strait.config import StraitConfig
from strait.metrics.balance import WatchCollector
from strait.web.balance import mount_balance_watch

ALERTING = {
    "phase": "alerting",
    "reasons": ["broker_gone", "disk_spread"],
    "out_of_balance_s": 612.5,
    "since": 1000.0,
    "alert": True,
    "assessment": {"spread": 0.31},
    "proposal": {"id": "abc", "moves": 7},
    "execute": False,
    "after_s": 600.0,
    "execution": None,
    "held": False,
    "checked": 1612.5,
    "error": None,
    "errors": 2,
}
STANDBY = {**ALERTING, "phase": "standby", "reasons": [], "alert": False, "proposal": None, "errors": 0}


class FakeWatcher:
    def __init__(self) -> None:
        self.names = ["big", "small"]

    def view(self) -> dict[str, dict[str, Any]]:
        return {"big": ALERTING, "small": STANDBY}

    def proposal(self, name: str) -> dict[str, Any] | None:
        return {"id": "abc", "plan": {"moves": []}} if name == "big" else None


def client(watcher: FakeWatcher | None) -> TestClient:
    app = FastAPI()
    mount_balance_watch(app, watcher)
    return TestClient(app)


def test_proposal_and_view_are_served() -> None:
    http = client(FakeWatcher())
    assert http.get("/balance/big/proposal").json()["id"] == "abc"
    assert http.get("/balance/watch").json()["big"]["reasons"] == ["broker_gone", "disk_spread"]
    missing = http.get("/balance/small/proposal")
    assert missing.status_code == 404 and "standby" in missing.json()["error"]
    unknown = http.get("/balance/other/proposal")
    assert unknown.status_code == 404 and "not watched" in unknown.json()["error"]


def test_without_the_watch_mode_the_routes_say_it_is_off() -> None:
    http = client(None)
    for path in ("/balance/watch", "/balance/big/proposal"):
        answer = http.get(path)
        assert answer.status_code == 404 and "balance.watch" in answer.json()["error"]


def test_metrics_name_each_reason_and_leave_a_standby_out() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(FakeWatcher().view))
    text = generate_latest(registry).decode()
    assert 'strait_balance_out_of_balance{cluster="big",reason="broker_gone"} 1.0' in text
    assert 'strait_balance_out_of_balance{cluster="big",reason="rack"} 0.0' in text
    assert 'strait_balance_out_of_balance_seconds{cluster="big"} 612.5' in text
    assert 'strait_balance_alert{cluster="big"} 1.0' in text
    assert 'strait_balance_proposal_moves{cluster="big"} 7.0' in text
    assert 'strait_balance_disk_spread_ratio{cluster="big"} 0.31' in text
    assert 'strait_balance_watch_errors_total{cluster="big"} 2.0' in text
    assert 'cluster="small",reason=' not in text and 'strait_balance_alert{cluster="small"}' not in text


def test_metrics_report_a_traffic_skew_only_where_traffic_was_measured() -> None:
    skewed = {
        **ALERTING,
        "reasons": ["traffic_spread"],
        "assessment": {"spread": 0.02, "traffic_spread": 0.8},
    }

    class TrafficWatcher(FakeWatcher):
        def view(self) -> dict[str, dict[str, Any]]:
            return {"big": skewed, "small": {**ALERTING, "reasons": []}}

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(TrafficWatcher().view))
    text = generate_latest(registry).decode()
    assert 'strait_balance_out_of_balance{cluster="big",reason="traffic_spread"} 1.0' in text
    assert 'strait_balance_out_of_balance{cluster="big",reason="disk_spread"} 0.0' in text
    assert 'strait_balance_out_of_balance{cluster="small",reason="traffic_spread"} 0.0' in text
    assert 'strait_balance_traffic_spread_ratio{cluster="big"} 0.8' in text
    assert 'strait_balance_traffic_spread_ratio{cluster="small"}' not in text  # not measured there


def test_config_checks_the_watch_options() -> None:
    chosen = BalanceConfig(clusters=["big"], watch=True, execute=True, after_s=5, throttle="10MB")
    assert chosen.watched() == ["big"] and chosen.throttle == 10_000_000
    assert BalanceConfig(clusters=["big"]).watched() == []  # listed, but the watch is off
    with pytest.raises(ValidationError, match=r"set balance\.watch"):
        BalanceConfig(clusters=["big"], execute=True)
    with pytest.raises(ValidationError, match=r"balance\.clusters"):
        BalanceConfig(watch=True)
    with pytest.raises(ValidationError):
        BalanceConfig(clusters=["big"], watch=True, after_s=-1)


def test_config_refuses_a_watched_cluster_it_does_not_define() -> None:
    base: dict[str, Any] = {
        "zookeeper": {"connect": "127.0.0.1:2181"},
        "clusters": {"a": {"bootstrap.servers": "127.0.0.1:9092"}, "b": {"bootstrap.servers": "127.0.0.1:9093"}},
        "routes": [{"name": "r", "source": "a", "destination": "b"}],
    }
    StraitConfig.model_validate({**base, "balance": {"clusters": ["a"], "watch": True}})
    with pytest.raises(ValidationError, match="unknown cluster"):
        StraitConfig.model_validate({**base, "balance": {"clusters": ["nope"], "watch": True}})


def test_rest_plans_take_a_traffic_window_and_disk_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    from strait.balancer import service
    from strait.balancer.plan import Plan
    from strait.balancer.tiers import DiskClasses
    from strait.web.balance import mount_balance

    asked: dict[str, Any] = {}

    def make_plan(props: Any, operation: str = "rebalance", **options: Any) -> Plan:
        asked.update(options)
        return Plan(operation=operation, moves=())

    monkeypatch.setattr(service, "make_plan", make_plan)
    app = FastAPI()
    configured = {"big": DiskClasses.of({"*": "hdd"})}
    mount_balance(app, {"big": {"bootstrap.servers": "x:1"}}, lambda: None, None, configured)
    http = TestClient(app)
    answer = http.get("/balance/big/plan", params={"traffic_window": 30, "disk_class": ["/data/ssd*=ssd"]})
    assert answer.status_code == 200 and asked["traffic_window_s"] == 30
    tiers = asked["classes"]
    assert tiers.class_of(1, "/data/ssd1") == "ssd" and tiers.class_of(1, "/data/d0") == "hdd"
    http.get("/balance/big/plan")
    assert asked["traffic_window_s"] is None and asked["classes"].class_of(1, "/data/ssd1") == "hdd"
    assert http.get("/balance/big/plan", params={"disk_class": ["nonsense"]}).status_code == 400
    assert http.get("/balance/big/plan", params={"disk_class": ["*=tape"]}).status_code == 400
    assert http.get("/balance/big/plan", params={"traffic_window": -1}).status_code == 422


def test_moves_waiting_for_room_are_a_series() -> None:
    from strait.metrics.balance import summarize
    from strait.metrics.controller import _ControllerCollector

    moves = {"a": {"state": "pending", "waiting": "no room yet on broker 3"}, "b": {"state": "pending"}, "c": {}}
    view = {"balance": {"big": summarize("e1", "running", moves)}}
    families = {f.name: f for f in _ControllerCollector(None)._balance(view)}  # type: ignore[arg-type]
    waiting = families["strait_balance_moves_waiting_for_room"].samples
    assert [(s.labels, s.value) for s in waiting] == [({"cluster": "big"}, 1)]


def test_metrics_say_when_the_watch_backs_off_and_config_takes_min_gain() -> None:
    backing = {
        **ALERTING,
        "phase": "backing_off",
        "backoff": "ineffective plan #2 in a row (...); no execution before 2000",
        "ineffective_plans": 2,
    }

    class BackingWatcher(FakeWatcher):
        def view(self) -> dict[str, dict[str, Any]]:
            return {"big": backing, "small": {**ALERTING, "reasons": []}}

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(BackingWatcher().view))
    text = generate_latest(registry).decode()
    assert 'strait_balance_watch_backing_off{cluster="big"} 1.0' in text
    assert 'strait_balance_ineffective_plans{cluster="big"} 2.0' in text
    assert 'strait_balance_watch_backing_off{cluster="small"} 0.0' in text
    assert BalanceConfig(min_gain=0.5).min_gain == 0.5
    with pytest.raises(ValidationError):
        BalanceConfig(min_gain=1.5)
