"""The shipped Prometheus configuration and alert rules only use metrics Strait exposes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy/prometheus"
METRIC = re.compile(r"\bstrait_[a-z_]+\b")
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def exposed_names() -> set[str]:
    """Metric family names declared by Strait's collectors."""
    names: set[str] = set()
    for source in (ROOT / "src/strait/metrics").glob("*.py"):
        names |= set(re.findall(r'"(strait_[a-z_]+)"', source.read_text()))
    return names


def family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_every_alert_names_an_exposed_metric_and_has_a_summary() -> None:
    rules = yaml.safe_load((DEPLOY / "strait-alerts.yml").read_text())
    exposed = exposed_names()
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {a["alert"] for a in alerts} >= {
        "StraitNoLeader",
        "StraitWorkerDead",
        "StraitPartitionStuck",
        "StraitLagTooHigh",
    }
    for alert in alerts:
        used = {family(m) for m in METRIC.findall(alert["expr"])}
        assert used, alert["alert"]
        assert used <= exposed, (alert["alert"], used - exposed)
        assert alert["annotations"]["summary"]
        assert alert["labels"]["severity"] in ("page", "warn")


def test_the_scrape_config_loads_the_rules_and_discovers_workers() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert config["rule_files"] == ["strait-alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert all(sd["url"].endswith("/metrics/targets") for sd in jobs["strait-worker"]["http_sd_configs"])


def test_metric_names_follow_prometheus_conventions() -> None:
    for name in exposed_names():
        assert name == name.lower() and not name.endswith("_total"), name  # counters get _total on exposition
        assert not re.search(r"_(ms|milliseconds|kb|mb)\b", name), f"{name}: use base units (seconds, bytes)"
