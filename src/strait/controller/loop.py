"""The controller's control loop: win leadership, then keep the assignment right.

Each cycle reads one snapshot of the store, decides with pure functions (topic discovery,
`assign`, `plan_handover`) and writes the assignment with a compare-and-set fenced by the
leader epoch. The loop wakes on store watches (a worker joins or dies, a topic is added or
removed, a drain is requested), on the metadata refresh interval, and quickly while a
hand-over waits for an old owner to let go.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strait.config import StraitConfig
from strait.controller.assignment import Placement, assign_pools
from strait.controller.discovery import MetadataUnavailable, SourceMetadata, plan_topic_updates
from strait.controller.fencer import Fencer, park_until_fenced
from strait.controller.handover import plan_handover
from strait.controller.invariants import pool_violations
from strait.controller.rates import RateTracker
from strait.controller.roster import gone_workers_to_forget
from strait.coordination.model import ClusterSnapshot, LeaderInfo, PartitionKey, SessionState, describe_keys
from strait.coordination.store import CoordinationStore, StoreUnavailable
from strait.metrics.healing import steer
from strait.metrics.observatory import Steering

log = logging.getLogger(__name__)

# How long after a controller starts that no worker at all is only noted (workers start beside it).
_FIRST_WORKER_GRACE_S = 30.0

# While a partition waits for its old owner to release it, look again this often.
_HANDOVER_POLL_S = 0.2
_STANDBY_POLL_S = 1.0
_FAILED_CYCLE_BACKOFF_S = 5.0


@dataclass(frozen=True)
class _Decided:
    """One cycle's inputs of the placement, and what came of them (see Controller._place)."""

    partitions: frozenset[PartitionKey]
    rates: Mapping[PartitionKey, float]
    pools: dict[str, str]
    current: dict[PartitionKey, str | None]
    placement: Placement[PartitionKey]
    problems: list[str]
    settled: bool  # every partition placed stayed with its current owner


