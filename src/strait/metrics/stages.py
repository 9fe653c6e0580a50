"""Hooks on one route's copy path: per-stage latencies, end-to-end latency, broker labels.

The copier and its fetch pipelines call a `RouteObserver` at each stage of a record's trip:

- ``fetch_wait``: how long a pipeline's consume call waited before records arrived;
- ``queued``: from the consume call returning a record to handing it to the producer (records
  wait behind the rest of their batch);
- ``produce_ack``: from producing a record to the destination's acknowledgement, labelled with
  the destination broker leading the partition (a full producer queue shows up here);
  the record copy loop reports a systematic sample of its records, each standing for ``count``
  records (see strait.worker.deliveries), so counts still add up to records;
- ``checkpoint_commit``: committing checkpoints to the source cluster.

End-to-end latency runs from the source record's timestamp to the destination's
acknowledgement. Broker leadership and per-broker round-trip times come from librdkafka's own
statistics (`client_stats` returns the `stats_cb` to install), so a slow broker shows up
under its own label without extra metadata requests.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Protocol

from strait.metrics.histogram import BucketCounts, Buckets
from strait.metrics.librdkafka import BrokerLatency, broker_latencies, leaders
from strait.offsetmap.cost import MapCost

log = logging.getLogger(__name__)

FETCH_WAIT = "fetch_wait"
QUEUED = "queued"
PRODUCE_ACK = "produce_ack"
CHECKPOINT_COMMIT = "checkpoint_commit"
STAGES = (FETCH_WAIT, QUEUED, PRODUCE_ACK, CHECKPOINT_COMMIT)

SOURCE = "source"
DESTINATION = "destination"
# librdkafka statistics interval for the copy path's clients: often enough to follow leader
# changes, rare enough that decoding the JSON costs nothing noticeable.
STATS_INTERVAL_MS = 5000
# A client's round-trip times count until it has missed about three statistics reports.
RTT_STALE_AFTER_S = 3 * STATS_INTERVAL_MS / 1000
# Stages not tied to one broker (a consume call reads from all of them; a commit goes to the
# group coordinator).
ANY_BROKER = "any"

StageKey = tuple[str, str, str]  # (pipeline, stage, broker)


class CopyObserver(Protocol):
    """What the copier and its pipelines report; `RouteObserver` is the real one."""

    def fetched(self, pipeline: str, wait_s: float) -> None: ...
    def queued(self, pipeline: str, seconds: float, count: int = 1) -> None: ...
    def acked(
        self, pipeline: str, topic: str, partition: int, ack_s: float | None, timestamp_ms: int, count: int = 1
    ) -> None: ...
    def committed(self, seconds: float) -> None: ...
    def client_stats(self, role: str) -> Callable[[str], None]: ...
    def offset_gap(self, kind: str) -> None: ...
    def checkpoint_refused(self, kind: str) -> None: ...


class RouteObserver:
    """Latency figures of one route on one worker.

    Each histogram has one writer thread: stage histograms are keyed by pipeline (one thread
    each, and delivery callbacks run on the pipeline's thread), commits come from the copier's
    control thread.
    """

    def __init__(self, route: str, *, clock: Callable[[], float] = time.time) -> None:
        self.route = route
        self._clock = clock
        self._stages: dict[StageKey, Buckets] = {}
        self._e2e: dict[tuple[str, str], Buckets] = {}  # (pipeline, topic)
        self._last_timestamp: dict[tuple[str, int], int] = {}  # source timestamp (ms) of the last ack
        self._leaders: dict[str, dict[tuple[str, int], str]] = {}
        # Per (role, librdkafka client name): when it last reported, and its round-trip times.
        # Keyed by client because a route's pipelines each have their own consumer and producer:
        # an idle client's empty report must not blank out a busy one's figures.
        self._rtt: dict[tuple[str, str], tuple[float, list[BrokerLatency]]] = {}
        # Data-path safety events by kind (`strait_offset_gaps_total`, `strait_checkpoint_violations_total`).
        self._gaps: dict[str, int] = {}
        self._refused: dict[str, int] = {}
        # What the route's offset map costs on this worker (its writers add to it).
        self.offset_map = MapCost()

    # --- hooks (copy path) ---------------------------------------------------------------
    def fetched(self, pipeline: str, wait_s: float) -> None:
        self._stage(pipeline, FETCH_WAIT, ANY_BROKER).observe(wait_s)

    def queued(self, pipeline: str, seconds: float, count: int = 1) -> None:
        """``count`` records waited ``seconds`` (a produce pass reports its records together)."""
        self._stage(pipeline, QUEUED, ANY_BROKER).observe(seconds, count)

    def acked(
        self, pipeline: str, topic: str, partition: int, ack_s: float | None, timestamp_ms: int, count: int = 1
    ) -> None:
        """`topic` is the destination topic (the one the acknowledgement is for); one record's
        figures standing for ``count`` records; ``ack_s`` None when the client did not measure it."""
        if ack_s is not None:
            broker = self._leaders.get(DESTINATION, {}).get((topic, partition), "unknown")
            self._stage(pipeline, PRODUCE_ACK, broker).observe(ack_s, count)
        if timestamp_ms > 0:
            self._last_timestamp[(topic, partition)] = timestamp_ms
            key = (pipeline, topic)
            buckets = self._e2e.get(key)
            if buckets is None:
                buckets = self._e2e[key] = Buckets()
            buckets.observe(max(0.0, self._clock() - timestamp_ms / 1000), count)

    def committed(self, seconds: float) -> None:
        self._stage("control", CHECKPOINT_COMMIT, ANY_BROKER).observe(seconds)

    def offset_gap(self, kind: str) -> None:
        """A gap between consecutive offsets: accepted (`source`, `retention`) or rewound (`unexpected`)."""
        self._gaps[kind] = self._gaps.get(kind, 0) + 1

    def checkpoint_refused(self, kind: str) -> None:
        """A checkpoint commit that would have moved backwards or past an unacknowledged record."""
        self._refused[kind] = self._refused.get(kind, 0) + 1

    def client_stats(self, role: str) -> Callable[[str], None]:
        """A librdkafka `stats_cb` for a client of the source or destination cluster."""

        def receive(payload: str) -> None:
            try:
                stats = json.loads(payload)
            except ValueError:
                return
            # Whole-value replacement: readers on other threads see the old or the new map.
            self._leaders[role] = {**self._leaders.get(role, {}), **leaders(stats)}
            self._rtt[(role, str(stats.get("name", "")))] = (self._clock(), broker_latencies(stats))

        return receive

    def _stage(self, pipeline: str, stage: str, broker: str) -> Buckets:
        key = (pipeline, stage, broker)
        buckets = self._stages.get(key)
        if buckets is None:
            buckets = self._stages[key] = Buckets()
        return buckets

    # --- readers (any thread) ------------------------------------------------------------
    def stages(self) -> dict[StageKey, BucketCounts]:
        return {key: b.snapshot() for key, b in self._stages.copy().items()}

    def end_to_end(self) -> dict[str, BucketCounts]:
        """Per topic, over every pipeline."""
        merged: dict[str, BucketCounts] = {}
        for (_pipeline, topic), buckets in self._e2e.copy().items():
            snap = buckets.snapshot()
            merged[topic] = merged[topic].plus(snap) if topic in merged else snap
        return merged

    def end_to_end_of(self, *pipelines: str) -> BucketCounts | None:
        """The end-to-end latency so far of these pipelines, over their topics (None before the
        first); the batch pipeline's latency pace reads the realtime role's pipelines'."""
        merged: BucketCounts | None = None
        for (name, _topic), buckets in self._e2e.copy().items():
            if name in pipelines:
                snap = buckets.snapshot()
                merged = snap if merged is None else merged.plus(snap)
        return merged

    def end_to_end_by_topic(self, *pipelines: str) -> dict[str, BucketCounts]:
        """These pipelines' end-to-end latency so far, per destination topic: the latency pace
        leaves out topics whose partitions are finishing a backlog in the realtime pipelines."""
        merged: dict[str, BucketCounts] = {}
        for (name, topic), buckets in self._e2e.copy().items():
            if name in pipelines:
                snap = buckets.snapshot()
                known = merged.get(topic)
                merged[topic] = snap if known is None else known.plus(snap)
        return merged

    def offset_gaps(self) -> dict[str, int]:
        return dict(self._gaps)

    def checkpoints_refused(self) -> dict[str, int]:
        return dict(self._refused)

    def broker_rtts(self) -> dict[str, list[BrokerLatency]]:
        """Per role, each broker's round-trip times from the clients that reported recently; where
        several clients talk to one broker, the slowest (highest p99) figures."""
        fresh_after = self._clock() - RTT_STALE_AFTER_S
        merged: dict[str, dict[str, BrokerLatency]] = {}
        for (role, _client), (reported, latencies) in self._rtt.copy().items():
            if reported < fresh_after:
                continue  # a client closed since (a pipeline replaced): its figures are history
            brokers = merged.setdefault(role, {})
            for latency in latencies:
                known = brokers.get(latency.broker)
                if known is None or latency.p99_s > known.p99_s:
                    brokers[latency.broker] = latency
        return {role: [b[k] for k in sorted(b)] for role, b in merged.items() if b}

    def lag_seconds(self, topic: str, partition: int, lag: int | None) -> float | None:
        """How far behind the copy is in time: 0 when caught up, else the age of the newest
        acknowledged record (None before the first one)."""
        if lag is None:
            return None
        if lag == 0:
            return 0.0
        timestamp = self._last_timestamp.get((topic, partition))
        if timestamp is None:
            return None
        return max(0.0, self._clock() - timestamp / 1000)


def client_settings(observer: CopyObserver | None, role: str) -> dict[str, object]:
    """librdkafka settings that route a client's statistics to `observer` (none without one)."""
    if observer is None:
        return {}
    return {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": observer.client_stats(role)}
