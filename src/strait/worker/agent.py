"""The worker agent: registers the worker, follows its assignment, drives the copiers.

No consumer group and no rebalance: the controller decides, the agent is told through a
watch, and each route's copier adds or removes partitions in place.

Hand-over protocol (see `strait.controller.handover`): the agent publishes the partitions it
*holds*. It announces a partition before it starts copying it, and withdraws it only after the
copier has revoked it (in-flight records acknowledged or failed, checkpoint committed; a
stalled destination keeps the partition held, however long). The controller gives a partition
to a new owner only when no live worker holds it, so between live workers a hand-over neither
loses nor duplicates a record.

Two writers are still possible for a worker the controller gave up on: its session ended
(frozen process, network cut) while it had records in flight. Such a worker stops fetching on
its own once it has been cut off from the coordination store for a third of the session timeout, before the
session can expire, and commits no checkpoint afterwards; records already in flight may still
land (duplicates for the next owner, never loss). Exactly-once routes fence it outright.

Lifecycle: joining (registered) -> active (first assignment applied) -> draining (SIGTERM or
`POST /workers/{id}/drain`: the controller moves every partition away) -> left (deregistered).
A worker whose session ends without leaving is shown as dead.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Any, Literal, Protocol

from strait.config import RouteConfig, StraitConfig
from strait.coordination.model import (
    Assignment,
    PartitionKey,
    SessionState,
    WorkerRecord,
    WorkerState,
    describe_keys,
)
from strait.coordination.retry import RetryExhausted, RetryPolicy
from strait.coordination.stats import for_zookeeper as stats_for_zookeeper
from strait.coordination.store import CoordinationStore, StoreUnavailable, WorkerIdTaken
from strait.metrics.worker import WorkerMetrics
from strait.worker.destination import for_route as destination_topics
from strait.worker.lease import Lease, LeaseKeeper, always
from strait.worker.origin import OriginRule
from strait.worker.pipeline import PipelineSettings
from strait.worker.task import PartitionTask
from strait.worker.watchdog import Bounds, FreshEnds, PartitionSample, Watchdog

log = logging.getLogger(__name__)

# The lease stays valid for this fraction of the coordination session timeout after the agent last
# read the assignment (see strait.worker.lease).
LEASE_FRACTION = 0.8


def checkpoint_group(route: str) -> str:
    """The source-cluster consumer group holding a route's checkpoints."""
    return f"strait-{route}"


class RouteCopier(Protocol):
    """What the agent needs of a copier (one per route); `strait.worker.copier.Copier` is one."""

    def start(self) -> None: ...
    def assign(self, tasks: Iterable[PartitionTask]) -> None: ...
    def revoke(self, tasks: Iterable[PartitionTask], timeout_s: float = 30) -> set[PartitionTask]: ...
    def abandon(self) -> None: ...
    def fenced(self) -> set[PartitionTask]: ...
    def crashed(self) -> str | None: ...
    def assigned(self) -> set[PartitionTask]: ...
    def stats(self) -> Mapping[Any, Any]: ...
    def stop(self, drain: bool = True, timeout_s: float = 30) -> None: ...


CopierFactory = Callable[[RouteConfig], RouteCopier]

# The reason a partition of a route that chose `copy: record` gives (`strait status` leaves such
# routes out of its copy mode table: nothing fell back there).
ROUTE_OPTION_RECORD = "route option copy: record"


def copy_mode(route: RouteConfig) -> tuple[Literal["record", "batch"], str]:
    """How a route's partitions are copied, and why record by record when they are.

    Batch (the default) where the route allows it; the batch pipeline may still hand single
    partitions to record mode (strait.worker.batch.compat). A route that asks for record mode
    gets it. Exactly-once routes copy whole batches inside transactions (their batch pipelines
    are transactional, and write the offset map's runs into them). Active-active routes copy
    whole batches too: the batch pipeline tells copies by their producer ids
    (strait.worker.batch.provenance), no header needed.
    """
    if route.copy_mode == "record":
        return "record", ROUTE_OPTION_RECORD
    if route.active_active and route.delivery == "exactly-once":
        # (The transactional batch copy publishes no producer ids for the opposite route.)
        return "record", "active-active exactly-once route (each copy carries the strait.origin header)"
    return "batch", ""


