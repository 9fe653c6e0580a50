"""Per-broker round trips of the batch pipeline's produce requests, for the route's metrics.

Record mode's clients are librdkafka's, whose statistics callback feeds
:meth:`strait.metrics.stages.RouteObserver.client_stats`: per-broker round-trip percentiles
(``strait_broker_rtt_seconds``) and the partition leaders that label the ``produce_ack`` stage.
The batch pipeline has no librdkafka client, so it measures its own produce round trips (send
to answer, per destination broker) and reports them through the same callback, in the same
shape (``brokers.<name>.nodeid`` and ``rtt`` ``cnt``/``p50``/``p99`` in microseconds,
``topics.<t>.partitions.<p>.leader``), once per interval, over the answers of the last
``window_s`` (an idle partition's broker keeps its recent figures rather than none).
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable, Mapping

from strait.metrics.stages import STATS_INTERVAL_MS


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending, non-empty list."""
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


class RoundTrips:
    """Round trips of one cluster's requests by broker, reported every ``interval_s``."""

    def __init__(
        self,
        receive: Callable[[str], None],
        name: str,
        *,
        interval_s: float = STATS_INTERVAL_MS / 1000,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._receive = receive
        self._name = name
        self._interval_s = interval_s
        self._window_s = window_s
        self._clock = clock
        self._samples: dict[int, deque[tuple[float, float]]] = {}
        self._next_report = clock() + interval_s

    def record(self, node: int, seconds: float) -> None:
        samples = self._samples.get(node)
        if samples is None:
            samples = self._samples[node] = deque(maxlen=10_000)
        samples.append((self._clock(), seconds))

    def report_due(self, leaders: Callable[[], Mapping[tuple[str, int], int]]) -> bool:
        """Report the interval's figures if it is over (``leaders``: partition -> leader node)."""
        now = self._clock()
        if now < self._next_report:
            return False
        self._next_report = now + self._interval_s
        brokers = {}
        for node, samples in self._samples.items():
            while samples and samples[0][0] < now - self._window_s:
                samples.popleft()
            values = sorted(seconds for _, seconds in samples)
            if not values:
                continue
            brokers[f"node-{node}"] = {
                "nodeid": node,
                "rtt": {
                    "cnt": len(values),
                    "p50": percentile(values, 0.5) * 1e6,
                    "p99": percentile(values, 0.99) * 1e6,
                },
            }
        topics: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
        for (topic, partition), leader in leaders().items():
            topics.setdefault(topic, {"partitions": {}})["partitions"][str(partition)] = {"leader": leader}
        self._receive(json.dumps({"name": self._name, "brokers": brokers, "topics": topics}))
        return True
