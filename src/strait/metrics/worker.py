"""A worker's metrics: what its copiers report, exposed on `GET /metrics` and in its stats report.

`WorkerMetrics` keeps one `RouteObserver` per route and the copiers it watches. Scrapes read the
copiers' `stats()` at that moment (no second set of counters to keep in step), plus the
latency histograms the copy path fills. `report()` adds windowed latency percentiles and lag in
seconds to the stats the worker publishes for the controller, which gathers every worker's
figures for the dashboard.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from strait.metrics.histogram import BucketCounts
from strait.metrics.stages import RouteObserver
from strait.offsetmap.cost import per_gigabyte

PARTITION_LABELS = ["route", "topic", "partition"]
PARTITION_STATES = ("ok", "starting", "moving", "draining", "retrying", "failed")


class StatsSource(Protocol):
    """A route's copier as seen here: `strait.worker.copier.Copier` is one."""

    def stats(self) -> Mapping[Any, Any]: ...


class WorkerMetrics:
    """Everything one worker process exposes."""

    def __init__(self, worker_id: str, *, clock: Callable[[], float] = time.time) -> None:
        self.worker_id = worker_id
        self.url: str | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._routes: dict[str, RouteObserver] = {}
        self._copiers: dict[str, StatsSource] = {}
        self._reported: dict[tuple[str, str], BucketCounts] = {}
        # (cause, action) -> how often the worker's watchdog acted (strait.worker.watchdog).
        self.watchdog_actions: Callable[[], Mapping[tuple[str, str], int]] = dict
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_WorkerCollector(self))

    def route(self, name: str) -> RouteObserver:
        """The observer to hand to route `name`'s copier."""
        with self._lock:
            observer = self._routes.get(name)
            if observer is None:
                observer = self._routes[name] = RouteObserver(name, clock=self._clock)
            return observer

    def track(self, route: str, copier: StatsSource) -> None:
        """Expose `copier`'s per-partition stats."""
        with self._lock:
            self._copiers[route] = copier

    def partitions(self) -> list[tuple[str, str, int, dict[str, Any]]]:
        """(route, topic, partition, stats as a dict) of every assigned partition; the stats
        carry the partition's `lag_seconds` too."""
        with self._lock:
            copiers = list(self._copiers.items())
            observers = dict(self._routes)
        rows: list[tuple[str, str, int, dict[str, Any]]] = []
        for route, copier in copiers:
            observer = observers.get(route)
            for task, entry in copier.stats().items():
                stats = entry.as_dict() if callable(getattr(entry, "as_dict", None)) else dict(entry)
                # The copy path reports acknowledgements under the destination topic's name.
                destination = str(getattr(task, "destination_topic", task.topic))
                lag = stats.get("lag")
                stats["lag_seconds"] = observer.lag_seconds(destination, int(task.partition), lag) if observer else None
                rows.append((route, str(task.topic), int(task.partition), stats))
        return rows

    def observers(self) -> dict[str, RouteObserver]:
        with self._lock:
            return dict(self._routes)

    def report(self) -> dict[str, Any]:
        """Extra figures for the stats report the worker publishes (JSON-ready).

        Latency percentiles cover what was observed since the previous report, so the
        controller's dashboard shows the current latency, not an all-time average.
        """
        lag_seconds: dict[str, float] = {}
        observers = self.observers()
        for route, topic, partition, stats in self.partitions():
            if stats["lag_seconds"] is not None:
                lag_seconds[f"{route}/{topic}/{partition}"] = round(stats["lag_seconds"], 3)
        latency: dict[str, dict[str, Any]] = {}
        stages: dict[str, dict[str, dict[str, Any]]] = {}
        for route, observer in observers.items():
            window = self._window(route, "e2e", _sum(observer.end_to_end().values()))
            if window is not None:
                latency[route] = _summary(window)
            for stage, counts in _by_stage(observer).items():
                window = self._window(route, stage, counts)
                if window is not None and window.count:
                    stages.setdefault(route, {})[stage] = _summary(window)
        return {"metrics_url": self.url, "lag_seconds": lag_seconds, "latency": latency, "stages": stages}

    def _window(self, route: str, name: str, counts: BucketCounts | None) -> BucketCounts | None:
        if counts is None:
            return None
        previous = self._reported.get((route, name))
        self._reported[(route, name)] = counts
        return counts if previous is None else counts.minus(previous)


