"""`deploy/grafana/strait.json` is an importable dashboard whose every query names a metric Strait declares.

The integration test `tests/integration/test_grafana.py` checks the same names against a running
controller and worker; this one is fast and needs no cluster.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from strait.metrics.worker import WorkerMetrics
from tests import grafana

ROOT = Path(__file__).resolve().parents[2]
_FAMILY = re.compile(r'(Counter|Gauge|Histogram)MetricFamily\(\s*"(strait_[a-z_]+)"')
_SUFFIXES = {"Counter": ("_total",), "Gauge": ("",), "Histogram": ("_bucket", "_sum", "_count")}


def declared_in_source() -> set[str]:
    """Sample names of every metric family Strait's collectors declare, by the family's type."""
    names: set[str] = set()
    for source in (ROOT / "src/strait/metrics").glob("*.py"):
        for kind, family in _FAMILY.findall(source.read_text()):
            names |= {family + suffix for suffix in _SUFFIXES[kind]}
    return names


def test_the_dashboard_is_importable_json_with_a_prometheus_input() -> None:
    dashboard = grafana.load()
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    [source] = dashboard["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == ("DS_PROMETHEUS", "datasource", "prometheus")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_every_panel_has_a_datasource_and_non_empty_queries() -> None:
    dashboard = grafana.load()
    panels = list(grafana.panels(dashboard))
    assert len(panels) >= 20
    for panel in panels:
        title = panel.get("title")
        assert title, panel
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, title
        targets = panel.get("targets") or []
        assert targets, f"{title}: no query"
        ref_ids = [t["refId"] for t in targets]
        assert len(ref_ids) == len(set(ref_ids)), title
        for target in targets:
            assert target.get("expr", "").strip(), f"{title}: empty expr"
            assert target.get("datasource", panel["datasource"]) == panel["datasource"], title
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, variable["name"]


def test_panels_fit_the_grid_without_overlapping() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in grafana.load()["panels"]:
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(box["x"], box["x"] + box["w"]) for y in range(box["y"], box["y"] + box["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_query_names_only_metrics_strait_declares() -> None:
    declared = declared_in_source()
    for where, expr in grafana.queries(grafana.load()):
        names = grafana.metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        assert names <= declared, f"{where}: {sorted(names - declared)} are not exported under these names"


def test_the_dashboard_covers_what_operators_watch() -> None:
    queried = {name for _where, expr in grafana.queries(grafana.load()) for name in grafana.metric_names(expr)}
    for needed in (
        "strait_controller_leader",  # fleet
        "strait_workers",
        "strait_copied_records_total",  # throughput per route
        "strait_copied_bytes_total",
        "strait_topic_lag_records",  # lag in records and seconds
        "strait_replication_lag_seconds",
        "strait_end_to_end_latency_seconds_bucket",  # latency percentiles
        "strait_stage_seconds_bucket",
        "strait_partition_stuck",  # stuck partitions
        "strait_checkpoint_violations_total",  # data-path safety
        "strait_offset_gaps_total",
        "strait_balance_progress_ratio",  # balancer progress
    ):
        assert needed in queried, needed


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (route) (rate(strait_copied_records_total{route=~"$route"}[$__rate_interval]))',
            {"strait_copied_records_total"},
        ),
        ("sum(rate(a_total[5m] offset 1h)) by (route) / ignoring (le) b_count", {"a_total", "b_count"}),
        ("histogram_quantile(0.99, sum by (le) (rate(x_bucket[${__rate_interval}])))", {"x_bucket"}),
        ("x * on (instance) group_left (worker) y > 1e3", {"x", "y"}),
        ("z{kind=\"by (route) {odd}\", other='sum(q)'} and w unless v", {"z", "w", "v"}),
        ("label_values(strait_route_topics, route)", {"strait_route_topics"}),
        ("time() - max(last_seen)", {"last_seen"}),
        ("vector(1)", set()),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert grafana.metric_names(expr) == names


def test_exported_names_follow_each_family_type() -> None:
    metrics = WorkerMetrics("w1")
    metrics.route("r").acked("p0", "t", 0, 0.01, 1)
    declared, present = grafana.exported(generate_latest(metrics.registry).decode())
    assert {"strait_copied_records_total", "strait_worker_info", "strait_stage_seconds_bucket"} <= declared
    assert "strait_copied_records" not in declared  # a counter is stored with its _total
    assert "strait_stage_seconds" not in declared  # a histogram only as _bucket/_sum/_count
    assert "strait_stage_seconds_count" in present and "strait_copied_records_total" not in present
