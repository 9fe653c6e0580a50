"""Metrics without Kafka: histograms, librdkafka statistics, the worker's and the controller's
exposition (parsed back with prometheus_client's parser), and the dashboard's endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    TopicSpec,
    WorkerRecord,
    WorkerState,
)
from strait.metrics.balance import summarize
from strait.metrics.controller import controller_registry
from strait.metrics.healing import HealingPolicy
from strait.metrics.histogram import Buckets, empty
from strait.metrics.librdkafka import broker_latencies, leaders
from strait.metrics.observatory import Observatory, ObservatorySettings
from strait.metrics.stages import DESTINATION, RouteObserver
from strait.metrics.worker import WorkerMetrics
from strait.web.dashboard import mount_observability


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(parsed: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


# --- histograms and librdkafka statistics ------------------------------------------------


def test_bucket_quantiles_interpolate_like_promql() -> None:
    buckets = Buckets(bounds=(1.0, 2.0, 4.0))
    for v in (0.5, 1.5, 1.5, 3.0):
        buckets.observe(v)
    snap = buckets.snapshot()
    assert snap.count == 4 and snap.total == 6.5
    assert snap.cumulative() == [("1.0", 1), ("2.0", 3), ("4.0", 4), ("+Inf", 4)]
    assert snap.quantile(0.5) == 1.5  # rank 2 of 4: halfway into the (1, 2] bucket
    assert snap.quantile(1.0) == 4.0
    assert empty((1.0,)).quantile(0.5) is None
    later = Buckets(bounds=(1.0, 2.0, 4.0))
    for v in (0.5, 1.5, 1.5, 3.0, 10.0):
        later.observe(v)
    assert later.snapshot().minus(snap).counts == (0, 0, 0, 1)


def test_a_value_on_a_bound_falls_in_that_bucket() -> None:
    buckets = Buckets(bounds=(1.0, 2.0))
    buckets.observe(1.0)
    assert buckets.snapshot().counts == (1, 0, 0)


STATS = {
    "brokers": {
        "127.0.0.1:9092/1": {"nodeid": 1, "rtt": {"cnt": 4, "p50": 1500, "p99": 20000}},
        "127.0.0.1:9092/bootstrap": {"nodeid": -1, "rtt": {"cnt": 1, "p50": 1, "p99": 1}},
    },
    "topics": {"t": {"partitions": {"0": {"leader": 1}, "1": {"leader": 2}, "-1": {"leader": -1}}}},
}


def test_librdkafka_statistics_give_partition_leaders_and_broker_rtts() -> None:
    assert leaders(STATS) == {("t", 0): "1", ("t", 1): "2"}
    [rtt] = broker_latencies(STATS)
    assert (rtt.broker, rtt.p50_s, rtt.p99_s) == ("1", 0.0015, 0.02)


def test_route_observer_labels_acks_with_the_destination_broker_and_measures_end_to_end() -> None:
    now = [1000.0]
    observer = RouteObserver("r", clock=lambda: now[0])
    observer.client_stats(DESTINATION)(json.dumps(STATS))
    observer.acked("realtime", "t", 1, 0.004, timestamp_ms=998_500)
    observer.acked("realtime", "x", 0, 0.002, timestamp_ms=0)  # no timestamp: no end-to-end figure
    observer.fetched("realtime", 0.1)
    observer.committed(0.02)
    stages = observer.stages()
    assert stages[("realtime", "produce_ack", "2")].count == 1
    assert stages[("realtime", "produce_ack", "unknown")].count == 1
    assert stages[("control", "checkpoint_commit", "any")].count == 1
    assert observer.end_to_end()["t"].total == 1.5
    assert observer.lag_seconds("t", 1, lag=0) == 0.0
    assert observer.lag_seconds("t", 1, lag=5) == 1.5
    assert observer.lag_seconds("t", 9, lag=5) is None


# --- the worker's exposition -------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    route: str
    topic: str
    partition: int
    destination_topic: str


class FakeCopier:
    def __init__(self, stats: dict[Task, dict[str, Any]]) -> None:
        self._stats = stats

    def stats(self) -> Mapping[Any, Any]:
        return self._stats


def test_worker_metrics_expose_copier_stats_and_latencies() -> None:
    now = [2000.0]
    metrics = WorkerMetrics("w1", clock=lambda: now[0])
    observer = metrics.route("r")
    stats = {
        "records": 120,
        "bytes": 4096,
        "checkpoint": 120,
        "lag": 30,
        "source_end": 150,
        "state": "ok",
        "in_flight": 3,
        "last_progress": 1999.0,
        "rewinds": 0,
    }
    metrics.track("r", FakeCopier({Task("r", "src-t", 0, "dst-t"): stats}))
    for _ in range(120):
        observer.acked("realtime", "dst-t", 0, 0.003, timestamp_ms=1_998_000)
    parsed = samples(generate_latest(metrics.registry).decode())
    labels = {"route": "r", "topic": "src-t", "partition": "0"}
    assert value(parsed, "strait_copied_records_total", **labels) == 120
    assert value(parsed, "strait_copied_bytes_total", **labels) == 4096
    assert value(parsed, "strait_replication_lag_records", **labels) == 30
    assert value(parsed, "strait_replication_lag_seconds", **labels) == 2.0
    assert value(parsed, "strait_partition_state", **labels, state="ok") == 1
    assert value(parsed, "strait_partition_state", **labels, state="failed") == 0
    assert value(parsed, "strait_assigned_partitions", route="r") == 1
    assert value(parsed, "strait_end_to_end_latency_seconds_count", route="r", topic="dst-t") == 120
    assert (
        value(
            parsed, "strait_stage_seconds_count", route="r", pipeline="realtime", stage="produce_ack", broker="unknown"
        )
        == 120
    )

    report = metrics.report()
    assert report["lag_seconds"] == {"r/src-t/0": 2.0}
    assert report["latency"]["r"]["count"] == 120
    assert metrics.report()["latency"]["r"]["count"] == 0  # windows do not overlap


# --- the controller: observatory, exposition, endpoints ----------------------------------


class SnapshotStore:
    """What the observatory reads of the coordination store."""

    def __init__(self, snapshot: ClusterSnapshot, leading: bool = True) -> None:
        self.snap = snapshot
        self.leading = leading

    def snapshot(self) -> ClusterSnapshot:
        return self.snap

    def holds_leadership(self) -> bool:
        return self.leading


def fleet_snapshot(updated: float) -> ClusterSnapshot:
    k0, k1 = PartitionKey("r", "t", 0), PartitionKey("r", "t", 1)
    report = {
        "updated": updated,
        "partitions": {str(k0): {"bytes": 1000 * updated}},
        "latency": {"r": {"count": 10, "p50_s": 0.05, "p99_s": 0.2}},
        "metrics_url": "http://127.0.0.1:9999/metrics",
    }
    return ClusterSnapshot(
        topics={("r", "t"): TopicSpec("r", "t", "t", partitions=2)},
        removed=frozenset(),
        workers={
            "w1": WorkerRecord("w1", WorkerState.ACTIVE, holding=frozenset({k0, k1})),
            "w2": WorkerRecord("w2", WorkerState.ACTIVE),
            "old": WorkerRecord("old", WorkerState.ACTIVE, live=False),
        },
        stats={"w1": report, "w2": {"updated": updated, "partitions": {}}},
        assignment=Assignment({k0: "w1", k1: "w1"}, version=3),
        leader=LeaderInfo("c1", "http://x"),
    )


def make_observatory(
    offsets: Callable[[list[PartitionKey]], Mapping[PartitionKey, tuple[int | None, int | None]]],
    clock: Callable[[], float],
) -> tuple[Observatory, SnapshotStore, list[int]]:
    store = SnapshotStore(fleet_snapshot(clock()))
    wakes: list[int] = []
    observatory = Observatory(
        store=store,  # type: ignore[arg-type]
        offsets=offsets,
        controller_id="c1",
        settings=ObservatorySettings(policy=HealingPolicy(stuck_after_s=5), hung_after_s=100),
        on_heal=lambda: wakes.append(1),
        clock=clock,
    )
    return observatory, store, wakes


def test_the_observatory_reports_lag_stuck_partitions_and_heals_them() -> None:
    now = [5000.0]
    # Partition 0 progresses; partition 1 lags with a frozen checkpoint.
    offsets = lambda keys: {k: ((int(now[0]) if k.partition == 0 else 10), int(now[0]) + 1) for k in keys}  # noqa: E731
    observatory, store, wakes = make_observatory(offsets, lambda: now[0])
    for _ in range(8):
        store.snap = fleet_snapshot(now[0])
        observatory.sample()
        now[0] += 1
    view = observatory.view()
    assert view["leader"] and view["unassigned"] == 0
    assert view["workers_by_state"] == {"active": 2, "dead": 1}
    assert view["lag_by_topic"] == {"r/t": 1 + (int(now[0]) - 10)}
    assert view["routes"] == [
        {"name": "r", "topics": 1, "bytes_per_s": 1000.0, "pools": None, "live_workers": 2, "no_live_worker": False}
    ]
    [stuck] = view["stuck"]
    assert stuck["partition"] == "r/t/1" and stuck["worker"] == "w1" and stuck["moves"] == 1
    assert wakes == [1]
    steering = observatory.steering()
    assert steering.avoid == {PartitionKey("r", "t", 1): frozenset({"w1"})}

    parsed = samples(generate_latest(controller_registry(observatory)).decode())
    assert value(parsed, "strait_controller_leader", controller="c1") == 1
    assert value(parsed, "strait_workers", state="active") == 2
    assert value(parsed, "strait_workers", state="dead") == 1
    assert value(parsed, "strait_worker_partitions", worker="w1") == 2
    assert value(parsed, "strait_unassigned_partitions") == 0
    assert value(parsed, "strait_route_topics", route="r") == 1
    assert value(parsed, "strait_committed_lag_records", route="r", topic="t", partition="0") == 1
    assert value(parsed, "strait_healing_moves_total") == 1
    assert value(parsed, "strait_stuck_partitions") == 1
    assert value(parsed, "strait_partition_stuck", route="r", topic="t", partition="1", worker="w1") == 1


def test_a_standby_reports_but_never_heals() -> None:
    now = [5000.0]
    observatory, store, wakes = make_observatory(lambda keys: {k: (1, 50) for k in keys}, lambda: now[0])
    store.leading = False
    for _ in range(8):
        observatory.sample()
        now[0] += 1
    assert [r["stuck"] for r in observatory.view()["stuck"]] == [True, True]
    assert wakes == [] and observatory.steering().avoid == {}


def test_dashboard_endpoints_serve_the_view_metrics_and_targets() -> None:
    now = [5000.0]
    observatory, _store, _ = make_observatory(lambda keys: {k: (1, 1) for k in keys}, lambda: now[0])
    app = FastAPI()
    mount_observability(app, observatory)
    client = TestClient(app)
    assert client.get("/observability").json()["updated"] is None  # before the first sample
    observatory.sample()
    view = client.get("/observability").json()
    assert view["charts"]["partitions_per_worker"]["w1"][0][1] == 2
    assert "partitions" not in view
    assert [p["partition"] for p in client.get("/observability?partitions=true").json()["partitions"]] == [
        "r/t/0",
        "r/t/1",
    ]
    assert client.get("/metrics/targets").json() == [
        {"targets": ["127.0.0.1:9999"], "labels": {"worker": "w1", "__metrics_path__": "/metrics"}}
    ]
    assert "strait_workers" in client.get("/metrics").text
    assert client.get("/partitions/stuck").json() == []
    assert client.get("/workers/slow").json() == {"slow": [], "hung": []}
    page = client.get("/ui")
    assert page.status_code == 200 and "chart-partitions" in page.text
    assert client.get("/ui/static/dashboard.js").status_code == 200


def test_balance_summary_counts_moves_by_state() -> None:
    moves = {"a": {"state": "done"}, "b": {"state": "running"}, "c": {"state": "skipped"}, "d": {}}
    summary = summarize("e1", "running", moves)
    assert summary["by_state"] == {"done": 1, "pending": 1, "running": 1, "skipped": 1}
    assert summary["progress"] == 0.5
    assert summarize("e2", "done", {})["progress"] == 1.0


def test_strait_status_renders_the_view_as_tables() -> None:
    from rich.console import Console

    from strait.cli.status import render

    now = [5000.0]
    observatory, _store, _ = make_observatory(lambda keys: {k: (1, 9) for k in keys}, lambda: now[0])
    for _ in range(7):
        observatory.sample()
        now[0] += 1
    console = Console(record=True, width=160)
    console.print(render(observatory.view()))
    text = console.export_text()
    for expected in ("Workers", "w1", "active", "dead", "Lag per topic", "r/t", "Stuck partitions", "r/t/0"):
        assert expected in text, expected
    console = Console(record=True, width=160)
    console.print(render({"updated": None}))
    assert "not sampled" in console.export_text()
