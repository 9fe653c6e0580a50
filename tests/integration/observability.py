"""Helpers shared by the observability integration tests: a fleet with observability settings,
scraping and parsing Prometheus metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from strait.demo import Fleet

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class ObservedFleet(Fleet):
    """A `Fleet` whose configuration file carries an `observability` section (and a `balance`
    one, when given)."""

    observability: dict[str, Any] = field(default_factory=dict)
    balance: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["observability"] = {"sample_interval_s": 1.0, **self.observability}
        if self.balance:
            config["balance"] = self.balance
        return config

    def url(self, controller: str = "c1") -> str:
        return f"http://127.0.0.1:{self.ports[controller]}"


def scrape(url: str) -> Samples:
    """Every sample of a `/metrics` page, keyed by (name, sorted labels)."""
    text = httpx.get(url, timeout=10).raise_for_status().text
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of `name` over the series whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


def worker_metrics_url(fleet: ObservedFleet, worker: str) -> str | None:
    view = httpx.get(fleet.url() + "/observability", timeout=10).json()
    return next((w["metrics_url"] for w in view.get("workers", []) if w["id"] == worker and w["live"]), None)
