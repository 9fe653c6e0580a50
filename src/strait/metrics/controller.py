"""The controller's `/metrics`: the fleet as the observatory last saw it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from strait.coordination.model import PartitionKey, WorkerState
from strait.metrics.balance import WatchCollector
from strait.metrics.observatory import Observatory

PARTITION_LABELS = ["route", "topic", "partition"]


def controller_registry(
    observatory: Observatory,
    group_sync: Callable[[], dict[str, Any]] | None = None,
    balance_watch: Callable[[], dict[str, Any]] | None = None,
    topic_config: Callable[[], dict[str, Any]] | None = None,
) -> CollectorRegistry:
    """``group_sync``: the consumer-group sync's view (strait.controller.groupsync.GroupSync.view);
    ``balance_watch``: the balance watch mode's (strait.balancer.watcher.BalanceWatcher.view);
    ``topic_config``: topic settings following's (strait.controller.topicconfig.TopicConfigFollower.view)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ControllerCollector(observatory))
    if group_sync is not None:
        registry.register(_GroupSyncCollector(group_sync))
    if topic_config is not None:
        registry.register(_TopicConfigCollector(topic_config))
    if balance_watch is not None:
        registry.register(WatchCollector(balance_watch))
    return registry


class _TopicConfigCollector(Collector):
    """Destination topic settings following the source's, as the leader's thread sees it."""

    def __init__(self, view: Callable[[], dict[str, Any]]) -> None:
        self._view = view

    def collect(self) -> Iterator[Any]:
        rounds = CounterMetricFamily(
            "strait_topic_config_rounds", "Complete comparisons of the route's topic settings.", labels=["route"]
        )
        changes = CounterMetricFamily(
            "strait_topic_config_changes",
            "Destination topics whose settings were changed to follow the source.",
            labels=["route"],
        )
        errors = CounterMetricFamily(
            "strait_topic_config_errors",
            "Failed comparisons or changes (cluster unreachable, a setting refused by the destination).",
            labels=["route"],
        )
        failing = GaugeMetricFamily(
            "strait_topic_config_failing_topics",
            "Destination topics whose last change was refused (their settings differ from the source's).",
            labels=["route"],
        )
        for route, state in sorted(self._view().items()):
            rounds.add_metric([route], state["rounds"])
            changes.add_metric([route], state["changes"])
            errors.add_metric([route], state["errors"])
            failing.add_metric([route], len(state["failing"]))
        yield from (rounds, changes, errors, failing)


class _GroupSyncCollector(Collector):
    """Consumer-group offset sync (routes with `groups:`), as the leader's sync thread sees it."""

    def __init__(self, view: Callable[[], dict[str, Any]]) -> None:
        self._view = view

    def collect(self) -> Iterator[Any]:
        synced = GaugeMetricFamily(
            "strait_groups_synced",
            "Source consumer groups whose translated offsets are in sync on the destination, per route.",
            labels=["route"],
        )
        active = GaugeMetricFamily(
            "strait_group_sync_active",
            "1 while a matching group has members on the destination, so its offsets are left alone.",
            labels=["route", "group"],
        )
        age = GaugeMetricFamily(
            "strait_group_translation_age_seconds",
            "Seconds since a group's offsets were last translated and in sync on the destination.",
            labels=["route", "group"],
        )
        untranslated = GaugeMetricFamily(
            "strait_group_untranslated_partitions",
            "Partitions of a group whose committed offset has no exact translation (older than the offset map).",
            labels=["route", "group"],
        )
        written = CounterMetricFamily(
            "strait_group_sync_offsets_written",
            "Partition offsets committed to destination groups by the sync.",
            labels=["route"],
        )
        errors = CounterMetricFamily(
            "strait_group_sync_errors", "Sync rounds that failed (cluster unreachable, ...).", labels=["route"]
        )
        for route, state in sorted(self._view().items()):
            groups = state["groups"]
            synced.add_metric([route], sum(1 for g in groups if g["synced"] and not g["active"]))
            written.add_metric([route], state.get("written", 0))
            errors.add_metric([route], state["errors"])
            for group in groups:
                active.add_metric([route, group["group"]], 1.0 if group["active"] else 0.0)
                untranslated.add_metric([route, group["group"]], group.get("untranslated", 0))
                if group["age_s"] is not None:
                    age.add_metric([route, group["group"]], group["age_s"])
        yield from (synced, active, age, untranslated, written, errors)


