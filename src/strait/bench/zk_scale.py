"""ZooKeeper at scale: a real controller and a few simulated workers over 100,000 partitions.

The controller is Strait's own control loop (`Controller.cycle`: snapshot, assignment, fenced
publish) on a real ZooKeeper; the workers are simulated with Strait's own store calls, as the
agent makes them: each registers with its own session, reads only its own assignment node,
announces what it holds and publishes its stats (a summary in ZooKeeper; the whole report
served over HTTP at `/stats`, which the controller's snapshot fetches). Measured: the size of
every node (the largest must stay far below ZooKeeper's 1 MB limit), the time to publish an
assignment (first, and after a worker dies), and the time a worker takes to read its part.

Run: `strait bench zookeeper [--partitions 100000] [--workers 5] [--zookeeper HOST:PORT]`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry

from strait.config import parse_config
from strait.controller.discovery import SourceMetadata
from strait.controller.loop import Controller
from strait.coordination import connect
from strait.coordination.model import LeaderInfo, PartitionKey, TopicSpec, WorkerRecord, WorkerState
from strait.coordination.stats import for_zookeeper
from strait.coordination.store import CoordinationStore
from strait.metrics.exposition import serve_metrics

ZNODE_LIMIT = 1024 * 1024
ROUTE = "bench"


class _Listing(SourceMetadata):
    """The source's topics as the controller would list them (no Kafka needed)."""

    def __init__(self, topics: Mapping[str, int]) -> None:
        super().__init__({})
        self._listing = dict(topics)

    def topics(self, cluster: str) -> dict[str, int]:
        return dict(self._listing)


def node_sizes(zookeeper: str, root: str) -> dict[str, int]:
    """Bytes of every node under `root`."""
    client = KazooClient(hosts=zookeeper)
    client.start()
    sizes: dict[str, int] = {}
    try:
        pending = [root]
        while pending:
            path = pending.pop()
            data, _ = client.get(path)
            sizes[path] = len(data or b"")
            pending.extend(f"{path}/{child}" for child in client.get_children(path))
    finally:
        client.stop()
        client.close()
    return sizes


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def _summary(sizes: Mapping[str, int], root: str, part: str) -> dict[str, Any]:
    picked = {p: s for p, s in sizes.items() if p.startswith(f"{root}/{part}/")}
    return {
        "nodes": len(picked),
        "max_bytes": max(picked.values(), default=0),
        "total_bytes": sum(picked.values()),
    }


