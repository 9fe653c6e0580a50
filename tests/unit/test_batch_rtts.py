"""The batch pipeline's produce round trips reach the route's metrics like librdkafka's statistics."""

from __future__ import annotations

import json

from strait.metrics.stages import RouteObserver
from strait.worker.batch.rtts import RoundTrips, percentile


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0


def test_round_trips_reach_the_observer_as_broker_latencies_and_leaders() -> None:
    clock = Clock()
    observer = RouteObserver("r", clock=clock)
    trips = RoundTrips(observer.client_stats("destination"), "strait-r-w1-batch", interval_s=5, clock=clock)
    for ms in range(1, 101):
        trips.record(2, ms / 1000)
    trips.record(3, 0.004)
    assert not trips.report_due(lambda: {})
    clock.now += 5
    assert trips.report_due(lambda: {("t", 0): 2, ("t", 1): 3})
    rtts = {b.broker: b for b in observer.broker_rtts()["destination"]}
    assert rtts["2"].p50_s == 0.05 and rtts["2"].p99_s == 0.099 and rtts["3"].p50_s == 0.004
    # The leaders label the produce acknowledgements by broker.
    observer.acked("batch", "t", 1, 0.01, 0)
    assert any(key[2] == "3" for key in observer.stages())


def test_an_idle_broker_keeps_its_recent_figures_then_drops_them() -> None:
    clock = Clock()
    sent: list[dict[str, object]] = []
    trips = RoundTrips(lambda payload: sent.append(json.loads(payload)), "c", interval_s=5, window_s=60, clock=clock)
    trips.record(1, 0.002)
    clock.now += 5
    trips.report_due(dict)
    clock.now += 30
    trips.report_due(dict)
    assert sent[-1]["brokers"]["node-1"]["rtt"]["cnt"] == 1  # type: ignore[index]
    clock.now += 60
    trips.report_due(dict)
    assert sent[-1]["brokers"] == {}
