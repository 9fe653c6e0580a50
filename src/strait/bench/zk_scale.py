"""The coordination store at scale: a real controller and a few simulated workers over 100,000 partitions.

The controller is Strait's own control loop (`Controller.cycle`: snapshot, assignment, fenced
publish) on a real ZooKeeper, or on a real Kafka cluster (the Kafka store); the workers are
simulated with Strait's own store calls, as the agent makes them: each registers with its own
session, reads only its own assignment, announces what it holds and publishes its stats (a
summary in the store; the whole report served over HTTP at `/stats`, which the controller's
snapshot fetches). Measured: the size of every node, or on Kafka of every record of the
coordination topics (the largest must stay far below ZooKeeper's 1 MB limit and the broker's
default `max.message.bytes`, 1 MB), the time to publish an assignment (first, and after a
worker dies), and the time a worker takes to read its part.

Run: `strait bench zookeeper [--store kafka|zookeeper] [--partitions 100000] [--workers 5]`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import TopicPartition
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry

from strait import clients
from strait.bench.straitrun import coordination_section
from strait.config import parse_config
from strait.controller.discovery import SourceMetadata
from strait.controller.loop import Controller
from strait.coordination import connect, connect_kafka
from strait.coordination.model import LeaderInfo, PartitionKey, TopicSpec, WorkerRecord, WorkerState
from strait.coordination.stats import for_zookeeper
from strait.coordination.store import CoordinationStore
from strait.metrics.exposition import serve_metrics

ZNODE_LIMIT = 1024 * 1024  # and the broker's default max.message.bytes, within a few bytes
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


def record_sizes(props: Mapping[str, Any], topics: list[str]) -> dict[str, int]:
    """Bytes of the latest value of every key of the coordination topics (a compacted view)."""
    consumer = clients.consumer(
        props, **{"group.id": "strait-bench-scale", "enable.auto.commit": False, "isolation.level": "read_committed"}
    )
    sizes: dict[str, int] = {}
    try:
        for topic in topics:
            end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
            consumer.assign([TopicPartition(topic, 0, 0)])
            position = 0
            while position < end:
                message = consumer.poll(5)
                if message is None:
                    break
                if message.error() is not None:
                    continue
                position = (message.offset() or 0) + 1
                raw_key = message.key()
                if raw_key is None:
                    continue
                key = raw_key.decode()
                value = message.value()
                if value is None:
                    sizes.pop(key, None)
                else:
                    sizes[key] = len(value)
    finally:
        consumer.close()
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
    zookeeper: str | None,
    *,
    kafka: Mapping[str, Any] | None = None,
    partitions: int = 100_000,
    workers: int = 5,
    topics: int = 100,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Publish `partitions` over `workers` simulated workers through a real controller; figures.

    On the ZooKeeper at `zookeeper`, or with `kafka` (client properties of a cluster) on the Kafka
    store there."""
    root = f"/strait-zk-scale-{uuid.uuid4().hex[:8]}"
    store_name = "kafka" if kafka is not None else "zookeeper"
    coordination = coordination_section(store_name, zookeeper=zookeeper, root=root, session_timeout_s=30)

    def open_store() -> CoordinationStore:
        if kafka is not None:
            return connect_kafka(props=kafka, prefix=coordination["kafka"]["prefix"], session_timeout_s=30)
        assert zookeeper is not None
        return connect(connect=zookeeper, root=root, session_timeout_s=30)

    def sizes_now() -> dict[str, Any]:
        if kafka is None:
            assert zookeeper is not None
            return _sizes_report(node_sizes(zookeeper, root), root)
        prefix = coordination["kafka"]["prefix"]
        return _record_sizes_report(record_sizes(kafka, [f"{prefix}.state", f"{prefix}.live"]))

    per_topic = max(1, partitions // topics)
    listing = {f"bench.topic-{t:04d}": per_topic for t in range(topics)}
    total = per_topic * topics
    config = parse_config(
        {
            "coordination": coordination,
            "clusters": {"src": {}, "dst": dict(kafka or {})},
            "routes": [{"name": ROUTE, "source": "src", "destination": "dst"}],
        },
        environ={},
    )
    load_before = os.getloadavg()
    store = open_store()
    worker_stores: dict[str, CoordinationStore] = {}
    reports: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] = {
        "store": store_name,
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
            worker_store = open_store()
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

        result["znodes_after_first"] = sizes_now()
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
        result["znodes_after_death"] = sizes_now()
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
        store.close()
        if kafka is None:
            assert zookeeper is not None
            _delete_root(zookeeper, root)
        else:
            prefix = coordination["kafka"]["prefix"]
            _delete_topics(kafka, [f"{prefix}.state", f"{prefix}.live"])
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


def _record_sizes_report(sizes: Mapping[str, int]) -> dict[str, Any]:
    """As `_sizes_report`, for the keys of the Kafka store's coordination topics."""

    def part(prefix: str) -> dict[str, Any]:
        picked = {k: v for k, v in sizes.items() if k.startswith(prefix)}
        return {"nodes": len(picked), "max_bytes": max(picked.values(), default=0), "total_bytes": sum(picked.values())}

    return {
        "max_bytes": max(sizes.values()),
        "max_node": max(sizes, key=lambda k: sizes[k]),
        "manifest_bytes": sizes.get("assignment", 0),
        "assignment": part("assignment/"),
        "workers_live": part("worker/"),
        "workers_stats": part("stats/"),
        "topics": part("topic/"),
    }


def _delete_topics(props: Mapping[str, Any], topics: list[str]) -> None:
    try:  # best effort, as `_delete_root`
        for future in clients.admin(props).delete_topics(topics, operation_timeout=30).values():
            future.result()
    except Exception:
        pass


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