def copier_factory(
    config: StraitConfig, worker_id: str, metrics: WorkerMetrics | None = None, lease: Lease | None = None
) -> CopierFactory:
    """Build the data-path copier of a route from the configuration (observed by `metrics`;
    claiming ownership only while `lease` is valid)."""
    valid = always if lease is None else lease.valid

    def make(route: RouteConfig) -> RouteCopier:
        from strait.worker.copier import Copier

        source, destination = config.clusters[route.source], config.clusters[route.destination]
        copy, copy_reason = copy_mode(route)
        extra: dict[str, Any] = {}
        if route.delivery == "exactly-once":
            from strait.worker.exactly_once import exactly_once_parts

            # Its batch pipelines (transactional) come from there, in this process.
            extra = exactly_once_parts(
                route,
                source=source,
                destination=destination,
                worker_id=worker_id,
                lease=valid,
                batches=copy == "batch",
            )
        if route.offset_map and route.delivery != "exactly-once":
            # (An exactly-once route's pipelines write the map inside their transactions.)
            from strait.offsetmap.store import MapWriter

            extra["offset_map"] = MapWriter(
                destination,
                route.name,
                client_id=f"strait-{route.name}-{worker_id}",
                cost=None if metrics is None else metrics.route(route.name).offset_map,
            )
        if copy == "batch" and route.delivery != "exactly-once":
            from strait.worker.batch.pipeline import BatchPipeline
            from strait.worker.batch.remote import BacklogProcess

            lanes = config.worker.batch_produce_lanes
            extra["batch_factory"] = partial(BatchPipeline, lanes=lanes)
            # The backlog's process, paced next to realtime partitions (strait.worker.batch.budget).
            extra["backlog_factory"] = partial(BacklogProcess, sharing=config.worker.batch_sharing, lanes=lanes)
        copier = Copier(
            route=route.name,
            source=source,
            destination=destination,
            group_id=checkpoint_group(route.name),
            worker_id=worker_id,
            replication_factor=route.replication_factor,
            commit_interval_s=config.worker.commit_interval_s,
            commit_after_records=config.worker.commit_after_records,
            observer=None if metrics is None else metrics.route(route.name),
            lease=valid,
            origin=OriginRule(route.source, route.destination) if route.active_active else None,
            copy=copy,
            copy_reason=copy_reason,
            catchup_lag_threshold=route.catchup_lag_threshold,
            realtime_copy=route.realtime_copy,
            # Destination topics are created without the settings the route keeps apart.
            destinations=destination_topics(source, destination, route),
            **extra,
        )
        if metrics is not None:
            metrics.track(route.name, copier)
        return copier

    return make


