"""A route whose pools have no live worker is reported: metrics, `strait status`, REST, dashboard rows."""

from __future__ import annotations

import io

from prometheus_client import generate_latest
from rich.console import Console

from strait.cli.status import render
from strait.config import parse_config
from strait.controller.service import ControllerService
from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    TopicSpec,
    WorkerRecord,
    WorkerState,
)
from strait.metrics.controller import controller_registry
from strait.metrics.observatory import Observatory, ObservatorySettings
from tests.unit.test_metrics import SnapshotStore, samples, value

CONFIG = parse_config(
    {
        "clusters": {"src": {}, "dst": {}},
        "routes": [
            {"name": "gold", "source": "src", "destination": "dst", "pools": ["vip"]},
            {"name": "bulk", "source": "src", "destination": "dst"},
        ],
    },
    environ={},
)


def _snapshot() -> ClusterSnapshot:
    keys = [PartitionKey("bulk", "logs", p) for p in range(2)]
    return ClusterSnapshot(
        topics={
            ("bulk", "logs"): TopicSpec("bulk", "logs", "logs", partitions=2),
            ("gold", "orders"): TopicSpec("gold", "orders", "orders", partitions=3),
        },
        removed=frozenset(),
        workers={
            "d1": WorkerRecord("d1", WorkerState.ACTIVE, pool="default"),
            "v-old": WorkerRecord("v-old", WorkerState.LEFT, live=False, pool="vip"),
        },
        stats={},
        assignment=Assignment(dict.fromkeys(keys, "d1"), version=1),
        leader=LeaderInfo("c1", "http://x"),
    )


def _observatory() -> Observatory:
    observatory = Observatory(
        store=SnapshotStore(_snapshot()),  # type: ignore[arg-type]
        offsets=lambda keys: {k: (0, 0) for k in keys},
        controller_id="c1",
        settings=ObservatorySettings(route_pools={"gold": ("vip",), "bulk": None}),
        clock=lambda: 100.0,
    )
    observatory.sample()
    return observatory


def test_the_view_and_the_metrics_name_the_route_without_a_live_pool() -> None:
    view = _observatory().view()
    routes = {r["name"]: r for r in view["routes"]}
    assert routes["gold"]["pools"] == ["vip"] and routes["gold"]["no_live_worker"] is True
    assert routes["bulk"]["pools"] is None and routes["bulk"]["live_workers"] == 1
    assert view["routes_without_workers"] == ["gold"]
    assert view["pools"] == {"default": 1}
    assert {w["id"]: w["pool"] for w in view["workers"]} == {"d1": "default", "v-old": "vip"}
    assert view["unassigned"] == 3

    parsed = samples(generate_latest(controller_registry(_observatory())).decode())
    assert value(parsed, "strait_route_no_live_worker", route="gold") == 1
    assert value(parsed, "strait_route_no_live_worker", route="bulk") == 0
    assert value(parsed, "strait_pool_workers", pool="default") == 1


def test_status_shows_pools_and_the_waiting_route() -> None:
    console = Console(file=io.StringIO(), width=200)
    console.print(render(_observatory().view()))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "vip: no live worker, waiting" in text
    assert "any" in text and "default" in text


def test_rest_routes_and_workers_carry_the_pools() -> None:
    service = ControllerService(
        config=CONFIG,
        store=SnapshotStore(_snapshot()),  # type: ignore[arg-type]
        metadata=None,  # type: ignore[arg-type]
    )
    routes = {r["name"]: r for r in service.routes()}
    assert (routes["gold"]["pools"], routes["gold"]["live_workers"], routes["gold"]["no_live_worker"]) == (
        ["vip"],
        0,
        True,
    )
    assert (routes["bulk"]["pools"], routes["bulk"]["no_live_worker"]) == (None, False)
    assert routes["gold"]["topics"] == 1
    assert {w["id"]: w["pool"] for w in service.workers()} == {"d1": "default", "v-old": "vip"}
