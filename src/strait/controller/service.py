"""What the REST API can ask of a controller: reads from the store, validated writes to it.

Every controller serves this, leader or standby. Writes go to the coordination store (ZooKeeper
or a Kafka cluster), the single source of truth, with create-if-absent semantics, so a standby
can accept them safely: the leader sees them through its watches and acts within one cycle.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from strait.config import RouteConfig, StraitConfig
from strait.controller.discovery import MetadataUnavailable, SourceMetadata, await_topic
from strait.controller.loop import Controller
from strait.coordination.model import ClusterSnapshot, PartitionKey, Start, TopicSpec, WorkerState
from strait.coordination.store import CoordinationStore
from strait.metrics import figures

log = logging.getLogger(__name__)

# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

# How long `POST /topics/{topic}` keeps asking the source for a topic it does not know
# (`controller.new_topic_wait_s`): one created a moment ago reaches the brokers' metadata
# asynchronously (later on a loaded host), and a client that creates a topic and adds it at once
# must not get a 404 for it.
NEW_TOPIC_WAIT_S = 5.0

# How long after its arrival `POST /topics/{topic}` waits for the destination topic it creates:
# long enough for a creation and its leaders (0.2 to 2.3 s on a loaded machine), short enough
# that an HTTP client's timeout (often 10 s) does not cut a slow one off; after it, the creation
# goes on in the background.
DESTINATION_WAIT_S = 5.0


class ServiceError(Exception):
    """A request the controller cannot honour; `kind` says why (mapped to an HTTP status)."""

    kind = "invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ServiceError):
    kind = "invalid"


class NotFound(ServiceError):
    kind = "not_found"


class Conflict(ServiceError):
    kind = "conflict"


class Unavailable(ServiceError):
    kind = "unavailable"


class DestinationFailed(ServiceError):
    """The destination cluster refused or did not answer (502: the controller's upstream failed)."""

    kind = "bad_gateway"


class TopicMaker(Protocol):
    """Makes a route's destination topics ready (`strait.worker.destination.DestinationTopics`)."""

    def ensure(self, source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        """Create or grow the destination topic like the source's; raises on failure."""


@dataclass(frozen=True)
class TopicRequest:
    """Settings of a topic to add; `None` means "the default"."""

    route: str | None = None
    destination_topic: str | None = None
    start: Start | None = None


def validate_topic_name(name: str, what: str = "topic") -> None:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidRequest(f"invalid {what} name {name!r}: use 1-249 letters, digits, '.', '_' or '-'")


class ControllerService:
    """Operations behind the REST API."""

    def __init__(
        self,
        *,
        config: StraitConfig,
        store: CoordinationStore,
        metadata: SourceMetadata,
        controller: Controller | None = None,
        controller_id: str = "",
        new_topic_wait_s: float = NEW_TOPIC_WAIT_S,
        destinations: Callable[[RouteConfig], TopicMaker] | None = None,
        destination_wait_s: float = DESTINATION_WAIT_S,
    ) -> None:
        """``destinations`` makes a route's destination topics (one maker per route, made on first
        use); with it, adding a topic creates its destination topic at once (see add_topic)."""
        self.config = config
        self.store = store
        self.metadata = metadata
        self.controller = controller
        self.controller_id = controller_id
        self.new_topic_wait_s = new_topic_wait_s
        self._make_destinations = destinations
        self.destination_wait_s = destination_wait_s
        self._destinations: dict[str, TopicMaker] = {}
        self._destinations_lock = threading.Lock()

    def close(self) -> None:
        """Let go of the Kafka clients the API made (made again if it is used later)."""
        with self._destinations_lock:
            makers, self._destinations = list(self._destinations.values()), {}
        for maker in makers:
            close = getattr(maker, "close", None)
            if close is not None:
                close()
        close_metadata = getattr(self.metadata, "close", None)
        if close_metadata is not None:
            close_metadata()

    # --- reads ---------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        leader = self.store.leader()
        return {
            "status": "ok",
            "leader": self.store.holds_leadership(),
            "id": self.controller_id,
            "leader_id": leader.id if leader else None,
            "leader_api": leader.api_url if leader else None,
            "coordination": self.store.session_state().value,
        }

    def routes(self) -> list[dict[str, Any]]:
        snapshot = self.store.snapshot()
        live = figures.pools(snapshot)
        rows = []
        for r in self.config.routes:
            workers = sum(n for pool, n in live.items() if r.pools is None or pool in r.pools)
            rows.append(
                {
                    "name": r.name,
                    "source": r.source,
                    "destination": r.destination,
                    "include": r.include,
                    "exclude": r.exclude,
                    "replication_factor": r.replication_factor,
                    "topics": sum(1 for route, _ in snapshot.topics if route == r.name),
                    # The worker pools it may use (null: any), their live workers, and whether it
                    # waits for one (its partitions are not assigned meanwhile).
                    "pools": r.pools,
                    "live_workers": workers,
                    "no_live_worker": workers == 0,
                }
            )
        return rows

    def topics(self) -> list[dict[str, Any]]:
        snapshot = self.store.snapshot()
        return [self._topic_summary(snapshot, spec) for _, spec in sorted(snapshot.topics.items())]

    def topic(self, topic: str, route: str | None) -> dict[str, Any]:
        snapshot = self.store.snapshot()
        matches = [s for (r, t), s in sorted(snapshot.topics.items()) if t == topic and route in (None, r)]
        if route is not None:
            self._route(route)
        if not matches:
            where = f" on route {route!r}" if route else ""
            raise NotFound(f"topic {topic!r} is not replicated{where}")
        if len(matches) > 1:
            routes = ", ".join(s.route for s in matches)
            raise InvalidRequest(f"topic {topic!r} is replicated on several routes ({routes}): pass ?route=")
        spec = matches[0]
        summary = self._topic_summary(snapshot, spec)
        stats = _partition_stats(snapshot)
        summary["partition_detail"] = [
            {
                "partition": p,
                "worker": snapshot.assignment.owners.get(PartitionKey(spec.route, spec.topic, p)),
                **stats.get(str(PartitionKey(spec.route, spec.topic, p)), {}),
            }
            for p in range(spec.partitions)
        ]
        return summary

    def workers(self) -> list[dict[str, Any]]:
        snapshot = self.store.snapshot()
        stats = snapshot.stats
        rows = []
        for worker in sorted(snapshot.workers.values(), key=lambda w: w.id):
            assigned = sorted(snapshot.assignment.of_worker(worker.id))
            state = worker.state
            if worker.live and worker.drain_requested and state is not WorkerState.LEFT:
                state = WorkerState.DRAINING
            report = stats.get(worker.id, {})
            rows.append(
                {
                    "id": worker.id,
                    "state": state.value,
                    "pool": worker.pool,
                    "host": worker.host,
                    "pid": worker.pid,
                    "routes": sorted({k.route for k in assigned} | {k.route for k in worker.holding}),
                    "partitions": [str(k) for k in assigned],
                    "holding": sorted(str(k) for k in worker.holding),
                    # A large worker's per-partition stats arrive over HTTP (strait.coordination.stats);
                    # until they do, the totals of its summary in the coordination store.
                    "records_copied": sum(int(p.get("records", 0)) for p in report.get("partitions", {}).values())
                    if "partitions" in report
                    else int(report.get("records") or 0),
                    "lag": sum(int(p.get("lag") or 0) for p in report.get("partitions", {}).values())
                    if "partitions" in report
                    else int(report.get("lag") or 0),
                }
            )
        return rows

    def assignment(self) -> dict[str, str | None]:
        return {str(k): w for k, w in sorted(self.store.read_assignment().owners.items())}

    # --- writes --------------------------------------------------------------------------
    def add_topic(self, topic: str, request: TopicRequest) -> tuple[bool, dict[str, Any]]:
        """Add a topic to a route; returns (created, topic). Same settings again is not an error."""
        arrived = time.monotonic()
        validate_topic_name(topic)
        route = self._route(request.route)
        # An empty name is refused below, not read as "the default" (the route's naming).
        destination = route.destination_topic(topic) if request.destination_topic is None else request.destination_topic
        validate_topic_name(destination, "destination_topic")
        # The destination topic is made ready from here on, while the source is asked about the
        # topic, the topic is written to the store and the leader publishes the assignment (a
        # worker picking the partitions up then finds it ready or nearly). Not when the topic is
        # already added with another destination: that request is refused below (409).
        early = None
        if self._make_destinations is not None:
            known = self.store.topic_specs([(route.name, topic)]).get((route.name, topic))
            if known is None or known.destination_topic == destination:
                early = self._start_destination(route, topic, destination)
        try:
            partitions = await_topic(lambda: self.metadata.partition_count(route.source, topic), self.new_topic_wait_s)
        except MetadataUnavailable as exc:
            raise Unavailable(str(exc)) from exc
        if partitions is None:
            raise NotFound(
                f"topic {topic!r} does not exist on source cluster {route.source!r} "
                f"(asked for {self.new_topic_wait_s:g}s)"
            )
        spec = TopicSpec(
            route=route.name,
            topic=topic,
            destination_topic=destination,
            start=request.start or "earliest",
            origin="api",
            partitions=partitions,
            initial_partitions=partitions,
        )
        existing = self.store.create_topic(spec)
        if existing is not None:
            if existing.settings() != spec.settings():
                raise Conflict(
                    f"topic {topic!r} is already replicated on route {route.name!r} with different settings "
                    f"(destination_topic={existing.destination_topic!r}, start={existing.start!r}); "
                    "remove it first to change them"
                )
            spec = existing
        if existing is None:
            log.info("route %s: topic %s added through the API (%d partitions)", route.name, topic, partitions)
        if self.controller is not None:
            self.controller.wake()
        # The destination topic's creation, started above, is waited for: the worker then finds
        # it ready instead of creating it itself (the largest step between a POST and the first
        # record when the worker did it).
        self._await_destination(route, spec, early, deadline=arrived + self.destination_wait_s)
        return existing is None, self._describe(spec)

    def _start_destination(self, route: RouteConfig, topic: str, destination: str) -> Future[int]:
        """Start making ``destination`` ready like ``topic`` (asked each time: it may be gone)."""
        assert self._make_destinations is not None
        with self._destinations_lock:
            maker = self._destinations.get(route.name)
            if maker is None:
                maker = self._destinations[route.name] = self._make_destinations(route)
        outcome: Future[int] = Future()

        def ensure() -> None:
            try:
                outcome.set_result(maker.ensure(topic, destination))
            except BaseException as exc:
                outcome.set_exception(exc)

        # A thread of its own, a daemon: a destination that does not answer holds up no shutdown.
        threading.Thread(target=ensure, name=f"destination-{destination}", daemon=True).start()
        return outcome

    def _await_destination(
        self, route: RouteConfig, spec: TopicSpec, early: Future[int] | None, *, deadline: float
    ) -> None:
        """Wait for ``spec``'s destination topic, or say which cluster and topic failed.

        A creation started before the source knew the topic (one created a moment ago) may have
        failed for that alone: it is started again now. The topic stays added when this fails:
        its workers try again themselves (as they did before the controller created topics), and
        a repeated POST is answered 200 once ready. A creation still under way after
        ``deadline`` (``destination_wait_s`` after the request arrived) goes on in the background
        and the POST is answered (a worker that meets the topic first waits for its leaders).
        """
        if self._make_destinations is None:
            return
        started = time.monotonic()
        outcome = early
        if outcome is not None:
            try:
                outcome.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                pass
            except Exception:
                outcome = None
        if outcome is None:
            outcome = self._start_destination(route, spec.topic, spec.destination_topic)
        try:
            count = outcome.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            log.info(
                "route %s: destination topic %s on cluster %s not ready %.1fs after the request; still being made",
                route.name,
                spec.destination_topic,
                route.destination,
                self.destination_wait_s,
            )
            outcome.add_done_callback(partial(_log_late, route, spec))
            return
        except Exception as exc:  # DestinationError, KafkaException: both name the cause
            log.warning(
                "route %s: destination topic %s on cluster %s not ready: %s",
                route.name,
                spec.destination_topic,
                route.destination,
                exc,
            )
            raise DestinationFailed(
                f"topic {spec.topic!r} is added to route {route.name!r}, but its destination topic "
                f"{spec.destination_topic!r} on cluster {route.destination!r} could not be made ready: {exc} "
                "(the workers keep trying; POST again to check)"
            ) from exc
        log.debug(
            "route %s: destination topic %s on cluster %s ready (%d partitions) in %.3fs",
            route.name,
            spec.destination_topic,
            route.destination,
            count,
            time.monotonic() - started,
        )

    def remove_topic(self, topic: str, route_name: str | None) -> None:
        validate_topic_name(topic)
        route = self._route(route_name)
        if not self.store.delete_topic(route.name, topic):
            raise NotFound(f"topic {topic!r} is not replicated on route {route.name!r}")
        if self.controller is not None:
            self.controller.wake()

    def failover(self, route_name: str, group: str, *, dry_run: bool) -> dict[str, Any]:
        """One-shot exact failover of a consumer group (see strait.offsetmap.failover)."""
        from strait.offsetmap import failover

        route = self._route(route_name)
        try:
            partitions = failover.plan(self.config, route.name, group)
            written = 0 if dry_run else failover.apply(self.config, route.name, group, partitions)
        except failover.GroupActive as exc:
            raise Conflict(str(exc)) from exc
        except failover.NothingToTranslate as exc:
            raise NotFound(str(exc)) from exc
        except failover.FailoverError as exc:
            raise Unavailable(str(exc)) from exc
        return {
            "route": route.name,
            "group": group,
            "dry_run": dry_run,
            "written": written,
            "partitions": [p.as_dict() for p in partitions],
        }

    def drain(self, worker_id: str) -> dict[str, Any]:
        snapshot = self.store.snapshot()
        worker = snapshot.workers.get(worker_id)
        if worker is None or not worker.live:
            raise NotFound(f"worker {worker_id!r} is not live")
        self.store.request_drain(worker_id)
        return {"id": worker_id, "state": WorkerState.DRAINING.value}

    # --- helpers -------------------------------------------------------------------------
    def _route(self, name: str | None) -> RouteConfig:
        if name is None:
            if len(self.config.routes) == 1:
                return self.config.routes[0]
            names = ", ".join(r.name for r in self.config.routes)
            raise InvalidRequest(f"route is required when there are several routes ({names})")
        route = self.config.route(name)
        if route is None:
            names = ", ".join(r.name for r in self.config.routes)
            raise InvalidRequest(f"unknown route {name!r} (routes: {names})")
        return route

    @staticmethod
    def _describe(spec: TopicSpec) -> dict[str, Any]:
        return {
            "route": spec.route,
            "topic": spec.topic,
            "destination_topic": spec.destination_topic,
            "start": spec.start,
            "origin": spec.origin,
            "partitions": spec.partitions,
        }

    def _topic_summary(self, snapshot: ClusterSnapshot, spec: TopicSpec) -> dict[str, Any]:
        live = {w.id for w in snapshot.workers.values() if w.live}
        owners = [
            snapshot.assignment.owners.get(PartitionKey(spec.route, spec.topic, p)) for p in range(spec.partitions)
        ]
        if spec.partitions and all(o in live for o in owners):
            state = "replicating"
        elif not live:
            state = "waiting-for-workers"
        else:
            state = "assigning"
        return {**self._describe(spec), "state": state}


def _log_late(route: RouteConfig, spec: TopicSpec, outcome: Future[int]) -> None:
    """What became of a destination topic still being made ready when its POST was answered."""
    error = outcome.exception()
    if error is None:
        log.info(
            "route %s: destination topic %s on cluster %s ready", route.name, spec.destination_topic, route.destination
        )
    else:
        log.warning(
            "route %s: destination topic %s on cluster %s not ready: %s (the workers keep trying)",
            route.name,
            spec.destination_topic,
            route.destination,
            error,
        )


def _partition_stats(snapshot: ClusterSnapshot) -> dict[str, dict[str, Any]]:
    """Per-partition stats, preferring the report of the partition's assigned owner."""
    merged: dict[str, dict[str, Any]] = {}
    for worker_id, report in snapshot.stats.items():
        for key, entry in dict(report.get("partitions", {})).items():
            try:
                owner = snapshot.assignment.owners.get(PartitionKey.parse(key))
            except ValueError:
                continue
            if owner == worker_id or key not in merged:
                merged[key] = dict(entry)
    return merged