class _ControllerCollector(Collector):
    def __init__(self, observatory: Observatory) -> None:
        self._observatory = observatory

    def collect(self) -> Iterator[Any]:
        view = self._observatory.view()
        leader = GaugeMetricFamily("strait_controller_leader", "1 if this controller leads.", labels=["controller"])
        leader.add_metric([self._observatory.controller_id], 1.0 if view.get("leader") else 0.0)
        yield leader
        if view.get("updated") is None:
            return  # nothing sampled yet: absent series rather than misleading zeros
        yield from self._fleet(view)
        yield from self._partitions(view)
        yield from self._balance(view)

    def _fleet(self, view: dict[str, Any]) -> Iterator[Any]:
        states = GaugeMetricFamily("strait_workers", "Workers by lifecycle state.", labels=["state"])
        counts = view["workers_by_state"]
        for state in WorkerState:
            states.add_metric([state.value], counts.get(state.value, 0))
        per_worker = GaugeMetricFamily(
            "strait_worker_partitions", "Partitions assigned to each worker.", labels=["worker"]
        )
        hung = GaugeMetricFamily(
            "strait_worker_hung", "1 if a live worker stopped publishing its stats.", labels=["worker"]
        )
        slow = GaugeMetricFamily(
            "strait_worker_slow", "1 if a worker copies far less per partition than its peers.", labels=["worker"]
        )
        for worker in view["workers"]:
            if worker["live"]:
                per_worker.add_metric([worker["id"]], len(worker["partitions"]))
                hung.add_metric([worker["id"]], 1.0 if worker["hung"] else 0.0)
                slow.add_metric([worker["id"]], 1.0 if worker["slow"] else 0.0)
        unassigned = GaugeMetricFamily("strait_unassigned_partitions", "Partitions without an owner right now.")
        unassigned.add_metric([], view["unassigned"])
        counters = view["counters"]
        changes = CounterMetricFamily("strait_assignment_changes", "Partitions that moved to another worker.")
        changes.add_metric([], counters["assignment_changes"])
        topics = GaugeMetricFamily("strait_route_topics", "Topics replicated per route.", labels=["route"])
        throughput = GaugeMetricFamily(
            "strait_route_throughput_bytes_per_second",
            "Bytes/s acknowledged by the destination, per route.",
            labels=["route"],
        )
        no_worker = GaugeMetricFamily(
            "strait_route_no_live_worker",
            "1 while none of the worker pools a route may use has a live worker (its partitions wait).",
            labels=["route"],
        )
        for route in view["routes"]:
            topics.add_metric([route["name"]], route["topics"])
            throughput.add_metric([route["name"]], route["bytes_per_s"])
            no_worker.add_metric([route["name"]], 1.0 if route.get("no_live_worker") else 0.0)
        pools = GaugeMetricFamily(
            "strait_pool_workers", "Live workers that may be given partitions, per pool.", labels=["pool"]
        )
        for pool, count in view.get("pools", {}).items():
            pools.add_metric([pool], count)
        yield from (states, per_worker, hung, slow, unassigned, changes, topics, throughput, no_worker, pools)

    def _partitions(self, view: dict[str, Any]) -> Iterator[Any]:
        lag = GaugeMetricFamily(
            "strait_committed_lag_records",
            "Source end offset minus the committed checkpoint, read from the source cluster.",
            labels=PARTITION_LABELS,
        )
        stalled = GaugeMetricFamily(
            "strait_partition_stalled_seconds",
            "How long a lagging partition's checkpoint has not moved.",
            labels=PARTITION_LABELS,
        )
        for row in view["partitions"]:
            labels = _labels(row["partition"])
            if row["lag"] is not None:
                lag.add_metric(labels, row["lag"])
            stalled.add_metric(labels, row["stalled_s"])
        topic_lag = GaugeMetricFamily(
            "strait_topic_lag_records", "Committed lag summed per topic.", labels=["route", "topic"]
        )
        for name, value in view["lag_by_topic"].items():
            route, topic = name.split("/", 1)
            topic_lag.add_metric([route, topic], value)
        stuck = GaugeMetricFamily(
            "strait_partition_stuck", "1 while a partition is stuck.", labels=[*PARTITION_LABELS, "worker"]
        )
        flagged = GaugeMetricFamily("strait_healing_flagged_partitions", "Stuck partitions left for a person.")
        stuck_count = GaugeMetricFamily("strait_stuck_partitions", "Partitions stuck right now.")
        for row in view["stuck"]:
            if row["stuck"]:
                stuck.add_metric([*_labels(row["partition"]), row["worker"] or ""], 1.0)
        stuck_count.add_metric([], sum(1 for r in view["stuck"] if r["stuck"]))
        flagged.add_metric([], sum(1 for r in view["stuck"] if r["flagged"]))
        moves = CounterMetricFamily("strait_healing_moves", "Stuck partitions moved to another worker.")
        moves.add_metric([], view["counters"]["healing_moves"])
        yield from (lag, stalled, topic_lag, stuck, stuck_count, flagged, moves)

    def _balance(self, view: dict[str, Any]) -> Iterator[Any]:
        moves = GaugeMetricFamily(
            "strait_balance_moves", "Moves of the latest balancer execution by state.", labels=["cluster", "state"]
        )
        ratio = GaugeMetricFamily(
            "strait_balance_progress_ratio",
            "Finished fraction of the latest balancer execution.",
            labels=["cluster", "execution", "status"],
        )
        waiting = GaugeMetricFamily(
            "strait_balance_moves_waiting_for_room",
            "Pending moves of the latest execution held back until their destination disk has room.",
            labels=["cluster"],
        )
        for cluster, summary in sorted(dict(view.get("balance") or {}).items()):
            for state, count in summary["by_state"].items():
                moves.add_metric([cluster, state], count)
            ratio.add_metric([cluster, summary["execution"], summary["status"]], summary["progress"])
            waiting.add_metric([cluster], summary.get("waiting_for_room", 0))
        yield from (moves, ratio, waiting)


def _labels(partition: str) -> list[str]:
    key = PartitionKey.parse(partition)
    return [key.route, key.topic, str(key.partition)]
