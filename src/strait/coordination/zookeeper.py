"""The ZooKeeper backend of the coordination store: the only module that imports kazoo.

Layout under the configured root::

    leader                      ephemeral  {"id", "api_url"} of the leading controller
    leader-epoch                persistent version bumped by every new leader (write fencing)
    assignment                  persistent manifest {"layout": 2, ...}; the assignment itself is split
                                per worker: assignment/workers/<id>, assignment/unowned (see
                                strait.coordination.split; layout 1, one map here, is still read)
    topics/<route>/<topic>      persistent TopicSpec
    removed/<route>/<topic>     persistent marker: patterns must not re-add this topic
    workers/live/<id>           ephemeral  WorkerRecord (state, holding as ranges)
    workers/known/<id>          persistent last lifecycle state, pool and time, so the API can say left/dead
                                (deleted controller.forget_left_workers_s after the worker went)
    workers/stats/<id>          ephemeral  copy statistics: per partition for a small worker, else a summary
                                with the URL of the whole report (see strait.coordination.stats)
    workers/drain/<id>          persistent drain request
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    SessionState,
    TopicSpec,
    WorkerRecord,
)
from strait.coordination.split import SplitAssignment
from strait.coordination.stats import StatsGatherer
from strait.coordination.store import StoreUnavailable, WorkerIdTaken

log = logging.getLogger(__name__)

_CONNECTION_ERRORS = (ConnectionLoss, ConnectionClosedError, OperationTimeoutError, SessionExpiredError)


# kazoo's own retry for ZooKeeper calls: connection loss, operation timeout and an expired session
# (the client reconnects) are tried again, up to 4 tries, 0.1 s doubling to 1 s with a little jitter.
# A closed client (ConnectionClosedError) is not retried. Each call runs on a copy (kazoo keeps the
# attempt count in the instance).
DEFAULT_RETRY = KazooRetry(max_tries=4, delay=0.1, backoff=2, max_jitter=0.05, max_delay=1.0)


def _dump(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def _load(data: bytes | None) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        log.warning("ignoring a node that is not JSON: %r", data[:80])
        return {}


class ZooKeeperStore:
    """`CoordinationStore` on ZooKeeper (see the module docstring for the node layout)."""

    def __init__(
        self,
        *,
        connect: str,
        root: str,
        session_timeout_s: float = 4.0,
        retry: KazooRetry = DEFAULT_RETRY,
    ) -> None:
        self._root = root.rstrip("/")
        self._retry = retry
        self._connect = connect
        self._client = KazooClient(
            hosts=connect,
            timeout=session_timeout_s,
            # Reconnect for ever: a ZooKeeper outage must not end a worker or a controller.
            connection_retry={"max_tries": -1, "delay": 0.2, "backoff": 2, "max_delay": 2.0},
        )
        self._state = SessionState.LOST
        self._listeners: list[Callable[[SessionState], None]] = []
        self._lock = threading.Lock()
        self._leading = False
        self._epoch_version = -1
        self._watched_routes: set[str] = set()
        self._client.add_listener(self._on_kazoo_state)
        self._assignment = SplitAssignment(self._client, self._root, self._call)
        self._gatherer: StatsGatherer | None = None  # made by the first snapshot (controllers)

    # --- paths ---------------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self._root, *parts])

    # --- session -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._client.start(timeout=max(5.0, self._client._session_timeout / 1000.0))
        except KazooTimeoutError as exc:
            raise StoreUnavailable(f"cannot connect to ZooKeeper at {self._connect}") from exc
        self._state = SessionState.CONNECTED
        for part in ("topics", "removed", "workers/live", "workers/known", "workers/stats", "workers/drain"):
            self._call(self._client.ensure_path, self._path(part))
        with contextlib.suppress(NodeExistsError):
            self._call(self._client.create, self._path("leader-epoch"), b"{}")
        self._assignment.ensure()

    def close(self) -> None:
        self._leading = False
        if self._gatherer is not None:
            self._gatherer.close()
        try:
            self._client.stop()
            self._client.close()
        except Exception:  # closing is best effort: the session ends with the process anyway
            log.debug("error while closing the ZooKeeper client", exc_info=True)

    def session_state(self) -> SessionState:
        return self._state

    def on_session_change(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # Runs on kazoo's event thread: only flip flags and notify, never block.
        mapped = {
            KazooState.CONNECTED: SessionState.CONNECTED,
            KazooState.SUSPENDED: SessionState.SUSPENDED,
            KazooState.LOST: SessionState.LOST,
        }[state]
        if mapped is not SessionState.CONNECTED:
            # Leadership is in doubt as soon as the connection is: stop leader work now,
            # not when the session is finally declared lost.
            self._leading = False
        self._state = mapped
        log.info("ZooKeeper session %s", mapped.value)
        for listener in list(self._listeners):
            try:
                listener(mapped)
            except Exception:
                log.exception("session listener failed")

    def _session_id(self) -> int:
        session = self._client.client_id
        return int(session[0]) if session else -1

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return self._retry.copy()(fn, *args, **kwargs)
        except RetryFailedError as exc:
            raise StoreUnavailable(f"ZooKeeper unavailable: {exc.__context__ or exc}") from exc
        except _CONNECTION_ERRORS as exc:
            raise StoreUnavailable(f"ZooKeeper unavailable: {exc!r}") from exc

    def _get(self, path: str) -> tuple[Any, Any] | None:
        try:
            data, stat = self._call(self._client.get, path)
        except NoNodeError:
            return None
        return _load(data), stat

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._call(self._client.get_children, path))
        except NoNodeError:
            return []

    def _get_many(self, paths: list[str]) -> dict[str, Any]:
        """Read many nodes concurrently; missing nodes are left out."""
        pending = [(p, self._client.get_async(p)) for p in paths]
        found: dict[str, Any] = {}
        for path, result in pending:
            try:
                data, _ = result.get(timeout=10)
            except NoNodeError:
                continue
            except (*_CONNECTION_ERRORS, KazooTimeoutError) as exc:
                raise StoreUnavailable(f"ZooKeeper unavailable: {exc!r}") from exc
            found[path] = _load(data)
        return found

    # --- controller ----------------------------------------------------------------------
    def attempt_to_acquire_leadership(self, leader: LeaderInfo) -> bool:
        if self._state is not SessionState.CONNECTED:
            return False
        path = self._path("leader")
        try:
            self._call(self._client.create, path, _dump({"id": leader.id, "api_url": leader.api_url}), ephemeral=True)
            # A new leader bumps the epoch, so writes from a deposed leader fail their check.
            stat = self._call(self._client.set, self._path("leader-epoch"), _dump({"leader": leader.id}))
        except NodeExistsError:
            current = self._get(path)
            if current is None or current[1].ephemeralOwner != self._session_id():
                return False
            # The node is ours from before a brief disconnection: the session survived, so no
            # other controller can have led meanwhile.
            stat = self._call(self._client.exists, self._path("leader-epoch"))
        with self._lock:
            self._epoch_version = stat.version
            self._leading = self._state is SessionState.CONNECTED
        return self._leading

    def holds_leadership(self) -> bool:
        return self._leading and self._state is SessionState.CONNECTED

    def release_leadership(self) -> None:
        was_leading, self._leading = self._leading, False
        if not was_leading:
            return
        current = self._get(self._path("leader"))
        if current is not None and current[1].ephemeralOwner == self._session_id():
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._call(self._client.delete, self._path("leader"), version=current[1].version)

    def watch_cluster(self, on_change: Callable[[], None]) -> None:
        def children_changed(_children: list[str]) -> bool:
            on_change()
            return True

        def leader_changed(_data: bytes | None, _stat: Any) -> bool:
            on_change()
            return True

        def routes_changed(routes: list[str]) -> bool:
            for route in routes:
                with self._lock:
                    new = route not in self._watched_routes
                    self._watched_routes.add(route)
                if new:
                    ChildrenWatch(self._client, self._path("topics", route), children_changed)
            on_change()
            return True

        ChildrenWatch(self._client, self._path("workers/live"), children_changed)
        ChildrenWatch(self._client, self._path("workers/drain"), children_changed)
        ChildrenWatch(self._client, self._path("topics"), routes_changed)
        DataWatch(self._client, self._path("leader"), leader_changed)

    def snapshot(self) -> ClusterSnapshot:
        topic_paths = [
            self._path("topics", route, topic)
            for route in self._children(self._path("topics"))
            for topic in self._children(self._path("topics", route))
        ]
        removed = frozenset(
            (route, topic)
            for route in self._children(self._path("removed"))
            for topic in self._children(self._path("removed", route))
        )
        live_ids = self._children(self._path("workers/live"))
        known_ids = self._children(self._path("workers/known"))
        stats_ids = self._children(self._path("workers/stats"))
        drains = set(self._children(self._path("workers/drain")))
        nodes = self._get_many(
            topic_paths
            + [self._path("workers/live", w) for w in live_ids]
            + [self._path("workers/known", w) for w in known_ids]
            + [self._path("workers/stats", w) for w in stats_ids]
        )
        topics: dict[tuple[str, str], TopicSpec] = {}
        for path in topic_paths:
            if path in nodes:
                route, topic = path.rsplit("/", 2)[-2:]
                topics[(route, topic)] = TopicSpec.from_json(route, topic, nodes[path])
        workers: dict[str, WorkerRecord] = {}
        for worker_id in known_ids:
            known = nodes.get(self._path("workers/known", worker_id), {})
            workers[worker_id] = WorkerRecord.gone(worker_id, known, drain=worker_id in drains)
        for worker_id in live_ids:
            data = nodes.get(self._path("workers/live", worker_id))
            if data is not None:
                workers[worker_id] = WorkerRecord.from_json(worker_id, data, live=True, drain=worker_id in drains)
        stats = {w: nodes[self._path("workers/stats", w)] for w in stats_ids if self._path("workers/stats", w) in nodes}
        if any("stats_url" in report for report in stats.values()):
            # Large workers keep their per-partition stats out of ZooKeeper: fetched over HTTP.
            if self._gatherer is None:
                self._gatherer = StatsGatherer()
            stats = self._gatherer.merge(stats)
        return ClusterSnapshot(
            topics=topics,
            removed=removed,
            workers=workers,
            stats=stats,
            assignment=self.read_assignment(),
            leader=self.leader(),
        )

    def leader(self) -> LeaderInfo | None:
        node = self._get(self._path("leader"))
        if node is None:
            return None
        return LeaderInfo(id=str(node[0].get("id", "")), api_url=str(node[0].get("api_url", "")))

    def write_assignment(self, owners: Mapping[PartitionKey, str | None], version: int) -> bool:
        if not self.holds_leadership():
            return False
        # Every transaction of the publish checks the leader epoch (see strait.coordination.split).
        return self._assignment.write(owners, version, (self._path("leader-epoch"), self._epoch_version))

    def create_topic(self, spec: TopicSpec) -> TopicSpec | None:
        path = self._path("topics", spec.route, spec.topic)
        try:
            self._call(self._client.create, path, _dump(spec.to_json()), makepath=True)
        except NodeExistsError:
            existing = self._get(path)
            return TopicSpec.from_json(spec.route, spec.topic, existing[0]) if existing else None
        # An explicit add lifts the "removed" mark, so patterns may pick the topic up again.
        with contextlib.suppress(NoNodeError):
            self._call(self._client.delete, self._path("removed", spec.route, spec.topic))
        return None

    def update_topic(self, spec: TopicSpec) -> None:
        with contextlib.suppress(NoNodeError):  # removed meanwhile: the removal wins
            self._call(self._client.set, self._path("topics", spec.route, spec.topic), _dump(spec.to_json()))

    def delete_topic(self, route: str, topic: str) -> bool:
        marker = self._path("removed", route, topic)
        with contextlib.suppress(NodeExistsError):
            self._call(self._client.create, marker, b"{}", makepath=True)
        try:
            self._call(self._client.delete, self._path("topics", route, topic))
        except NoNodeError:
            return False
        return True

    def forget_worker(self, worker_id: str) -> None:
        if self._call(self._client.exists, self._path("workers/live", worker_id)) is not None:
            return  # back meanwhile
        if self.holds_leadership():
            self._assignment.forget(worker_id, (self._path("leader-epoch"), self._epoch_version))
        for part in ("workers/known", "workers/drain"):
            with contextlib.suppress(NoNodeError):
                self._call(self._client.delete, self._path(part, worker_id))

    def request_drain(self, worker_id: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self._call(self._client.create, self._path("workers/drain", worker_id), b"{}", makepath=True)

    # --- worker --------------------------------------------------------------------------
    def register_worker(self, record: WorkerRecord) -> None:
        path = self._path("workers/live", record.id)
        try:
            self._call(self._client.create, path, self._record_json(record), ephemeral=True)
        except NodeExistsError as exc:
            current = self._get(path)
            if current is not None and current[1].ephemeralOwner != self._session_id():
                raise WorkerIdTaken(f"worker id {record.id!r} is registered by another live session") from exc
            self._call(self._client.set, path, self._record_json(record))
        self._write_known(record)

    def _record_json(self, record: WorkerRecord) -> bytes:
        # The one-string-per-partition holding list only while a layout-1 controller may read it.
        return _dump(record.to_json(legacy_holding=self._assignment.legacy))

    def update_worker(self, record: WorkerRecord) -> None:
        try:
            self._call(self._client.set, self._path("workers/live", record.id), self._record_json(record))
        except NoNodeError as exc:
            raise StoreUnavailable(f"worker {record.id!r} is no longer registered (session lost)") from exc
        self._write_known(record)

    def deregister_worker(self, record: WorkerRecord) -> None:
        self._write_known(record)
        for part in ("workers/live", "workers/stats", "workers/drain"):
            with contextlib.suppress(NoNodeError):
                self._call(self._client.delete, self._path(part, record.id))

    def clear_drain_request(self, worker_id: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._call(self._client.delete, self._path("workers/drain", worker_id))

    def _write_known(self, record: WorkerRecord) -> None:
        path = self._path("workers/known", record.id)
        data = _dump(
            {
                "state": record.state.value,
                "host": record.host,
                "pid": record.pid,
                "pool": record.pool,
                "updated": time.time(),
            }
        )
        try:
            self._call(self._client.set, path, data)
        except NoNodeError:
            try:
                self._call(self._client.create, path, data, makepath=True)
            except NodeExistsError:
                self._call(self._client.set, path, data)

    def publish_stats(self, worker_id: str, stats: Mapping[str, Any]) -> None:
        path = self._path("workers/stats", worker_id)
        data = _dump(stats)
        try:
            self._call(self._client.set, path, data)
        except NoNodeError:
            # NodeExists: the previous session's node, which vanishes when that session expires.
            with contextlib.suppress(NodeExistsError):
                self._call(self._client.create, path, data, ephemeral=True)

    def watch_assignment(self, on_change: Callable[[Assignment], None]) -> None:
        # Every publish ends by bumping the manifest; the assignment passed is only a wake-up.
        def changed(_data: bytes | None, _stat: Any) -> bool:
            on_change(Assignment())
            return True

        DataWatch(self._client, self._path("assignment"), changed)

    def watch_worker_assignment(self, worker_id: str, on_change: Callable[[Assignment], None]) -> None:
        self._assignment.watch_worker(worker_id, on_change)

    def read_worker_assignment(self, worker_id: str) -> Assignment:
        return self._assignment.read_worker(worker_id)

    def watch_drain(self, worker_id: str, on_change: Callable[[bool], None]) -> None:
        def changed(data: bytes | None, _stat: Any) -> bool:
            on_change(data is not None)
            return True

        DataWatch(self._client, self._path("workers/drain", worker_id), changed)

    def read_assignment(self) -> Assignment:
        return self._assignment.read()

    def topics(self) -> dict[tuple[str, str], TopicSpec]:
        paths = [
            self._path("topics", route, topic)
            for route in self._children(self._path("topics"))
            for topic in self._children(self._path("topics", route))
        ]
        nodes = self._get_many(paths)
        specs: dict[tuple[str, str], TopicSpec] = {}
        for path, data in nodes.items():
            route, topic = path.rsplit("/", 2)[-2:]
            specs[(route, topic)] = TopicSpec.from_json(route, topic, data)
        return specs

    def topic_specs(self, names: Iterable[tuple[str, str]]) -> dict[tuple[str, str], TopicSpec]:
        paths = {self._path("topics", route, topic): (route, topic) for route, topic in set(names)}
        nodes = self._get_many(sorted(paths))
        return {paths[path]: TopicSpec.from_json(*paths[path], data) for path, data in nodes.items()}

    def drain_requested(self, worker_id: str) -> bool:
        return self._call(self._client.exists, self._path("workers/drain", worker_id)) is not None
