"""Run one controller process: the control loop in a thread, the REST API in the foreground."""

from __future__ import annotations

import logging
import socket
import threading
import uuid

import uvicorn

from strait.config import StraitConfig
from strait.controller.discovery import SourceMetadata
from strait.controller.loop import Controller
from strait.controller.service import ControllerService
from strait.coordination import connect
from strait.coordination.model import LeaderInfo
from strait.web.app import create_app

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def serve(config: StraitConfig, *, controller_id: str | None = None, listen: str | None = None) -> None:
    """Serve until SIGINT/SIGTERM: uvicorn handles the signals, then the loop stops and
    leadership is released so a standby takes over at once instead of after a session timeout."""
    host, _, port_text = (listen or config.controller.listen).rpartition(":")
    port = int(port_text) or free_port(host)
    identity = LeaderInfo(
        id=controller_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}", api_url=f"http://{host}:{port}"
    )
    store = connect(
        connect=config.zookeeper.connect,
        root=config.zookeeper.root,
        session_timeout_s=config.zookeeper.session_timeout_s,
    )
    metadata = SourceMetadata(config.clusters)
    controller = Controller(config=config, store=store, metadata=metadata, identity=identity)
    service = ControllerService(
        config=config, store=store, metadata=metadata, controller=controller, controller_id=identity.id
    )
    loop = threading.Thread(target=controller.run, name="control-loop", daemon=True)
    loop.start()
    log.info("controller %s: API on %s", identity.id, identity.api_url)
    try:
        uvicorn.run(
            create_app(service, api_token=config.controller.api_token),
            host=host,
            port=port,
            log_level="warning",
        )
    finally:
        controller.stop()
        loop.join(timeout=10)
        store.close()
