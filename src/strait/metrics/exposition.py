"""Serving metrics over HTTP from a worker process (the controller mounts its own on FastAPI).

With a metrics token (``observability.metrics_token``), ``/metrics`` answers only requests that
carry ``Authorization: Bearer <token>`` (compared in constant time) and 401 otherwise, as the
controller's ``/metrics`` does; Prometheus sends it with ``authorization: {credentials_file: ...}``.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger(__name__)

_process_token: str | None = None


def require_token(token: str | None) -> None:
    """Make every metrics endpoint this process serves from now on need ``token`` (None: open).

    For a process whose code serving the metrics does not pass ``token`` itself (the worker).
    """
    global _process_token
    _process_token = token or None


def bearer_ok(authorization: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (always true without a token)."""
    if token is None:
        return True
    scheme, _, supplied = (authorization or "").partition(" ")
    # compare_digest takes the same time wherever the first difference is.
    return scheme.lower() == "bearer" and hmac.compare_digest(supplied.strip().encode(), token.encode())


UNAUTHORIZED = b"missing or wrong metrics token: send 'Authorization: Bearer <token>'\n"


def _guarded(app: Callable[..., Iterable[bytes]], token: str) -> Callable[..., Iterable[bytes]]:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not bearer_ok(environ.get("HTTP_AUTHORIZATION"), token):
            start_response(
                "401 Unauthorized",
                [
                    ("Content-Type", "text/plain"),
                    ("WWW-Authenticate", "Bearer"),
                    ("Content-Length", str(len(UNAUTHORIZED))),
                ],
            )
            return [UNAUTHORIZED]
        return app(environ, start_response)

    return guarded


def _with_stats(app: Callable[..., Iterable[bytes]], stats: Callable[[], Any]) -> Callable[..., Iterable[bytes]]:
    def routed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/stats":
            return app(environ, start_response)
        body = json.dumps(stats()).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return routed


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a hung scraper never holds the process open


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the base class's name
        """No access log: every scrape would write a line."""


def serve_metrics(
    registry: CollectorRegistry,
    listen: str,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    token: str | None = None,
    stats: Callable[[], Any] | None = None,
) -> str:
    """Serve `registry` on `host:port` (port 0 picks a free one) in a daemon thread; the URL.

    With ``stats``, ``GET /stats`` answers its value as JSON (a worker's whole stats report,
    which the controller fetches when only a summary of it is in ZooKeeper).

    With ``certfile``/``keyfile`` (PEM) the endpoint serves HTTPS only. With ``token`` (or the
    process's, see :func:`require_token`) it needs that bearer token.
    """
    token = token or _process_token
    host, _, port = listen.rpartition(":")
    host = (host or "127.0.0.1").strip("[]")

    class Server(_Server):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    app = make_wsgi_app(registry)
    if stats is not None:
        app = _with_stats(app, stats)
    server = make_server(host, int(port), _guarded(app, token) if token else app, Server, handler_class=_QuietHandler)
    if certfile and keyfile:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile, keyfile)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="strait-metrics", daemon=True).start()
    scheme = "https" if certfile else "http"
    shown = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{shown}:{server.server_port}/metrics"
    log.info("metrics on %s%s", url, " (bearer token required)" if token else "")
    return url
