"""Read librdkafka's statistics (the JSON its `stats_cb` receives) for per-broker figures.

Two things come from it: which broker leads each partition (so copy-path latencies carry a
`broker` label and one slow broker stands out), and each broker's request round-trip time as
librdkafka measured it. Pure functions over the decoded JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BrokerLatency:
    """Round-trip time of requests to one broker over librdkafka's last statistics window."""

    broker: str
    p50_s: float
    p99_s: float


def leaders(stats: Mapping[str, Any]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> leader broker id as text, for the partitions the client knows."""
    out: dict[tuple[str, int], str] = {}
    for topic, entry in dict(stats.get("topics") or {}).items():
        for partition, detail in dict(entry.get("partitions") or {}).items():
            try:
                number = int(partition)
                leader = int(detail.get("leader", -1))
            except (TypeError, ValueError):
                continue
            if number >= 0 and leader >= 0:  # -1 is librdkafka's UA (unassigned) partition
                out[(str(topic), number)] = str(leader)
    return out


def broker_latencies(stats: Mapping[str, Any]) -> list[BrokerLatency]:
    """RTT percentiles per real broker (bootstrap and internal entries have nodeid -1)."""
    out: list[BrokerLatency] = []
    for entry in dict(stats.get("brokers") or {}).values():
        node = entry.get("nodeid", -1)
        rtt = entry.get("rtt") or {}
        if not isinstance(node, int) or node < 0 or not rtt.get("cnt"):
            continue
        # librdkafka reports microseconds.
        out.append(BrokerLatency(str(node), float(rtt.get("p50", 0)) / 1e6, float(rtt.get("p99", 0)) / 1e6))
    return sorted(out, key=lambda b: b.broker)