def _sum(items: Any) -> BucketCounts | None:
    total: BucketCounts | None = None
    for counts in items:
        total = counts if total is None else total.plus(counts)
    return total


def _by_stage(observer: RouteObserver) -> dict[str, BucketCounts]:
    merged: dict[str, BucketCounts] = {}
    for (_pipeline, stage, _broker), counts in observer.stages().items():
        merged[stage] = merged[stage].plus(counts) if stage in merged else counts
    return merged


def _summary(counts: BucketCounts) -> dict[str, Any]:
    p50, p99 = counts.quantile(0.5), counts.quantile(0.99)
    return {
        "count": counts.count,
        "p50_s": None if p50 is None else round(p50, 4),
        "p99_s": None if p99 is None else round(p99, 4),
    }


def _histogram(family: HistogramMetricFamily, labels: list[str], counts: BucketCounts) -> None:
    family.add_metric(labels, counts.cumulative(), counts.total)


class _WorkerCollector(Collector):
    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self._metrics
        info = GaugeMetricFamily("strait_worker_info", "This process is a Strait worker.", labels=["worker"])
        info.add_metric([m.worker_id], 1)
        yield info
        yield from self._partitions()
        yield from self._latencies()
        yield from self._safety()
        yield self._watchdog()

    def _watchdog(self) -> Any:
        actions = CounterMetricFamily(
            "strait_watchdog_actions",
            "Actions of the worker's watchdog by cause (loop_overdue, partition_stalled) and action "
            "(stack_dump, restart_partition, exit).",
            labels=["cause", "action"],
        )
        for (cause, action), count in sorted(self._metrics.watchdog_actions().items()):
            actions.add_metric([cause, action], float(count))
        return actions

    def _safety(self) -> Iterator[Any]:
        gaps = CounterMetricFamily(
            "strait_offset_gaps",
            "Gaps between consecutive source offsets: kind source/retention were accepted, "
            "unexpected ones (a record the copy loop dropped) rewound the partition.",
            labels=["route", "kind"],
        )
        refused = CounterMetricFamily(
            "strait_checkpoint_violations",
            "Checkpoint commits refused (backwards, or past an unacknowledged record).",
            labels=["route", "kind"],
        )
        for route, observer in sorted(self._metrics.observers().items()):
            for kind, count in sorted(observer.offset_gaps().items()):
                gaps.add_metric([route, kind], float(count))
            for kind, count in sorted(observer.checkpoints_refused().items()):
                refused.add_metric([route, kind], float(count))
        yield from (gaps, refused)

    def _partitions(self) -> Iterator[Any]:
        m = self._metrics
        records = CounterMetricFamily(
            "strait_copied_records", "Records copied and acknowledged by the destination.", labels=PARTITION_LABELS
        )
        size = CounterMetricFamily(
            "strait_copied_bytes", "Key and value bytes copied and acknowledged.", labels=PARTITION_LABELS
        )
        lag = GaugeMetricFamily(
            "strait_replication_lag_records", "Source end offset minus checkpoint.", labels=PARTITION_LABELS
        )
        lag_s = GaugeMetricFamily(
            "strait_replication_lag_seconds",
            "0 when caught up, else the age of the newest acknowledged record.",
            labels=PARTITION_LABELS,
        )
        checkpoint = GaugeMetricFamily(
            "strait_checkpoint_offset", "Offset up to which the destination has every record.", labels=PARTITION_LABELS
        )
        end = GaugeMetricFamily("strait_source_end_offset", "Source partition's end offset.", labels=PARTITION_LABELS)
        in_flight = GaugeMetricFamily(
            "strait_in_flight_records", "Records sent but not acknowledged yet.", labels=PARTITION_LABELS
        )
        progress = GaugeMetricFamily(
            "strait_last_progress_timestamp_seconds",
            "Unix time of the partition's last acknowledged record.",
            labels=PARTITION_LABELS,
        )
        rewinds = CounterMetricFamily(
            "strait_rewinds", "Times the partition was resent from its checkpoint.", labels=PARTITION_LABELS
        )
        state = GaugeMetricFamily(
            "strait_partition_state", "1 for the partition's copy state.", labels=[*PARTITION_LABELS, "state"]
        )
        assigned: dict[str, int] = {}
        copied: dict[str, int] = {}
        observers = m.observers()
        for route, topic, partition, stats in m.partitions():
            labels = [route, topic, str(partition)]
            assigned[route] = assigned.get(route, 0) + 1
            records.add_metric(labels, float(stats.get("records") or 0))
            size.add_metric(labels, float(stats.get("bytes") or 0))
            copied[route] = copied.get(route, 0) + int(stats.get("bytes") or 0)
            in_flight.add_metric(labels, float(stats.get("in_flight") or 0))
            rewinds.add_metric(labels, float(stats.get("rewinds") or 0))
            for family, name in ((lag, "lag"), (checkpoint, "checkpoint"), (end, "source_end")):
                if stats.get(name) is not None:
                    family.add_metric(labels, float(stats[name]))
            if stats.get("last_progress") is not None:
                progress.add_metric(labels, float(stats["last_progress"]))
            if stats["lag_seconds"] is not None:
                lag_s.add_metric(labels, stats["lag_seconds"])
            current = str(stats.get("state") or "ok").split(":", 1)[0]
            for name in PARTITION_STATES:
                state.add_metric([*labels, name], 1.0 if current == name else 0.0)
        partitions = GaugeMetricFamily("strait_assigned_partitions", "Partitions this worker copies.", labels=["route"])
        for route in sorted(set(assigned) | set(observers)):
            partitions.add_metric([route], assigned.get(route, 0))
        yield from (records, size, lag, lag_s, checkpoint, end, in_flight, progress, rewinds, state, partitions)
        yield from self._offset_map(observers, copied)

    def _offset_map(self, observers: Mapping[str, RouteObserver], copied: Mapping[str, int]) -> Iterator[Any]:
        """The offset map's cost per route (strait.offsetmap.cost): routes without a map write none."""
        runs = CounterMetricFamily(
            "strait_offset_map_runs",
            "Offset map records (one run of consecutive copies each) this worker wrote: the map's write rate.",
            labels=["route"],
        )
        size = CounterMetricFamily(
            "strait_offset_map_bytes", "Key and value bytes of the offset map records written.", labels=["route"]
        )
        lost = CounterMetricFamily(
            "strait_offset_map_runs_lost",
            "Runs not written to the offset map (its topic missing or refusing): failover cannot translate them.",
            labels=["route"],
        )
        per_gb = GaugeMetricFamily(
            "strait_offset_map_bytes_per_gigabyte_copied",
            "Offset map bytes written per 10^9 key and value bytes copied, since this worker started, over the "
            "partitions it holds (the windowed figure: rate of strait_offset_map_bytes_total over rate of "
            "strait_copied_bytes_total).",
            labels=["route"],
        )
        for route, observer in sorted(observers.items()):
            cost = observer.offset_map
            if not cost.runs and not cost.lost:
                continue
            runs.add_metric([route], float(cost.runs))
            size.add_metric([route], float(cost.bytes))
            lost.add_metric([route], float(cost.lost))
            ratio = per_gigabyte(cost.bytes, copied.get(route, 0))
            if ratio is not None:
                per_gb.add_metric([route], ratio)
        yield from (runs, size, lost, per_gb)

    def _latencies(self) -> Iterator[Any]:
        stages = HistogramMetricFamily(
            "strait_stage_seconds",
            "Time spent in each stage of the copy path.",
            labels=["route", "pipeline", "stage", "broker"],
        )
        e2e = HistogramMetricFamily(
            "strait_end_to_end_latency_seconds",
            "From the source record's timestamp to the destination's acknowledgement, per destination topic.",
            labels=["route", "topic"],
        )
        rtt = GaugeMetricFamily(
            "strait_broker_rtt_seconds",
            "Request round-trip time to a broker as librdkafka measured it.",
            labels=["route", "cluster", "broker", "quantile"],
        )
        for route, observer in sorted(self._metrics.observers().items()):
            for (pipeline, stage, broker), counts in sorted(observer.stages().items()):
                _histogram(stages, [route, pipeline, stage, broker], counts)
            for topic, counts in sorted(observer.end_to_end().items()):
                _histogram(e2e, [route, topic], counts)
            for cluster, latencies in sorted(observer.broker_rtts().items()):
                for latency in latencies:
                    rtt.add_metric([route, cluster, latency.broker, "0.5"], latency.p50_s)
                    rtt.add_metric([route, cluster, latency.broker, "0.99"], latency.p99_s)
        yield from (stages, e2e, rtt)
