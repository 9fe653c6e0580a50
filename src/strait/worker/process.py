"""Run one worker process: the agent in the foreground; SIGTERM/SIGINT start a drain, a second
one stops at once."""

from __future__ import annotations

import os
import signal
from types import FrameType

from strait.config import StraitConfig
from strait.coordination import connect
from strait.metrics.exposition import serve_metrics
from strait.metrics.worker import WorkerMetrics
from strait.worker.agent import WorkerAgent, copier_factory


def run_worker(config: StraitConfig, worker_id: str) -> None:
    """Copy what the controller assigns to `worker_id` until drained."""
    store = connect(
        connect=config.zookeeper.connect,
        root=config.zookeeper.root,
        session_timeout_s=config.zookeeper.session_timeout_s,
    )
    metrics = WorkerMetrics(worker_id)
    if config.observability.worker_metrics_listen is not None:
        metrics.url = serve_metrics(metrics.registry, config.observability.worker_metrics_listen)
    agent = WorkerAgent(
        config=config,
        worker_id=worker_id,
        store=store,
        make_copier=copier_factory(config, worker_id, metrics),
        metrics=metrics,
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
