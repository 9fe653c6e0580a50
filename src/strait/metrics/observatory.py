"""The controller's view of the whole replication fleet, refreshed every few seconds.

Every controller runs one (leader or standby, so any of them serves the dashboard). Each round
it reads a snapshot of the coordination store (workers, their published stats, the
assignment) and the checkpoints and end offsets of the source clusters, then:

- keeps the figures behind `/metrics`, `/observability` and the dashboard's charts;
- judges which partitions are stuck and which workers are slow or hung;
- on the leader only, decides healing moves (`strait.metrics.healing`), which the control loop
  applies through `steering()` on its next cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strait.coordination.model import ClusterSnapshot, PartitionKey
from strait.coordination.store import CoordinationStore, StoreUnavailable
from strait.metrics import figures, healing, progress
from strait.metrics.history import CounterRates, History
from strait.metrics.slow import Throughput, find_slow_workers

log = logging.getLogger(__name__)

OffsetReader = Callable[[list[PartitionKey]], Mapping[PartitionKey, tuple[int | None, int | None]]]
BalanceReader = Callable[[], Mapping[str, Mapping[str, Any]]]
BALANCE_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Steering:
    """What the control loop must respect when it assigns: see `strait.metrics.healing.steer`."""

    avoid: Mapping[PartitionKey, frozenset[str]] = field(default_factory=dict)
    hung: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ObservatorySettings:
    sample_interval_s: float = 2.0
    policy: healing.HealingPolicy = field(default_factory=healing.HealingPolicy)
    heal: bool = True
    slow_worker_ratio: float = 0.25
    # A live worker whose stats report has not changed for this long is hung (at least three
    # of its reporting periods, so one slow report is not enough).
    hung_after_s: float = 10.0
    # Each configured route's worker pools (None: any), to report routes no live worker may take.
    route_pools: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)


class Observatory:
    """Samples the fleet in its own thread; readers get immutable views."""

    def __init__(
        self,
        *,
        store: CoordinationStore,
        offsets: OffsetReader,
        controller_id: str,
        settings: ObservatorySettings = ObservatorySettings(),
        balance: BalanceReader | None = None,
        on_heal: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self.controller_id = controller_id
        self.on_heal = on_heal
        self._offsets = offsets
        self._balance_reader = balance
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._progress: dict[PartitionKey, progress.Progress] = {}
        self._healing: dict[PartitionKey, healing.Healing] = {}
        self._report_seen: dict[str, tuple[Any, float]] = {}  # worker -> (its "updated" value, when it changed)
        self._owners: Mapping[PartitionKey, str | None] = {}
        self._last_owner: dict[PartitionKey, str] = {}
        self._rates = CounterRates()
        self._history = History()
        self._balance: dict[str, Any] = {}
        self._view: dict[str, Any] = {"updated": None}
        self._hung: frozenset[str] = frozenset()
        self.counters: dict[str, float] = {"assignment_changes": 0, "healing_moves": 0, "healing_flags": 0}

    # --- lifecycle -----------------------------------------------------------------------
    def run(self) -> None:
        """Sample until `stop`; balancer executions are read in a thread of their own (reading
        the state topic takes seconds and must not delay the fleet's figures)."""
        if self._balance_reader is not None:
            threading.Thread(target=self._follow_balance, name="observatory-balance", daemon=True).start()
        while not self._stop.is_set():
            try:
                self.sample()
            except StoreUnavailable as exc:
                log.warning("observatory: coordination store unavailable: %s", exc)
            except Exception:
                log.exception("observatory: sampling failed")
            self._stop.wait(self.settings.sample_interval_s)

    def _follow_balance(self) -> None:
        assert self._balance_reader is not None
        while not self._stop.is_set():
            try:
                balance = dict(self._balance_reader())
            except Exception as exc:
                log.warning("observatory: cannot read balancer executions: %s", exc)
            else:
                with self._lock:
                    self._balance = balance
            self._stop.wait(BALANCE_INTERVAL_S)

    def stop(self) -> None:
        self._stop.set()

    # --- readers -------------------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        """The latest figures (JSON-ready)."""
        with self._lock:
            return self._view

    def charts(self) -> dict[str, dict[str, list[tuple[float, float]]]]:
        with self._lock:
            return self._history.charts()

    def steering(self) -> Steering:
        """For the control loop (leader): partitions' avoided workers and hung workers."""
        with self._lock:
            if not self.settings.heal:
                return Steering()
            return Steering(healing.avoided(self._healing, self._clock(), self.settings.policy), self._hung)

    # --- one round -----------------------------------------------------------------------
    def sample(self) -> None:
        snapshot = self.store.snapshot()
        leader = self.store.holds_leadership()
        now = self._clock()
        owners = dict(snapshot.assignment.owners)
        keys = sorted(snapshot.partitions())
        offsets = self._offsets(keys) if keys else {}
        observed = {
            key: progress.Observation(checkpoint, end, owners.get(key)) for key, (checkpoint, end) in offsets.items()
        }
        hung = self._find_hung(snapshot, now)
        with self._lock:
            self._progress = progress.advance(self._progress, observed, now)
            stuck = progress.stuck(self._progress, now, self.settings.policy.stuck_after_s)
            for key, worker in owners.items():
                if worker is not None:
                    # A move is a new owner; the unowned step of a hand-over in between is not one.
                    if self._last_owner.get(key, worker) != worker:
                        self.counters["assignment_changes"] += 1
                    self._last_owner[key] = worker
            self._owners = owners
            self._hung = hung
            decision = self._heal(snapshot, stuck, now) if leader and self.settings.heal else None
        if decision is not None and decision.moved and self.on_heal is not None:
            self.on_heal()
        view = self._build_view(snapshot, leader, now, observed, stuck, hung)
        with self._lock:
            self._record_history(view, now)
            self._view = view

    def _heal(
        self, snapshot: ClusterSnapshot, stuck: Mapping[PartitionKey, progress.Progress], now: float
    ) -> healing.Decision[PartitionKey]:
        workers = sorted(w.id for w in snapshot.live_workers().values() if w.assignable)
        stuck_on = {k: p.observation.owner for k, p in stuck.items() if p.observation.owner is not None}
        decision = healing.heal(self._healing, stuck_on, workers, now, self.settings.policy)
        self._healing = decision.records
        for key, worker in decision.moved.items():
            log.warning("partition %s is stuck on %s (lag %s): moving it", key, worker, stuck[key].observation.lag)
        for key, reason in decision.flagged.items():
            log.error("partition %s needs a person: %s", key, reason)
        self.counters["healing_moves"] += len(decision.moved)
        self.counters["healing_flags"] += len(decision.flagged)
        return decision

    def _find_hung(self, snapshot: ClusterSnapshot, now: float) -> frozenset[str]:
        hung: set[str] = set()
        for worker in snapshot.live_workers().values():
            updated = snapshot.stats.get(worker.id, {}).get("updated")
            seen = self._report_seen.get(worker.id)
            if seen is None or seen[0] != updated:
                self._report_seen[worker.id] = (updated, now)
            elif updated is not None and now - seen[1] >= self.settings.hung_after_s:
                hung.add(worker.id)
        for gone in set(self._report_seen) - set(snapshot.live_workers()):
            del self._report_seen[gone]
        return frozenset(hung)

    # --- figures -------------------------------------------------------------------------
    def _build_view(
        self,
        snapshot: ClusterSnapshot,
        leader: bool,
        now: float,
        observed: Mapping[PartitionKey, progress.Observation],
        stuck: Mapping[PartitionKey, progress.Progress],
        hung: frozenset[str],
    ) -> dict[str, Any]:
        owners = snapshot.assignment.owners
        workers = figures.workers(snapshot, hung)
        per_worker_bytes: dict[str, float] = {}
        per_route_bytes: dict[str, float] = {r: 0.0 for r, _ in snapshot.topics}
        for worker_id, report in snapshot.stats.items():
            at = float(report.get("updated") or 0)
            for name, entry in dict(report.get("partitions", {})).items():
                rate = self._rates.rate(f"{worker_id}|{name}", float(entry.get("bytes") or 0), at)
                if rate is None:
                    continue
                per_worker_bytes[worker_id] = per_worker_bytes.get(worker_id, 0.0) + rate
                route = name.split("/", 1)[0]
                per_route_bytes[route] = per_route_bytes.get(route, 0.0) + rate
        lag_by_topic: dict[str, int] = {}
        backlogged: dict[str, int] = {}
        partitions: list[dict[str, Any]] = []
        lag_seconds = figures.merged_partition_figure(snapshot, "lag_seconds")
        modes = figures.copy_modes(snapshot)
        for key, seen in sorted(observed.items()):
            topic = f"{key.route}/{key.topic}"
            lag_by_topic[topic] = lag_by_topic.get(topic, 0) + (seen.lag or 0)
            if seen.lag and seen.owner:
                backlogged[seen.owner] = backlogged.get(seen.owner, 0) + 1
            record = self._progress.get(key)
            partitions.append(
                {
                    "partition": str(key),
                    "worker": seen.owner,
                    "checkpoint": seen.checkpoint,
                    "end": seen.end,
                    "lag": seen.lag,
                    "lag_seconds": lag_seconds.get(str(key)),
                    "stalled_s": round(record.stalled_for(now), 1) if record else 0.0,
                    **modes.get(str(key), {}),
                }
            )
        throughput = {
            w["id"]: Throughput(per_worker_bytes.get(w["id"], 0.0), backlogged.get(w["id"], 0))
            for w in workers
            if w["live"]
        }
        slow = find_slow_workers(throughput, ratio=self.settings.slow_worker_ratio)
        routes = figures.routes(snapshot, per_route_bytes, self.settings.route_pools)
        for row in workers:
            row["bytes_per_s"] = round(per_worker_bytes.get(row["id"], 0.0), 1)
            row["slow"] = any(s.worker == row["id"] for s in slow)
        return {
            "updated": now,
            "controller": self.controller_id,
            "leader": leader,
            "leader_id": snapshot.leader.id if snapshot.leader else None,
            "workers": workers,
            "workers_by_state": figures.count(w["state"] for w in workers),
            "routes": routes,
            "pools": figures.pools(snapshot),
            "routes_without_workers": [r["name"] for r in routes if r["no_live_worker"]],
            "unassigned": sum(1 for k in snapshot.partitions() if owners.get(k) is None),
            "lag_by_topic": dict(sorted(lag_by_topic.items())),
            "latency": figures.latency(snapshot),
            "stages": figures.stages(snapshot),
            "partitions": partitions,
            "copy_modes": figures.count_copy_modes(modes),
            "stuck": self._stuck_rows(stuck, now),
            "slow_workers": [
                {
                    "worker": s.worker,
                    "bytes_per_s_per_partition": round(s.per_partition, 1),
                    "peers_median": round(s.peers_median, 1),
                }
                for s in slow
            ],
            "hung_workers": sorted(hung),
            "balance": self._balance,
            "counters": dict(self.counters),
            "settings": {
                "stuck_after_s": self.settings.policy.stuck_after_s,
                "max_moves": self.settings.policy.max_moves,
                "heal": self.settings.heal,
            },
        }

    def _stuck_rows(self, stuck: Mapping[PartitionKey, progress.Progress], now: float) -> list[dict[str, Any]]:
        rows = []
        for key in sorted(set(stuck) | set(self._healing)):
            record = self._healing.get(key, healing.Healing())
            seen = stuck.get(key)
            rows.append(
                {
                    "partition": str(key),
                    "stuck": seen is not None,
                    "worker": seen.observation.owner if seen else self._owners.get(key),
                    "lag": seen.observation.lag if seen else None,
                    "stalled_s": round(seen.stalled_for(now), 1) if seen else 0.0,
                    "moves": record.moves,
                    "avoid": sorted(record.avoid),
                    "flagged": record.flagged,
                }
            )
        return rows

    def _record_history(self, view: Mapping[str, Any], now: float) -> None:
        self._history.add("partitions_per_worker", now, {w["id"]: len(w["partitions"]) for w in view["workers"]})
        self._history.add("bytes_per_s", now, {r["name"]: r["bytes_per_s"] for r in view["routes"]})
        self._history.add("lag_by_topic", now, view["lag_by_topic"])
        latency: dict[str, float] = {}
        for route, quantiles in view["latency"].items():
            for q in ("p50", "p99"):
                if quantiles.get(f"{q}_s") is not None:
                    latency[f"{route} {q}"] = quantiles[f"{q}_s"]
        self._history.add("e2e_latency", now, latency)
