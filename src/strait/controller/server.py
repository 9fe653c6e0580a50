"""Run one controller process: the control loop in a thread, the REST API in the foreground;
SIGHUP (or a change of the configuration file or of a secret file it references) reloads the
configuration (strait.reload)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import uuid
from pathlib import Path

import uvicorn

from strait.access_errors import name_clusters
from strait.balancer.watcher import BalanceWatcher
from strait.config import RouteConfig, StraitConfig, load_config
from strait.controller.discovery import SourceMetadata
from strait.controller.groupsync import GroupSync
from strait.controller.loop import Controller
from strait.controller.service import ControllerService
from strait.controller.topicconfig import TopicConfigFollower
from strait.coordination import open_store
from strait.coordination.model import LeaderInfo
from strait.coordination.stats import use_token as use_stats_token
from strait.metrics.balance import read_executions
from strait.metrics.healing import HealingPolicy
from strait.metrics.observatory import Observatory, ObservatorySettings
from strait.metrics.probe import OffsetProbe
from strait.reload.plan import ReloadPlan
from strait.reload.reloader import Reloader, defer_sighup
from strait.web.app import create_app
from strait.web.balance import mount_balance_watch
from strait.web.dashboard import mount_observability
from strait.worker.destination import for_route as destination_topics

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _started_with_the_controller(route: RouteConfig | None) -> list[str]:
    """The options of ``route`` served by threads that take their routes when the controller starts."""
    if route is None:
        return []
    options = {"topic_config.follow": route.topic_config.follow, "offset_map": route.offset_map, "groups": route.groups}
    return [key for key, value in options.items() if value]


def serve(
    config: StraitConfig,
    *,
    controller_id: str | None = None,
    listen: str | None = None,
    config_path: Path | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM: uvicorn handles the signals, then the loop stops and
    leadership is released so a standby takes over at once instead of after a session timeout.

    With ``config_path``, SIGHUP and changes of that file reload it."""
    name_clusters(config.clusters)
    early_reload = defer_sighup() if config_path is not None else None
    host, _, port_text = (listen or config.controller.listen).rpartition(":")
    port = int(port_text) or free_port(host)
    identity = LeaderInfo(
        id=controller_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}",
        api_url=f"{config.controller.scheme}://{host}:{port}",
    )
    store = open_store(config)
    use_stats_token(config.observability.metrics_token)  # to fetch large workers' stats (GET /stats)
    metadata = SourceMetadata(config.clusters)
    observability = config.observability
    probe = OffsetProbe(config)
    observatory = Observatory(
        store=store,
        offsets=probe.read,
        controller_id=identity.id,
        settings=ObservatorySettings(
            sample_interval_s=observability.sample_interval_s,
            policy=HealingPolicy(
                stuck_after_s=observability.stuck_after_s,
                max_moves=observability.max_moves,
                cooldown_s=observability.cooldown_s,
            ),
            heal=observability.heal,
            slow_worker_ratio=observability.slow_worker_ratio,
            hung_after_s=max(observability.stuck_after_s, 3 * config.worker.stats_interval_s),
            route_pools={r.name: tuple(r.pools) if r.pools else None for r in config.routes},
        ),
        balance=lambda: read_executions(config.clusters),
    )
    controller = Controller(
        config=config, store=store, metadata=metadata, identity=identity, steering=observatory.steering
    )
    observatory.on_heal = controller.wake
    service = ControllerService(
        config=config,
        store=store,
        metadata=metadata,
        controller=controller,
        controller_id=identity.id,
        new_topic_wait_s=config.controller.new_topic_wait_s,
        # A topic added through the API gets its destination topic at once, with the rules the
        # worker's copier uses (strait.worker.destination.for_route).
        destinations=lambda route: destination_topics(
            config.clusters[route.source], config.clusters[route.destination], route
        ),
    )
    loop = threading.Thread(target=controller.run, name="control-loop", daemon=True)
    loop.start()
    sampler = threading.Thread(target=observatory.run, name="observatory", daemon=True)
    sampler.start()
    # Consumer-group offset sync (routes with `groups:`): its own thread, only while leading.
    group_sync = GroupSync(config, leading=lambda: controller.leading) if any(r.groups for r in config.routes) else None
    syncer = threading.Thread(target=group_sync.run, name="group-sync", daemon=True) if group_sync else None
    if syncer is not None:
        syncer.start()
    # Destination topic settings follow the source's (routes with topic_config.follow), and
    # offset maps keep as long as their data (routes with offset_map): one writer, the leader,
    # in its own thread.
    follower = (
        TopicConfigFollower(config, leading=lambda: controller.leading, topics=store.topics)
        if any(r.topic_config.follow or r.offset_map for r in config.routes)
        else None
    )
    if follower is not None:
        threading.Thread(target=follower.run, name="topic-config", daemon=True).start()
    # Balance watch mode (`balance.watch`): the leader samples the listed clusters in its own thread.
    watcher = (
        BalanceWatcher(config.clusters, config.balance, leading=lambda: controller.leading)
        if config.balance.watched()
        else None
    )
    if watcher is not None:
        threading.Thread(target=watcher.run, name="balance-watch", daemon=True).start()
    app = create_app(service, api_token=config.controller.api_token)
    mount_balance_watch(app, watcher)
    mount_observability(
        app,
        observatory,
        metrics_token=config.observability.metrics_token,
        group_sync=group_sync.view if group_sync is not None else None,
        topic_config=follower.view if follower is not None else None,
        balance_watch=watcher.view if watcher is not None else None,
    )
    reloader: Reloader | None = None
    if config_path is not None:
        path = config_path

        def apply(plan: ReloadPlan, running: StraitConfig) -> None:
            if plan.added or plan.removed or plan.changed:
                # Topic discovery and the API read the routes from here at each use.
                controller.config = running
                service.config = running
                controller.wake()
            for name in plan.added:
                # The threads that follow topic settings, keep offset maps and sync groups take
                # their routes when the controller starts.
                for key in _started_with_the_controller(running.route(name)):
                    log.warning("reload: route %s is added; needs a restart: routes.%s.%s", name, name, key)

        reloader = Reloader(path=path, load=lambda: load_config(path), running=config, role="controller", apply=apply)
        signal.signal(signal.SIGHUP, lambda _signum, _frame: reloader.request() if reloader is not None else None)
        if early_reload is not None and early_reload.is_set():
            reloader.request()
        reloader.start()
    log.info("controller %s: API on %s", identity.id, identity.api_url)
    tls = config.controller.tls
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            log_config=None,  # uvicorn logs through the root handler: --log-format, secrets masked
            ssl_certfile=str(tls.cert) if tls is not None else None,
            ssl_keyfile=str(tls.key) if tls is not None else None,
        )
    finally:
        if reloader is not None:
            reloader.stop()
        observatory.stop()
        controller.stop()
        if group_sync is not None:
            group_sync.stop()
        if follower is not None:
            follower.stop()
        if watcher is not None:
            watcher.stop()
        loop.join(timeout=10)
        sampler.join(timeout=10)
        service.close()
        probe.close()
        store.close()
