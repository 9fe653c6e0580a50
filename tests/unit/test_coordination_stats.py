"""Large workers' per-partition stats stay out of ZooKeeper: summary there, the whole over HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from strait.coordination import stats
from strait.metrics.exposition import serve_metrics


def _report(partitions: int, updated: float = 100.0, url: str | None = "http://127.0.0.1:1/metrics") -> dict[str, Any]:
    return {
        "updated": updated,
        "state": "active",
        "metrics_url": url,
        "partitions": {f"r/t/{p}": {"records": 2, "bytes": 10, "lag": 1} for p in range(partitions)},
        "lag_seconds": {f"r/t/{p}": 0.5 for p in range(partitions)},
        "latency": {"r": {"count": 3, "p50_s": 0.1, "p99_s": 0.2}},
    }


def test_small_reports_go_whole_large_ones_as_a_summary() -> None:
    small = _report(10)
    assert stats.for_zookeeper(small, 2.0) == small
    assert stats.for_zookeeper(_report(50_000, url=None), 2.0)["partitions"], "nowhere else to read them"
    summary = stats.for_zookeeper(_report(50_000), 2.0)
    assert "partitions" not in summary and "lag_seconds" not in summary
    assert summary["stats_url"] == "http://127.0.0.1:1/stats"
    assert (summary["partition_count"], summary["records"], summary["bytes"], summary["lag"]) == (
        50_000,
        100_000,
        500_000,
        50_000,
    )
    assert summary["latency"] == small["latency"] and summary["updated"] == 100.0
    assert len(json.dumps(summary)) < 1_000


def test_the_gatherer_fetches_the_whole_report_and_merges_it_without_blocking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served: dict[str, Any] = {}
    url = serve_metrics(CollectorRegistry(), "127.0.0.1:0", token="s3cret", stats=lambda: served)
    whole = _report(2_000, updated=100.0, url=url)
    served.update(whole)
    summary = stats.for_zookeeper(whole, 2.0)
    gatherer = stats.StatsGatherer(token="s3cret")
    try:
        first = gatherer.merge({"w1": summary, "w2": {"updated": 1.0, "partitions": {}}})
        assert first["w1"] == summary and first["w2"] == {"updated": 1.0, "partitions": {}}
        deadline = time.monotonic() + 30
        while "partitions" not in gatherer.merge({"w1": summary})["w1"] and time.monotonic() < deadline:
            time.sleep(0.05)
        merged = gatherer.merge({"w1": summary})["w1"]
        assert merged["partitions"] == whole["partitions"] and merged["lag_seconds"] == whole["lag_seconds"]
        # Reports stop arriving over HTTP while the summaries go on: the summary alone, once the
        # fetched report is more than three intervals old (a hung agent still shows as hung).
        later = {**summary, "updated": 100.0 + 7}
        served["updated"] = 50.0
        assert "partitions" not in gatherer.merge({"w1": later})["w1"]
    finally:
        gatherer.close()
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(url.replace("/metrics", "/stats"), timeout=10)  # the token guards /stats too


def test_rest_workers_show_a_summary_s_totals_until_the_whole_report_arrives() -> None:
    from strait.config import parse_config
    from strait.controller.service import ControllerService
    from strait.coordination.model import Assignment, ClusterSnapshot, WorkerRecord, WorkerState
    from tests.unit.test_metrics import SnapshotStore

    config = parse_config(
        {"clusters": {"src": {}, "dst": {}}, "routes": [{"name": "r", "source": "src", "destination": "dst"}]},
        environ={},
    )
    summary = stats.for_zookeeper(_report(2_000), 2.0)
    snapshot = ClusterSnapshot(
        topics={},
        removed=frozenset(),
        workers={"w1": WorkerRecord("w1", WorkerState.ACTIVE)},
        stats={"w1": summary},
        assignment=Assignment(),
        leader=None,
    )
    service = ControllerService(config=config, store=SnapshotStore(snapshot), metadata=None)  # type: ignore[arg-type]
    (row,) = service.workers()
    assert (row["records_copied"], row["lag"]) == (4_000, 2_000)
