"""Run one worker process: the agent in the foreground; SIGTERM/SIGINT start a drain, a second
one stops at once; SIGHUP (or a change of the configuration file or of a secret file it
references) reloads the configuration (strait.reload)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from strait.access_errors import name_clusters
from strait.config import StraitConfig, load_config
from strait.coordination import open_store
from strait.coordination.store import CoordinationStore, StoreUnavailable
from strait.metrics.exposition import serve_metrics
from strait.metrics.worker import WorkerMetrics
from strait.reload.plan import ReloadPlan
from strait.reload.reloader import Reloader, defer_sighup
from strait.worker.agent import LEASE_FRACTION, WorkerAgent, copier_factory, copy_mode
from strait.worker.lease import Lease
from strait.worker.stalls import freeze_heap

log = logging.getLogger(__name__)


# How long a worker stopping at once waits for ZooKeeper to close its session.
GOODBYE_TIMEOUT_S = 2.0
# The exit status of a worker the watchdog ended (strait.worker.watchdog), for supervisors and logs.
WATCHDOG_EXIT_CODE = 70


def say_goodbye(store: CoordinationStore, timeout_s: float) -> bool:
    """Close the session (its ephemeral nodes go with it) within ``timeout_s``; True if it did.

    On a thread, so that a signal handler never blocks on a store that does not answer: then
    the session ends by timing out, as after kill -9.
    """
    closer = threading.Thread(target=store.close, name="goodbye", daemon=True)
    closer.start()
    closer.join(timeout_s)
    return not closer.is_alive()


def _exit_now(reason: str) -> None:
    """Crash-only: a loop or partition the watchdog found stuck past repair ends the process at
    once (a drain could wait on the stuck part). The session ends with it; the leader moves the
    partitions (fencing exactly-once producers), which resume from their checkpoints."""
    log.critical("watchdog: %s; the worker exits", reason)
    logging.shutdown()
    os._exit(WATCHDOG_EXIT_CODE)


def run_worker(
    config: StraitConfig, worker_id: str, *, config_path: Path | None = None, pool: str | None = None
) -> None:
    """Copy what the controller assigns to `worker_id` until drained.

    With ``config_path``, SIGHUP and changes of that file reload it (``pool``: the command
    line's ``--pool``, kept over the file's ``worker.pool``)."""
    name_clusters(config.clusters)  # errors say "cluster dst", not a broker list
    early_reload = defer_sighup() if config_path is not None else None
    delay_s = 1.0
    while True:
        try:
            store = open_store(config)
            break
        except StoreUnavailable as exc:
            # ZooKeeper down while this worker (re)starts: wait for it rather than exit, as a
            # worker that loses ZooKeeper later waits too.
            log.warning("%s; retrying in %.0fs", exc, delay_s)
            time.sleep(delay_s)
            delay_s = min(10.0, delay_s * 2)
    metrics = WorkerMetrics(worker_id)
    agents: list[WorkerAgent] = []  # the agent, once made: its last stats report is served at /stats
    if config.observability.worker_metrics_listen is not None:
        tls = config.controller.tls
        metrics.url = serve_metrics(
            metrics.registry,
            config.observability.worker_metrics_listen,
            certfile=str(tls.cert) if tls is not None else None,
            keyfile=str(tls.key) if tls is not None else None,
            stats=lambda: agents[0].last_report if agents else {},
        )
    lease = Lease(config.coordination.session_timeout_s * LEASE_FRACTION)
    agent = WorkerAgent(
        config=config,
        worker_id=worker_id,
        store=store,
        make_copier=copier_factory(config, worker_id, metrics, lease),
        metrics=metrics,
        lease=lease,
        exit=_exit_now,
    )
    agents.append(agent)
    if any(copy_mode(route)[0] == "batch" for route in config.routes):
        # The batch pipeline's modules (kafka-python, the wire schemas: ~16,000 objects) are
        # otherwise imported when the first assignment arrives, after the freeze below: every
        # full collection then walked them, 2-3x the objects a record route's worker walks.
        import strait.worker.batch.pipeline  # noqa: F401
    freeze_heap()  # full garbage collections no longer walk the start-up objects (stalls.py)

    def drain(signum: int, _frame: FrameType | None) -> None:
        if agent.drain_requested:
            # Asked twice: stop now. As safe as kill -9 (checkpoints cover only acknowledged
            # records); the next owner may copy a few records again. Say goodbye first: closing
            # the session deletes the registration at once, so the controller moves (and on
            # exactly-once routes fences) our partitions now, not a session timeout later.
            say_goodbye(store, GOODBYE_TIMEOUT_S)
            os._exit(128 + signum)
        agent.request_drain()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, drain)
    reloader = _reloader(config, config_path, pool, agent) if config_path is not None else None
    if reloader is not None:
        signal.signal(signal.SIGHUP, lambda _signum, _frame: reloader.request())
        if early_reload is not None and early_reload.is_set():
            reloader.request()
        reloader.start()
    try:
        agent.run()
    finally:
        if reloader is not None:
            reloader.stop()


def _reloader(config: StraitConfig, path: Path, pool: str | None, agent: WorkerAgent) -> Reloader:
    def load() -> StraitConfig:
        loaded = load_config(path)
        if pool is None:
            return loaded
        return loaded.model_copy(update={"worker": loaded.worker.model_copy(update={"pool": pool})})

    def apply(plan: ReloadPlan, running: StraitConfig) -> None:
        # A batch pipeline's kafka-python connections take their password when made: its copier
        # is replaced (partitions revoked with a final checkpoint, then resumed from it), so no
        # later connection of it tries a password the cluster may no longer accept.
        relink = {
            route.name
            for route in running.routes
            if copy_mode(route)[0] == "batch" and {route.source, route.destination} & set(plan.credentials)
        } - set(plan.added)
        if relink:
            log.info(
                "route(s) %s: copiers restart with the new credentials (batch pipeline)", ", ".join(sorted(relink))
            )
        changed = set(plan.changed) | relink
        if plan.added or plan.removed or changed:
            agent.reconfigure(running, added=plan.added, removed=plan.removed, changed=changed)

    return Reloader(path=path, load=load, running=config, role="worker", apply=apply)