class WorkerAgent:
    """One worker process's link between the store and its copiers."""

    def __init__(
        self,
        *,
        config: StraitConfig,
        worker_id: str,
        store: CoordinationStore,
        make_copier: CopierFactory,
        metrics: WorkerMetrics | None = None,
        lease: Lease | None = None,
        exit: Callable[[str], None] | None = None,
        watchdog: Bounds | None = None,
    ) -> None:
        """``exit``: how the watchdog ends this worker when a loop or a partition stays stuck
        (the worker process exits at once; by default the agent's loop raises). ``watchdog``:
        its bounds (default: derived from the timeouts in force)."""
        self.config = config
        self.id = worker_id
        self.store = store
        self._make_copier = make_copier
        self._lease = lease or Lease(config.coordination.session_timeout_s * LEASE_FRACTION)
        self._metrics = metrics
        self._keeper = LeaseKeeper(self._lease, self._proves_session, self._lease.valid_for_s / 4)
        self._restarts: set[PartitionKey] = set()  # asked by the watchdog (its thread)
        self._restarts_lock = threading.Lock()
        self._exit_reason: str | None = None
        self._exit = exit
        # Each route's source properties, for the watchdog; a reload adds the routes it adds.
        self._route_sources: dict[str, Mapping[str, Any]] = {r.name: config.clusters[r.source] for r in config.routes}
        self._watchdog = Watchdog(
            watchdog or Bounds.derived(delivery_timeout_s=PipelineSettings().delivery_timeout_ms / 1000),
            partitions=self._watch_samples,
            fresh_ends=FreshEnds(self._route_sources),
            restart=self._request_restart,
            exit=self._watchdog_exit,
        )
        if metrics is not None:
            metrics.watchdog_actions = lambda: dict(self._watchdog.actions)
        self._copiers: dict[str, RouteCopier] = {}
        # Copiers of routes a reload removed or changed, until their revokes finished.
        self._retiring: dict[str, RouteCopier] = {}
        self._starting: set[str] = set()  # routes whose copier starts once the old one stopped
        self._reload: RouteReload | None = None  # handed over by the reloader's thread
        self._reload_lock = threading.Lock()
        self._tasks: dict[PartitionKey, PartitionTask] = {}  # what this worker holds
        self._state = WorkerState.JOINING
        self._wake = threading.Event()
        self._drain = threading.Event()
        self._session_lost = False
        self._suspended_since: float | None = None
        self._cut_off = False  # stopped copying because coordination was unreachable too long
        self._published: set[PartitionKey] | None = None
        self._drain_deadline = float("inf")
        self._next_stats = 0.0
        self.last_report: dict[str, Any] = {}

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def drain_requested(self) -> bool:
        return self._drain.is_set()

    def request_drain(self) -> None:
        """Hand every partition over and leave (SIGTERM lands here). Safe from signal handlers."""
        self._drain.set()
        self._wake.set()

    def reconfigure(
        self, config: StraitConfig, *, added: Iterable[str], removed: Iterable[str], changed: Iterable[str]
    ) -> None:
        """Run ``config``'s routes from the next step on (the reloader's thread lands here).

        A removed route's copier revokes its partitions (final checkpoints) and stops; a changed
        route's copier does the same, then a new one starts and takes the partitions still
        assigned here from their checkpoints; an added route's copier starts.
        """
        with self._reload_lock:
            pending = self._reload or RouteReload(config)
            self._reload = RouteReload(
                config,
                pending.added | set(added),
                pending.removed | set(removed),
                pending.changed | set(changed),
            )
        self._wake.set()

    def run(self) -> None:
        """Register, copy what is assigned until drained, then leave."""
        self._announce()
        self.store.on_session_change(self._on_session)
        self.store.watch_worker_assignment(self.id, self._on_assignment)  # only this worker's node
        self.store.watch_drain(self.id, self._on_drain_node)
        self._keeper.start()
        self._watchdog.start()
        for route in self.config.routes:
            copier = self._make_copier(route)
            copier.start()
            self._copiers[route.name] = copier
        try:
            while self._state is not WorkerState.LEFT:
                self._wake.wait(self._timeout())
                self._wake.clear()
                try:
                    self._step()
                except StoreUnavailable as exc:
                    # Keep copying what we hold: the controller moves it only if our session
                    # ends, and then `_on_session` stops us.
                    log.warning("coordination store unavailable: %s", exc)
                    time.sleep(0.5)
                except Exception:
                    # Checkpoints cover only acknowledged records, so stopping is safe; the
                    # session ends with the process and the controller moves our partitions.
                    log.exception("worker %s failed; stopping", self.id)
                    raise
        finally:
            self._shutdown()

    # --- events (kazoo threads: set flags only) ------------------------------------------
    def _on_assignment(self, _assignment: Assignment) -> None:
        self._wake.set()

    def _on_drain_node(self, present: bool) -> None:
        if present:
            self._drain.set()
        self._wake.set()

    def _on_session(self, state: SessionState) -> None:
        if state is not SessionState.CONNECTED:
            self._lease.revoke()
        if state is SessionState.LOST:
            # Our registration is gone and the controller is giving our partitions away.
            self._session_lost = True
        if state is SessionState.SUSPENDED:
            if self._suspended_since is None:
                self._suspended_since = time.monotonic()
        else:
            self._suspended_since = None
        self._wake.set()

    # --- the watchdog's thread (strait.worker.watchdog) -------------------------------------
    def _watch_samples(self) -> dict[PartitionTask, PartitionSample]:
        samples = {}
        for copier in list(self._copiers.values()):
            for task, entry in copier.stats().items():
                stats = normalise_stats(entry)
                samples[task] = PartitionSample(stats.get("checkpoint"), stats.get("state") in ("ok", "moving"))
        return samples

    def _request_restart(self, tasks: set[PartitionTask]) -> None:
        with self._restarts_lock:
            self._restarts |= {PartitionKey(t.route, t.topic, t.partition) for t in tasks}
        self._wake.set()

    def _watchdog_exit(self, reason: str) -> None:
        self._exit_reason = reason
        self._wake.set()
        if self._exit is not None:
            self._exit(reason)

    # --- the lease keeper's thread ---------------------------------------------------------
    def _proves_session(self) -> bool:
        """A read of this worker's assignment through a session that is, before and after it,
        connected and not cut off: the partitions assigned here are still ours."""

        def healthy() -> bool:
            return (
                not self._session_lost
                and not self._cut_off
                and self._suspended_since is None
                and self.store.session_state() is SessionState.CONNECTED
            )

        if not healthy():
            return False
        self.store.read_worker_assignment(self.id)
        return healthy()

    # --- the loop ------------------------------------------------------------------------
    def _timeout(self) -> float:
        if self._state is WorkerState.DRAINING or self._suspended_since is not None:
            return 0.2
        if self._published is not None and not self._session_lost and self._held() != self._published:
            return 0.05  # revokes in progress: publish each one soon after it finished
        # Confirm the lease well within its validity, also when nothing happens.
        idle = min(self.config.worker.stats_interval_s, self._lease.valid_for_s / 3)
        return max(0.05, min(self._next_stats - time.monotonic(), idle))

    def _step(self) -> None:
        if self._exit_reason is not None:
            raise RuntimeError(f"the watchdog stops the worker: {self._exit_reason}")
        for route, copier in self._copiers.items():
            pipeline = copier.crashed()
            if pipeline is not None:
                # Nothing revives a dead loop, and the controller would keep assigning partitions
                # to it while this worker looks alive (a CI run: a partition started there copied
                # nothing for minutes). Stop the worker: its session ends and its partitions
                # resume elsewhere from their checkpoints, which cover acknowledged records only.
                raise RuntimeError(f"route {route}: pipeline {pipeline} crashed (see above); the worker stops")
        if self._session_lost:
            self._recover_session()
            return
        if self._suspended_since is not None:
            self._check_cut_off(time.monotonic() - self._suspended_since)
            return
        if self._cut_off:
            # The same session came back: copy again, from the committed checkpoints.
            log.info("coordination store reachable again; resuming from the committed checkpoints")
            self._cut_off = False
        if self._drain.is_set() and self._state is not WorkerState.DRAINING:
            self._begin_drain()
        if self._state is WorkerState.DRAINING and time.monotonic() > self._drain_deadline:
            # No controller moved our partitions in time (none running, or the store is
            # down): commit what was acknowledged and leave; the next owner resumes from there.
            log.warning("drain timed out; releasing %d partitions without a new owner", len(self._tasks))
            tasks = dict(self._tasks)
            for route, batch in _by_route(tasks).items():
                self._copiers[route].revoke(batch, timeout_s=self.config.worker.revoke_timeout_s)
            self._tasks.clear()
            self._leave()
            return
        self._reconfigure_routes()
        since = self._lease.revocations()
        assignment = self.store.read_worker_assignment(self.id)
        self._lease.confirm(since)  # read through a live session just now
        self._restart_fenced(assignment)
        self._restart_stalled()
        self._apply(assignment)
        if self._state is WorkerState.JOINING:
            self._set_state(WorkerState.ACTIVE)
        if self._state is WorkerState.DRAINING and not self._held() and not assignment.of_worker(self.id):
            # Not before every revoke finished: leaving ends the registration, and with it the
            # holding that keeps a new owner from starting before our last checkpoint.
            self._leave()
            return
        held = self._held()
        if held != self._published:
            # A revoke has finished: let the partition go.
            self._publish_holding(held)
        if time.monotonic() >= self._next_stats:
            self._publish_stats()

    def _reconfigure_routes(self) -> None:
        """Apply a reload's route changes (see `reconfigure`), one step at a time: revokes run in
        the copiers' threads, and a retired copier stops once they finished."""
        with self._reload_lock:
            pending, self._reload = self._reload, None
        if pending is not None:
            self.config = pending.config
            self._route_sources.update({r.name: pending.config.clusters[r.source] for r in pending.config.routes})
            for name in sorted(pending.removed | pending.changed):
                if name in self._copiers:
                    self._release({key for key in self._tasks if key.route == name})
                    self._retiring[name] = self._copiers.pop(name)
                    log.info("route %s: revoking its partitions before its copier stops", name)
            self._starting |= pending.added | pending.changed
        for name, copier in list(self._retiring.items()):
            if not copier.assigned():
                copier.stop(drain=True, timeout_s=self.config.worker.revoke_timeout_s)
                del self._retiring[name]
                log.info("route %s: copier stopped", name)
        routes = {route.name: route for route in self.config.routes}
        for name in sorted(self._starting - set(self._retiring)):
            self._starting.discard(name)
            route = routes.get(name)
            if route is None or name in self._copiers:
                continue
            copier = self._make_copier(route)
            copier.start()
            self._copiers[name] = copier
            log.info("route %s: copier started", name)

    def _restart_fenced(self, assignment: Assignment) -> None:
        """Take back partitions whose exactly-once producer was fenced while still ours.

        A producer is fenced when the leader gave up on this worker (then the assignment, read
        just now through a live session, no longer lists the partition and it is simply
        released), or when the destination ended a transaction that stayed open too long.
        Partitions still assigned here are released and started again: a new producer epoch,
        from the last committed checkpoint.
        """
        fenced: set[PartitionTask] = set()
        for copier in self._copiers.values():
            fenced |= copier.fenced()
        if not fenced:
            return
        mine = assignment.of_worker(self.id)
        keys = {PartitionKey(t.route, t.topic, t.partition) for t in fenced}
        log.warning(
            "%d partition(s) stopped by a fenced producer; %d still assigned here restart from their checkpoints",
            len(keys),
            len(keys & mine),
        )
        self._release(keys)  # `_apply` then starts those still assigned afresh

    def _restart_stalled(self) -> None:
        """Release the partitions the watchdog found stalled; `_apply` then starts those still
        assigned here afresh, from their checkpoints."""
        with self._restarts_lock:
            keys, self._restarts = self._restarts & set(self._tasks), set()
        if keys:
            log.warning("restarting %d stalled partition(s) from their checkpoints: %s", len(keys), describe_keys(keys))
            self._release(keys)

    def _check_cut_off(self, suspended_s: float) -> None:
        # kazoo reports SUSPENDED after about two thirds of the session timeout without an
        # answer; stopping a third later leaves no moment where the server may have expired
        # the session (and the controller moved our partitions) while we still fetch.
        if self._cut_off or suspended_s < self.config.coordination.session_timeout_s / 3:
            return
        log.warning(
            "cut off from the coordination store for %.1fs: stopping all %d partitions without further checkpoints",
            suspended_s,
            len(self._tasks),
        )
        self._lease.revoke()
        for copier in self._copiers.values():
            copier.abandon()
        self._tasks.clear()
        self._cut_off = True

    def _begin_drain(self) -> None:
        log.info("worker %s draining", self.id)
        self._drain_deadline = time.monotonic() + self.config.worker.drain_timeout_s
        self._set_state(WorkerState.DRAINING)
        # The drain node wakes the controller at once (it watches drain requests).
        self.store.request_drain(self.id)

    def _apply(self, assignment: Assignment) -> None:
        mine = assignment.of_worker(self.id)
        gone = set(self._tasks) - mine
        if gone:
            self._release(gone)
        new = mine - set(self._tasks)
        if not new:
            return
        tasks = self._tasks_for(new)
        # Announce before starting, then make sure the assignment did not move meanwhile:
        # the controller only hands a partition on once nobody announces holding it.
        self._publish_holding(set(self._tasks) | set(tasks))
        latest = self.store.read_worker_assignment(self.id)
        if latest.version != assignment.version:
            still_mine = latest.of_worker(self.id)
            tasks = {k: t for k, t in tasks.items() if k in still_mine}
        for route, batch in _by_route(tasks).items():
            self._copiers[route].assign(batch)
        self._tasks.update(tasks)
        self._publish_holding(self._held())
        log.info("started %d partitions (now %d): %s", len(tasks), len(self._tasks), describe_keys(tasks))

    def _release(self, keys: set[PartitionKey]) -> None:
        """Start revoking ``keys`` and return at once: a partition stays announced as held
        (see `_held`) until its copier finished the revoke, and each step publishes what is
        still held. Waiting here would stall everything else the agent does, the lease among
        them, for as long as a destination takes to answer."""
        tasks = {k: self._tasks[k] for k in keys if k in self._tasks}
        still: set[PartitionTask] = set()
        for route, batch in _by_route(tasks).items():
            still |= self._copiers[route].revoke(batch, timeout_s=0)
        for key in keys:
            self._tasks.pop(key, None)
        if not self._session_lost:
            self._publish_holding(self._held())
        log.info(
            "releasing %d partitions (now %d, %d still being handed over)", len(tasks), len(self._tasks), len(still)
        )

    def _held(self) -> set[PartitionKey]:
        """What this worker may still write to: its tasks, and partitions still being revoked."""
        held = set(self._tasks)
        for copier in [*self._copiers.values(), *self._retiring.values()]:
            held |= {PartitionKey(t.route, t.topic, t.partition) for t in copier.assigned()}
        return held

    def _tasks_for(self, keys: AbstractSet[PartitionKey]) -> dict[PartitionKey, PartitionTask]:
        # Read the specs afresh (a topic removed and added again may have new settings), only
        # those of the topics assigned just now: not every topic of every route for each pick-up.
        specs = self.store.topic_specs({(k.route, k.topic) for k in keys})
        tasks = {}
        for key in keys:
            spec = specs.get((key.route, key.topic))
            if key.route in self._retiring or key.route in self._starting:
                continue  # its copier is being replaced: taken once the new one runs
            if spec is None or key.route not in self._copiers:
                log.warning("assigned %s but its topic or route is unknown here; skipping", key)
                continue
            tasks[key] = PartitionTask(
                route=key.route,
                topic=key.topic,
                partition=key.partition,
                destination_topic=spec.destination_topic,
                start=spec.start_of(key.partition),
            )
        return tasks

    def _recover_session(self) -> None:
        if self._tasks:
            log.warning(
                "coordination session lost: stopping all %d partitions, then registering again", len(self._tasks)
            )
            self._release(set(self._tasks))
        if self.store.session_state() is not SessionState.CONNECTED:
            return
        self._session_lost = False  # before registering: a loss reported meanwhile sets it again
        try:
            self._register()
        except (RetryExhausted, StoreUnavailable) as exc:
            # The store is back but not yet answering (a coordinating broker being replaced on a
            # loaded host): keep trying rather than exit, as a worker starting up waits for it.
            log.warning("registering again failed (%s); trying again", exc)
            self._session_lost = True
            return
        if self._state is WorkerState.DRAINING:
            self.store.request_drain(self.id)

    # --- registration and reports ------------------------------------------------------
    def _record(self, holding: set[PartitionKey] | None = None) -> WorkerRecord:
        # Every record names what this worker may still write to, partitions still being
        # handed over included: the controller gives a partition to its next owner once no
        # worker reports holding it.
        if holding is None:
            holding = self._held()
        return WorkerRecord(
            id=self.id,
            state=self._state,
            host=socket.gethostname(),
            pid=os.getpid(),
            holding=frozenset(holding),
            pool=self.config.worker.pool,
        )

    def _announce(self) -> None:
        """Clear a drain request addressed to a previous incarnation, then register. A store
        that does not answer (a worker started during a coordinator outage) is asked again for
        as long as it takes, until a drain is requested: exiting would only have the service
        manager start it again into the same outage. A worker id held by another live process
        still ends the start after the registration's deadline."""
        while True:
            try:
                self._startup_retry(StoreUnavailable).call(lambda: self.store.clear_drain_request(self.id))
                self._register()
                return
            except RetryExhausted as exc:
                if not isinstance(exc.__cause__, StoreUnavailable) or self._drain.is_set():
                    raise
                log.warning("coordination store not answering (%s); still trying to register", exc.__cause__)

    def _startup_retry(self, *retry_on: type[Exception]) -> RetryPolicy:
        """Retries of a starting worker's store calls, until twice the session timeout and 10 s
        (a previous incarnation killed with -9 holds the id until its session expires)."""
        return RetryPolicy(
            max_tries=1000,
            delay_s=0.5,
            max_delay_s=1.0,
            deadline_s=self.config.coordination.session_timeout_s * 2 + 10,
            retry_on=lambda exc: isinstance(exc, retry_on),
        )

    def _register(self) -> None:
        record = self._record()
        self._startup_retry(WorkerIdTaken, StoreUnavailable).call(lambda: self.store.register_worker(record))
        self._published = set(record.holding)
        log.info("worker %s registered (%s)", self.id, self._state.value)

    def _set_state(self, state: WorkerState) -> None:
        self._state = state
        record = self._record()
        self.store.update_worker(record)
        self._published = set(record.holding)
        log.info("worker %s is %s", self.id, state.value)

    def _leave(self) -> None:
        self._state = WorkerState.LEFT
        try:
            self.store.deregister_worker(self._record())
        except StoreUnavailable as exc:
            log.warning("could not deregister (%s); the registration ends with the session", exc)
        log.info("worker %s is %s", self.id, self._state.value)

    def _publish_holding(self, holding: set[PartitionKey]) -> None:
        self.store.update_worker(self._record(holding))
        self._published = holding

    def _publish_stats(self) -> None:
        self._next_stats = time.monotonic() + self.config.worker.stats_interval_s
        partitions: dict[str, dict[str, Any]] = {}
        for copier in self._copiers.values():
            for task, entry in copier.stats().items():
                partitions[str(task)] = normalise_stats(entry)
        report: dict[str, Any] = {
            "updated": time.time(),
            "state": self._state.value,
            "partitions": partitions,
            "watchdog": {f"{cause}/{action}": n for (cause, action), n in sorted(self._watchdog.actions.items())},
        }
        if self._metrics is not None:
            report.update(self._metrics.report())
        self.last_report = report  # served whole at GET /stats
        # Many partitions: only a summary goes to the coordination store (see strait.coordination.stats).
        self.store.publish_stats(self.id, stats_for_zookeeper(report, self.config.worker.stats_interval_s))

    def _shutdown(self) -> None:
        self._watchdog.stop()
        for copier in [*self._copiers.values(), *self._retiring.values()]:
            try:
                copier.stop(drain=True, timeout_s=self.config.worker.revoke_timeout_s)
            except Exception:
                log.exception("copier did not stop cleanly")
        self._keeper.stop()  # after the copiers: their final commits need a confirmed lease
        self.store.close()


