"""Serving metrics over HTTP from a worker process (the controller mounts its own on FastAPI)."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


def serve_metrics(
    registry: CollectorRegistry, listen: str, *, certfile: str | None = None, keyfile: str | None = None
) -> str:
    """Serve `registry` on `host:port` (port 0 picks a free one) in a daemon thread; the URL.

    With ``certfile``/``keyfile`` (PEM) the endpoint serves HTTPS only.
    """
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(
        int(port), addr=host or "127.0.0.1", registry=registry, certfile=certfile, keyfile=keyfile
    )
    scheme = "https" if certfile else "http"
    url = f"{scheme}://{host or '127.0.0.1'}:{server.server_port}/metrics"
    log.info("metrics on %s", url)
    return url