def run(
    zookeeper: str,
    *,
    partitions: int = 100_000,
    workers: int = 5,
    topics: int = 100,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Publish `partitions` over `workers` simulated workers through a real controller; figures."""
    root = f"/strait-zk-scale-{uuid.uuid4().hex[:8]}"
    per_topic = max(1, partitions // topics)
    listing = {f"bench.topic-{t:04d}": per_topic for t in range(topics)}
    total = per_topic * topics
    config = parse_config(
        {
            "zookeeper": {"connect": zookeeper, "root": root},
            "clusters": {"src": {}, "dst": {}},
            "routes": [{"name": ROUTE, "source": "src", "destination": "dst"}],
        },
        environ={},
    )
    load_before = os.getloadavg()
    store = connect(connect=zookeeper, root=root, session_timeout_s=30)
    worker_stores: dict[str, CoordinationStore] = {}
    reports: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] = {
        "partitions": total,
        "workers": workers,
        "topics": topics,
        "root": root,
        "load_average_before": [round(x, 1) for x in load_before],
        "cpus": os.cpu_count(),
    }
    try:
        for topic, count in listing.items():
            store.create_topic(TopicSpec(ROUTE, topic, topic, partitions=count, initial_partitions=count))
        for n in range(workers):
            worker_id = f"sim-worker-{n}"
            worker_store = connect(connect=zookeeper, root=root, session_timeout_s=30)
            worker_store.register_worker(WorkerRecord(worker_id, WorkerState.JOINING))
            worker_stores[worker_id] = worker_store
            reports[worker_id] = {}
        identity = LeaderInfo("bench-controller", "http://127.0.0.1:0")
        controller = Controller(config=config, store=store, metadata=_Listing(listing), identity=identity)
        assert store.attempt_to_acquire_leadership(identity), "another controller leads this root"

        publishes: list[float] = []
        original_write = store.write_assignment

        def timed_write(owners: Mapping[PartitionKey, str | None], version: int) -> bool:
            ok, seconds = _timed(lambda: original_write(owners, version))
            publishes.append(seconds)
            return bool(ok)

        store.write_assignment = timed_write  # type: ignore[method-assign]

        _, first_cycle = _timed(controller.cycle)
        result["first_cycle_s"] = round(first_cycle, 3)
        result["first_publish_s"] = round(publishes[-1], 3) if publishes else None
        log(f"first assignment: cycle {first_cycle:.2f} s, publish {result['first_publish_s']} s")

        reads = _workers_follow(worker_stores, reports, log)
        result["worker_read_s"] = _stats(reads)
        # The controller now sees every worker holding its part; its stats come from /stats.
        snapshot, snapshot_s = _timed(store.snapshot)
        result["snapshot_s"] = round(snapshot_s, 3)
        held = sum(len(w.holding) for w in snapshot.workers.values())
        result["held_seen_by_controller"] = held

        gathered = _wait_for_gathered_stats(store, set(worker_stores), total)
        result["stats_gathered_partitions"] = gathered

        sizes = node_sizes(zookeeper, root)
        result["znodes_after_first"] = _sizes_report(sizes, root)
        result["layout1_assignment_bytes"] = len(
            json.dumps({str(k): w for k, w in sorted(store.read_assignment().owners.items())}, sort_keys=True)
        )

        # One worker dies: its session ends, the controller spreads its partitions.
        dead = sorted(worker_stores)[-1]
        worker_stores.pop(dead).close()
        reports.pop(dead)
        publishes.clear()
        _, death_cycle = _timed(controller.cycle)
        result["death_cycle_s"] = round(death_cycle, 3)
        result["death_publish_s"] = round(publishes[-1], 3) if publishes else None
        log(f"after {dead} died: cycle {death_cycle:.2f} s, publish {result['death_publish_s']} s")
        reads = _workers_follow(worker_stores, reports, log)
        result["worker_read_after_death_s"] = _stats(reads)
        sizes = node_sizes(zookeeper, root)
        result["znodes_after_death"] = _sizes_report(sizes, root)
        owners = store.read_assignment().owners
        result["assigned_after_death"] = sum(1 for w in owners.values() if w is not None)
        result["max_znode_bytes"] = max(
            result["znodes_after_first"]["max_bytes"], result["znodes_after_death"]["max_bytes"]
        )
        result["under_limit"] = result["max_znode_bytes"] < ZNODE_LIMIT
        result["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    finally:
        for worker_store in worker_stores.values():
            worker_store.close()
        _delete_root(zookeeper, root)
        store.close()
    return result


def _workers_follow(
    stores: Mapping[str, CoordinationStore], reports: dict[str, dict[str, Any]], log: Callable[[str], None]
) -> list[float]:
    """Each simulated worker does what the agent does after a publish: read its own node,
    announce holding it, publish its stats (summary to ZooKeeper, the whole served over HTTP)."""
    reads: list[float] = []
    for worker_id, worker_store in stores.items():
        started = time.perf_counter()
        mine = worker_store.read_worker_assignment(worker_id)
        seconds = time.perf_counter() - started
        reads.append(seconds)
        keys = mine.of_worker(worker_id)
        worker_store.update_worker(WorkerRecord(worker_id, WorkerState.ACTIVE, holding=frozenset(keys)))
        if not reports[worker_id]:
            served = reports[worker_id]
            served["metrics_url"] = serve_metrics(CollectorRegistry(), "127.0.0.1:0", stats=_serve(served))
        report = reports[worker_id]
        report.update(
            {
                "updated": time.time(),
                "state": "active",
                "partitions": {str(k): {"records": 1000, "bytes": 1_000_000, "lag": 0} for k in keys},
                "lag_seconds": {str(k): 0.1 for k in keys},
            }
        )
        worker_store.publish_stats(worker_id, for_zookeeper(report, 2.0))
        log(f"{worker_id}: read {len(keys)} partitions in {seconds * 1000:.0f} ms")
    return reads


def _serve(report: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    return lambda: report


def _wait_for_gathered_stats(store: CoordinationStore, workers: set[str], total: int, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline:
        stats = store.snapshot().stats
        count = sum(len(dict(stats.get(w, {}).get("partitions") or {})) for w in workers)
        if count >= total:
            break
        time.sleep(0.5)
    return count


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4) if values else 0.0,
        "max": round(max(values), 4) if values else 0.0,
    }


def _sizes_report(sizes: Mapping[str, int], root: str) -> dict[str, Any]:
    return {
        "max_bytes": max(sizes.values()),
        "max_node": max(sizes, key=lambda p: sizes[p]).removeprefix(root),
        "manifest_bytes": sizes.get(f"{root}/assignment", 0),
        "assignment": _summary(sizes, root, "assignment"),
        "workers_live": _summary(sizes, root, "workers/live"),
        "workers_stats": _summary(sizes, root, "workers/stats"),
        "topics": _summary(sizes, root, "topics"),
    }


def _delete_root(zookeeper: str, root: str) -> None:
    client = KazooClient(hosts=zookeeper)
    client.start()
    try:
        client.delete(root, recursive=True)
    except Exception:  # best effort: a benchmark root left behind is only clutter
        pass
    finally:
        client.stop()
        client.close()
