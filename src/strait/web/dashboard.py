"""The controller's observability endpoints and the live dashboard at `/ui`.

- `GET /metrics`: the controller's Prometheus metrics (workers serve their own).
- `GET /metrics/targets`: Prometheus HTTP service discovery of the workers' `/metrics`.
- `GET /observability[?partitions=true]`: the figures and time series behind the dashboard (JSON).
- `GET /partitions/stuck`, `GET /workers/slow`: the healing and slow-worker reports.
- `GET /ui`: the dashboard, a static page that polls `/observability`.

The page's charting library is vendored into `static/vendor/` at build time from the npm
registry (`scripts/vendor_ui.py`), never committed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from strait.metrics.controller import controller_registry
from strait.metrics.exposition import bearer_ok
from strait.metrics.observatory import Observatory

STATIC = Path(__file__).parent / "static"


def mount_observability(
    app: FastAPI,
    observatory: Observatory,
    *,
    metrics_token: str | None = None,
    group_sync: Callable[[], dict[str, Any]] | None = None,
    balance_watch: Callable[[], dict[str, Any]] | None = None,
    topic_config: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """Add the observability endpoints and the dashboard to the controller's API.

    With ``metrics_token``, `/metrics` and `/metrics/targets` (what Prometheus reads) need
    `Authorization: Bearer <metrics_token>`, compared in constant time, like the workers' `/metrics`.
    ``balance_watch`` (the balance watch mode's view) adds its metrics and its alerts on the dashboard.
    """
    app.include_router(_router(observatory, metrics_token, group_sync, balance_watch, topic_config))
    app.mount("/ui/static", StaticFiles(directory=STATIC, check_dir=False), name="ui-static")


def _router(
    observatory: Observatory,
    metrics_token: str | None = None,
    group_sync: Callable[[], dict[str, Any]] | None = None,
    balance_watch: Callable[[], dict[str, Any]] | None = None,
    topic_config: Callable[[], dict[str, Any]] | None = None,
) -> APIRouter:
    router = APIRouter()
    registry = controller_registry(observatory, group_sync, balance_watch, topic_config)

    def scraper(request: Request) -> None:
        if not bearer_ok(request.headers.get("authorization"), metrics_token):
            raise HTTPException(
                401,
                "missing or wrong metrics token: send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @router.get("/metrics", include_in_schema=False, dependencies=[Depends(scraper)])
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @router.get("/metrics/targets", dependencies=[Depends(scraper)])
    def targets() -> list[dict[str, Any]]:
        out = []
        for worker in observatory.view().get("workers", []):
            url = worker.get("metrics_url")
            if worker.get("live") and url:
                parts = urlsplit(url)
                out.append(
                    {
                        "targets": [parts.netloc],
                        "labels": {"worker": worker["id"], "__metrics_path__": parts.path or "/metrics"},
                    }
                )
        return out

    @router.get("/observability")
    def observability(partitions: bool = False) -> dict[str, Any]:
        """The dashboard's figures; per-partition rows (large on big fleets) only on request."""
        view = {**observatory.view(), "charts": observatory.charts()}
        if balance_watch is not None:
            view["balance_watch"] = balance_watch()
        if not partitions:
            view.pop("partitions", None)
        return view

    @router.get("/partitions/stuck")
    def stuck() -> list[dict[str, Any]]:
        return list(observatory.view().get("stuck", []))

    @router.get("/workers/slow")
    def slow() -> dict[str, Any]:
        view = observatory.view()
        return {"slow": view.get("slow_workers", []), "hung": view.get("hung_workers", [])}

    @router.get("/ui", include_in_schema=False)
    def ui() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    return router