class RouteReload:
    """Route changes a reload hands to the agent's loop."""

    def __init__(
        self,
        config: StraitConfig,
        added: AbstractSet[str] = frozenset(),
        removed: AbstractSet[str] = frozenset(),
        changed: AbstractSet[str] = frozenset(),
    ) -> None:
        self.config = config
        self.added, self.removed, self.changed = set(added), set(removed), set(changed)


def normalise_stats(entry: Any) -> dict[str, Any]:
    """A copier's per-partition stats as JSON-friendly values under Strait's common names."""
    if isinstance(entry, Mapping):
        source: Mapping[str, Any] = entry
    elif callable(getattr(entry, "as_dict", None)):
        source = entry.as_dict()
    else:
        source = getattr(entry, "__dict__", {})
    out: dict[str, Any] = {}
    for name, value in source.items():
        if isinstance(value, str | int | float | bool) or value is None:
            out[str(name)] = value
    for common, aliases in _STAT_ALIASES.items():
        if common not in out:
            for alias in aliases:
                if alias in out:
                    out[common] = out[alias]
                    break
    return out


_STAT_ALIASES = {
    "records": ("copied_records", "records_copied"),
    "bytes": ("copied_bytes", "bytes_copied"),
    "checkpoint": ("committed", "position"),
}


def _by_route(tasks: Mapping[PartitionKey, PartitionTask]) -> dict[str, list[PartitionTask]]:
    grouped: dict[str, list[PartitionTask]] = {}
    for task in tasks.values():
        grouped.setdefault(task.route, []).append(task)
    return grouped
