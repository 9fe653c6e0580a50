"""Per-broker round-trip times when a route has several clients per cluster (one per fetch pipeline)."""

from __future__ import annotations

import json
from typing import Any

from strait.metrics.stages import RTT_STALE_AFTER_S, SOURCE, RouteObserver


def _stats(client: str, rtt: dict[int, tuple[int, int]]) -> str:
    brokers: dict[str, Any] = {
        f"127.0.0.1:9092/{node}": {"nodeid": node, "rtt": {"cnt": 3 if p99 else 0, "p50": p50, "p99": p99}}
        for node, (p50, p99) in rtt.items()
    }
    return json.dumps({"name": client, "brokers": brokers, "topics": {}})


def test_an_idle_client_does_not_blank_out_a_busy_one() -> None:
    now = [100.0]
    observer = RouteObserver("r", clock=lambda: now[0])
    busy, idle = observer.client_stats(SOURCE), observer.client_stats(SOURCE)
    busy(_stats("rdkafka#consumer-1", {1: (1000, 4000)}))
    idle(_stats("rdkafka#consumer-2", {1: (0, 0)}))  # no requests in its window: no figure
    [rtt] = observer.broker_rtts()[SOURCE]
    assert (rtt.broker, rtt.p50_s, rtt.p99_s) == ("1", 0.001, 0.004)


def test_the_slowest_client_figure_per_broker_counts_and_stale_clients_drop_out() -> None:
    now = [100.0]
    observer = RouteObserver("r", clock=lambda: now[0])
    observer.client_stats(SOURCE)(_stats("a", {1: (1000, 2000), 2: (1000, 3000)}))
    now[0] += 1
    observer.client_stats(SOURCE)(_stats("b", {1: (5000, 9000)}))
    assert [(r.broker, r.p99_s) for r in observer.broker_rtts()[SOURCE]] == [("1", 0.009), ("2", 0.003)]
    now[0] += RTT_STALE_AFTER_S - 0.5  # client "a" has stopped reporting (closed): its figures go
    assert [(r.broker, r.p99_s) for r in observer.broker_rtts()[SOURCE]] == [("1", 0.009)]
    now[0] += 1
    assert observer.broker_rtts() == {}
