"""The controller's REST API (FastAPI): HTTP in front of `ControllerService`.

Errors are JSON `{"error": "<message naming the problem>"}`: 400 for a request that is invalid
(an unknown route, a bad topic name), 401 without the API token, 404, 409, 502 when a cluster
refuses, 503 when the coordination store or a source cluster does not answer. When an API token
is configured, every mutating call needs `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
from typing import Any, Literal

from fastapi import Body, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from strait.controller.service import ControllerService, ServiceError, TopicRequest
from strait.coordination.store import StoreUnavailable
from strait.version import package_version
from strait.web.balance import mount_balance

_STATUS = {"invalid": 400, "not_found": 404, "conflict": 409, "bad_gateway": 502, "unavailable": 503}


class TopicBody(BaseModel):
    """Optional settings of `POST /topics/{topic}`."""

    model_config = ConfigDict(extra="forbid")

    route: str | None = None
    destination_topic: str | None = None
    start: Literal["earliest", "latest"] | None = None


class Unauthorized(Exception):
    """A mutating call without the configured bearer token."""


def create_app(service: ControllerService, *, api_token: str | None) -> FastAPI:
    """The API application for one controller."""
    app = FastAPI(title="Strait controller", version=package_version())

    def require_token(request: Request) -> None:
        if api_token is None:
            return
        scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip(), api_token):
            raise Unauthorized()

    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=_STATUS.get(exc.kind, 400))

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_request: Request, _exc: Unauthorized) -> JSONResponse:
        return JSONResponse(
            {"error": "missing or wrong API token: send 'Authorization: Bearer <token>'"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(StoreUnavailable)
    async def _store_unavailable(_request: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"error": f"coordination store unavailable: {exc}"}, status_code=503)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Unknown paths and methods too answer in the documented error shape, not FastAPI's
        # {"detail": ...}.
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
            problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
        return JSONResponse({"error": "; ".join(problems)}, status_code=400)

    @app.get("/health")
    def health() -> dict[str, Any]:
        """This controller's state: `status` ("ok"), whether it leads (`leader`), its `id`, the
        leading controller's id and API address (`leader_id`, `leader_api`; null while none
        leads), and its coordination session (`coordination`: connected, suspended or lost).
        503 when the coordination store does not answer."""
        return service.health()

    @app.get("/routes")
    def routes() -> list[dict[str, Any]]:
        """The configured routes: clusters, topic patterns, replication factor, the number of topics
        replicated, the worker pools each may use (null: any) and their live workers
        (`no_live_worker` is true while the route's partitions wait for one)."""
        return service.routes()

    @app.get("/topics")
    def topics() -> list[dict[str, Any]]:
        """Every replicated topic of every route: its destination topic, where copying started
        (`start`), how it was added (`origin`: `api` or `pattern`), its partition count and its
        `state` (`replicating`, `assigning` or `waiting-for-workers`)."""
        return service.topics()

    @app.get("/topics/{topic}")
    def topic(topic: str, route: str | None = None) -> dict[str, Any]:
        """One replicated topic as in `GET /topics`, with each partition's worker and latest stats
        (`partition_detail`). 404 when the topic is not replicated (on `route`); 400 when it is
        replicated on several routes and `route` is not given, or `route` is unknown."""
        return service.topic(topic, route)

    @app.post("/topics/{topic}", dependencies=[Depends(require_token)])
    def add_topic(topic: str, response: Response, body: TopicBody | None = Body(default=None)) -> dict[str, Any]:
        """Replicate a source topic on a route (`route` may be left out when there is one route).
        `destination_topic` overrides the route's naming; `start` (`earliest` by default, or
        `latest`) is where copying begins. The answer waits up to 5 s for the destination topic to
        be created; a slower creation goes on in the background. 201 when added, 200 when it already was with the
        same settings, 409 when it was with others, 404 when the source cluster does not have the
        topic, 502 when the destination topic cannot be created (the topic stays added and the
        workers keep trying), 503 when the source cluster does not answer."""
        settings = body or TopicBody()
        created, described = service.add_topic(
            topic,
            TopicRequest(route=settings.route, destination_topic=settings.destination_topic, start=settings.start),
        )
        response.status_code = 201 if created else 200
        return described

    @app.delete("/topics/{topic}", status_code=204, dependencies=[Depends(require_token)])
    def remove_topic(topic: str, route: str | None = None) -> Response:
        """Stop replicating a topic on a route (`route` may be left out when there is one route).
        204 when removed; 404 when the topic is not replicated on that route."""
        service.remove_topic(topic, route)
        return Response(status_code=204)

    @app.get("/workers")
    def workers() -> list[dict[str, Any]]:
        """Every worker the coordination store knows (those that left stay listed for
        `controller.forget_left_workers_s`): its state, pool, host and pid, its routes, the
        partitions assigned to it and those it still holds, and the records copied and lag of its
        latest stats report."""
        return service.workers()

    @app.post("/workers/{worker_id}/drain", status_code=202, dependencies=[Depends(require_token)])
    def drain(worker_id: str) -> dict[str, Any]:
        """Ask a live worker to drain: its partitions move to other workers, then it leaves (as on
        SIGTERM). 202 when asked; 404 when the worker is not live."""
        return service.drain(worker_id)

    @app.post("/routes/{route}/groups/{group}/failover", dependencies=[Depends(require_token)])
    def failover(route: str, group: str, dry_run: bool = False) -> dict[str, Any]:
        """Translate GROUP's committed source offsets through the route's offset map and commit
        them for GROUP on the destination (409 while GROUP has members there)."""
        return service.failover(route, group, dry_run=dry_run)

    @app.get("/assignment")
    def assignment() -> dict[str, str | None]:
        """The written assignment: each partition (`route/topic/partition`) and the worker it is
        assigned to (null while unassigned)."""
        return service.assignment()

    sizes = {name: service.config.balance.capacities_of(name) for name in service.config.clusters}
    tiers = {name: service.config.balance.classes_of(name) for name in service.config.clusters}
    mount_balance(app, service.config.clusters, require_token, sizes, tiers)
    return app
