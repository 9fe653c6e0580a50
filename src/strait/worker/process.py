"""Run one worker process: the agent in the foreground; SIGTERM/SIGINT start a drain, a second
one stops at once."""

from __future__ import annotations

import logging
import os
import signal
import time
from types import FrameType

from strait.access_errors import name_clusters
from strait.config import StraitConfig
from strait.coordination import connect
from strait.coordination.store import StoreUnavailable
from strait.metrics.exposition import serve_metrics
from strait.metrics.worker import WorkerMetrics
from strait.worker.agent import LEASE_FRACTION, WorkerAgent, copier_factory
from strait.worker.lease import Lease

log = logging.getLogger(__name__)


def run_worker(config: StraitConfig, worker_id: str) -> None:
    """Copy what the controller assigns to `worker_id` until drained."""
    name_clusters(config.clusters)  # errors say "cluster dst", not a broker list
    delay_s = 1.0
    while True:
        try:
            store = connect(
                connect=config.zookeeper.connect,
                root=config.zookeeper.root,
                session_timeout_s=config.zookeeper.session_timeout_s,
            )
            break
        except StoreUnavailable as exc:
            # ZooKeeper down while this worker (re)starts: wait for it rather than exit, as a
            # worker that loses ZooKeeper later waits too.
            log.warning("%s; retrying in %.0fs", exc, delay_s)
            time.sleep(delay_s)
            delay_s = min(10.0, delay_s * 2)
    metrics = WorkerMetrics(worker_id)
    if config.observability.worker_metrics_listen is not None:
        tls = config.controller.tls
        metrics.url = serve_metrics(
            metrics.registry,
            config.observability.worker_metrics_listen,
            certfile=str(tls.cert) if tls is not None else None,
            keyfile=str(tls.key) if tls is not None else None,
        )
    lease = Lease(config.zookeeper.session_timeout_s * LEASE_FRACTION)
    agent = WorkerAgent(
        config=config,
        worker_id=worker_id,
        store=store,
        make_copier=copier_factory(config, worker_id, metrics, lease),
        metrics=metrics,
        lease=lease,
    )

    def drain(signum: int, _frame: FrameType | None) -> None:
        if agent.drain_requested:
            # Asked twice: stop now. As safe as kill -9 (checkpoints cover only acknowledged
            # records); the next owner may copy a few records again.
            os._exit(128 + signum)
        agent.request_drain()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, drain)
    agent.run()