class Controller:
    """One controller node: leader or standby, decided by the store."""

    def __init__(
        self,
        *,
        config: StraitConfig,
        store: CoordinationStore,
        metadata: SourceMetadata,
        identity: LeaderInfo,
        steering: Callable[[], Steering] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._clock = clock
        self._first_seen_gone: dict[str, float] = {}
        # Each route's pools (None: any); routes no longer configured may use any pool.
        self._route_pools = {r.name: frozenset(r.pools) if r.pools else None for r in config.routes}
        # The partitions of the last cycle that no live worker of their route's pools could take.
        self.stranded: dict[PartitionKey, frozenset[str]] = {}
        # What was last said about them: the routes, and whether it was the start-up note.
        self._stranded_said: tuple[tuple[str, ...], bool] = ((), False)
        self._started_at = clock()
        self._steering = steering
        self.store = store
        self.metadata = metadata
        self.identity = identity
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._next_refresh = 0.0
        self._targets: dict[PartitionKey, str] = {}
        self._last_writer: dict[PartitionKey, str] = {}  # who wrote each partition last (this leader)
        self._rates = RateTracker()
        self._decided: _Decided | None = None
        self.cycles = 0
        exactly_once = {r.name: config.clusters[r.destination] for r in config.routes if r.delivery == "exactly-once"}
        self.fencer = Fencer(exactly_once, self.wake) if exactly_once else None

    @property
    def leading(self) -> bool:
        return self.store.holds_leadership()

    def wake(self) -> None:
        """Run a cycle now (something changed)."""
        self._wake.set()

    def refresh_soon(self) -> None:
        """Re-read source metadata on the next cycle (e.g. a topic was just added)."""
        self._next_refresh = 0.0
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def run(self) -> None:
        """Loop until `stop`; leadership is released on the way out."""
        self.store.on_session_change(self._on_session)
        self.store.watch_cluster(self.wake)
        try:
            while not self._stop.is_set():
                timeout = self._step()
                self._wake.wait(timeout)
                self._wake.clear()
        finally:
            # If the store is unreachable, the session ends with the process and the node with it.
            with contextlib.suppress(StoreUnavailable):
                self.store.release_leadership()

    def _on_session(self, state: SessionState) -> None:
        if state is not SessionState.CONNECTED:
            log.warning("coordination session %s: leader work stops until it is trusted again", state.value)
        self.wake()

    def _step(self) -> float:
        """One pass of the loop; returns how long to sleep unless woken."""
        try:
            if not self.store.holds_leadership():
                self._targets.clear()
                if not self.store.attempt_to_acquire_leadership(self.identity):
                    return _STANDBY_POLL_S
                log.info("controller %s is now the leader", self.identity.id)
                self._next_refresh = 0.0
            pending = self.cycle()
        except StoreUnavailable as exc:
            log.warning("coordination store unavailable, not acting as leader: %s", exc)
            return _STANDBY_POLL_S
        except Exception:
            # A leader that cannot finish its cycles must not keep the seat: a standby may do
            # better. Release, back off, and compete again.
            log.exception("control cycle failed; giving up leadership")
            with contextlib.suppress(StoreUnavailable):
                self.store.release_leadership()
            return _FAILED_CYCLE_BACKOFF_S
        if pending:
            return _HANDOVER_POLL_S
        return max(0.05, min(self._next_refresh - time.monotonic(), self.config.controller.refresh_interval_s))

    def cycle(self) -> bool:
        """Bring the written assignment in line with the cluster; True if a hand-over is pending."""
        snapshot = self.store.snapshot()
        self.cycles += 1
        # Decide on what is known first: a dead worker's partitions, or a topic just added
        # through the API, must not wait for the source listing below (a Kafka round trip).
        pending = self._reassign(snapshot)
        if time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self.config.controller.refresh_interval_s
            if self._refresh_topics(snapshot):
                snapshot = self.store.snapshot()
                pending = self._reassign(snapshot)
        self._forget_gone_workers(snapshot)
        return pending

    def pools_of(self, key: PartitionKey) -> frozenset[str] | None:
        return self._route_pools.get(key.route)

    def _forget_gone_workers(self, snapshot: ClusterSnapshot) -> None:
        owning = {w for w in snapshot.assignment.owners.values() if w is not None}
        forget, self._first_seen_gone = gone_workers_to_forget(
            snapshot.workers,
            self._first_seen_gone,
            owning,
            self._clock(),
            self.config.controller.forget_left_workers_s,
        )
        for worker_id in forget:
            log.info("forgetting worker %s (%s)", worker_id, snapshot.workers[worker_id].state.value)
            self.store.forget_worker(worker_id)

    def _refresh_topics(self, snapshot: ClusterSnapshot) -> bool:
        """Pick up pattern-matched topics and grown partition counts; True if anything changed."""
        changed = False
        listings: dict[str, dict[str, int]] = {}
        for route in self.config.routes:
            try:
                if route.source not in listings:
                    listings[route.source] = self.metadata.topics(route.source)
            except MetadataUnavailable as exc:
                log.warning("%s", exc)
                continue
            for spec in plan_topic_updates(
                route, listings[route.source], snapshot.topics, snapshot.removed, self.config.routes
            ):
                existing = snapshot.topics.get((spec.route, spec.topic))
                if existing is None:
                    if self.store.create_topic(spec) is None:
                        log.info("route %s: topic %s matched a pattern, added", spec.route, spec.topic)
                        changed = True
                else:
                    log.info(
                        "route %s: topic %s grew from %d to %d partitions",
                        spec.route,
                        spec.topic,
                        existing.partitions,
                        spec.partitions,
                    )
                    self.store.update_topic(spec)
                    changed = True
        return changed

    def _reassign(self, snapshot: ClusterSnapshot) -> bool:
        partitions = snapshot.partitions()
        self._rates.observe(snapshot.stats)
        live = snapshot.live_workers()
        pools = {w.id: w.pool for w in live.values() if w.assignable}
        assignable = sorted(pools)
        holding = {w.id: w.holding for w in live.values()}
        holder = {key: worker for worker, keys in holding.items() for key in keys}
        written = snapshot.assignment.owners
        current: dict[PartitionKey, str | None] = {}
        for key in partitions:
            # Where a partition is, or is on its way to: what was written, else the target of a
            # hand-over in progress, else whoever still holds it.
            current[key] = written.get(key) or self._targets.get(key) or holder.get(key)
        placement, problems = self._place(partitions, self._rates.rates(partitions), pools, current)
        desired = placement.owners
        self._report_stranded(placement.stranded, len(live))
        if problems:
            log.error("assignment invariants violated (writing anyway): %s", "; ".join(problems))
        handover_from = written
        if self._steering is not None:
            # Healing: stuck partitions leave the worker they are stuck on, hung workers get
            # nothing new (see strait.metrics.healing).
            steering = self._steering()
            exactly_once = self.fencer.routes if self.fencer is not None else frozenset()
            if steering.avoid or steering.hung:
                desired, handover_from, holding = steer(
                    desired,
                    written,
                    holding,
                    steering.avoid,
                    assignable,
                    steering.hung,
                    allowed=lambda key, worker: (p := self.pools_of(key)) is None or pools[worker] in p,
                    clean=(lambda key: key.route in exactly_once) if exactly_once else None,
                )
        plan = plan_handover(desired, handover_from, holding)
        parked = 0
        # Who wrote each partition last, as far as this leader knows: a partition written as
        # unowned during a hand-over no longer says (see park_until_fenced).
        for key, owner in written.items():
            if owner is not None:
                self._last_writer[key] = owner
        for key, owner in holder.items():
            self._last_writer.setdefault(key, owner)
        if self.fencer is not None:
            self.fencer.forget(live)
            steered = {key for keys in holding.values() for key in keys}
            plan, parked = park_until_fenced(
                plan,
                written,
                handover_from,
                set(live),
                self.fencer,
                releasing={k: self._last_writer[k] for k in plan if written.get(k) is None and k in self._last_writer},
                untrusted_holders={k: w for k, w in holder.items() if k not in steered},
                unknown_last_writers=[w for w, record in snapshot.workers.items() if not record.live],
            )
        self._targets = dict(desired)
        if dict(plan) != dict(written):
            if self.store.write_assignment(plan, snapshot.assignment.version):
                if self.fencer is not None:
                    for key, owner in plan.items():
                        if owner is not None and written.get(key) != owner:
                            self.fencer.handed(owner, key.route)
                moved = sum(1 for k, w in plan.items() if written.get(k) != w)
                started = [k for k, w in plan.items() if w is not None and written.get(k) is None]
                log.info(
                    "assignment written: %d partitions on %d workers, %d changed%s",
                    len(plan),
                    len(assignable),
                    moved + sum(1 for k in written if k not in plan),
                    f"; owned now: {describe_keys(started)}" if started else "",
                )
            else:
                self.wake()  # lost a race: decide again from a fresh snapshot
        return parked > 0 or any(owner is None for owner in plan.values())

    def _place(
        self,
        partitions: set[PartitionKey],
        rates: Mapping[PartitionKey, float],
        pools: dict[str, str],
        current: dict[PartitionKey, str | None],
    ) -> tuple[Placement[PartitionKey], list[str]]:
        """The placement (`assign_pools`) and its invariants' problems: pure functions of these
        inputs (and of the routes' pools, fixed), so the last cycle's answer when they are the
        same. At 100,000 partitions the two are most of a cycle, and cycles repeat every 0.2 s
        while a hand-over is pending. Rates only choose which partitions move or are placed:
        when the last answer kept every partition where it was, other rates give it again.
        The answer is only read, never modified."""
        last = self._decided
        if (
            last is not None
            and (last.rates is rates or last.settled)
            and last.pools == pools
            and last.partitions == partitions
            and last.current == current
        ):
            return last.placement, last.problems
        placement = assign_pools(rates, pools, current, self.pools_of)
        problems = pool_violations(partitions, pools, current, placement.owners, self.pools_of)
        settled = all(current.get(key) == owner for key, owner in placement.owners.items())
        self._decided = _Decided(frozenset(partitions), rates, pools, current, placement, problems, settled)
        return placement, problems

    def _report_stranded(self, stranded: dict[PartitionKey, frozenset[str]], live: int) -> None:
        routes = tuple(sorted({k.route for k in stranded}))
        # Right after a start, before any worker has registered, waiting is expected: a note, not
        # a warning. It becomes one once workers exist (their pools do not fit) or the grace ends.
        starting = live == 0 and self._clock() - self._started_at < _FIRST_WORKER_GRACE_S
        if (routes, starting) != self._stranded_said:
            for route in routes:
                pools = ", ".join(sorted(self._route_pools.get(route) or ())) or "any"
                count = sum(1 for k in stranded if k.route == route)
                if starting:
                    log.info("route %s: %d partitions wait for the first worker to register", route, count)
                else:
                    log.warning("route %s: no live worker in its pools (%s): %d partitions wait", route, pools, count)
        self._stranded_said = (routes, starting)
        self.stranded = stranded
