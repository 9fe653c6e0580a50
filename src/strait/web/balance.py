"""The balancer over REST: plan, start, watch and cancel executions on a configured cluster.

Thin HTTP in front of `strait.balancer.service`; an execution runs in its own process and its
state lives in the balanced cluster, so every controller (leader or standby) answers the same.
The watch mode's findings and proposals (`mount_balance_watch`) live in the leader's memory:
a standby answers that it does not watch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from fastapi import Body, Depends, FastAPI, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from strait.balancer import executor, service
from strait.balancer.capacity import Capacities
from strait.balancer.errors import CapacityError, ClusterError, ExecutionConflict, PlanError
from strait.balancer.goals import Goals
from strait.balancer.plan import Plan
from strait.balancer.tiers import DiskClasses
from strait.balancer.units import parse_bytes

Operation = Literal["rebalance", "drain", "fill", "fix-racks", "leaders"]
TRAFFIC_WINDOW = (
    "seconds to measure each partition's traffic before planning (broker network in/out and leader "
    "bytes in are balanced too); default 0, or 10 when disk classes apply"
)
DISK_CLASS = "storage tier of log dirs, over balance.disk_classes: 'DIR_GLOB=ssd' or '=hdd' (keys as for capacities)"


class ExecutionBody(BaseModel):
    """`POST /balance/{cluster}/executions`: run `plan`, or plan `operation` afresh."""

    model_config = ConfigDict(extra="forbid")

    plan: dict[str, Any] | None = None
    operation: Operation = "rebalance"
    brokers: list[int] = Field(default_factory=list)
    threshold: float = Field(default=0.10, gt=0, lt=1)
    mode: Literal["pipeline", "batch"] = "pipeline"
    throttle: str | None = Field(default=None, description="bytes/s with a unit, e.g. 50KB or 20MB")
    traffic_window: float | None = Field(default=None, ge=0, le=600, description=TRAFFIC_WINDOW)
    disk_class: list[str] = Field(default_factory=list, description=DISK_CLASS)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def mount_balance(
    app: FastAPI,
    clusters: Mapping[str, Mapping[str, Any]],
    require_token: Callable[..., None],
    capacities: Mapping[str, Capacities] | None = None,
    classes: Mapping[str, DiskClasses] | None = None,
) -> None:
    """Add the `/balance/...` endpoints for the clusters named in the configuration.

    `capacities` holds each cluster's configured disk sizes (`balance.capacities`). A plan that
    needs sizes the brokers cannot tell is refused with 422, naming the brokers and dirs.
    `classes` holds each cluster's disk classes (`balance.disk_classes`); `disk_class` in a
    request overrides them dir by dir.
    """
    sizes = dict(capacities or {})
    tiers = dict(classes or {})

    def classes_of(cluster: str, given: list[str]) -> DiskClasses:
        rules: dict[str, str] = {}
        for item in given:
            key, sep, value = item.rpartition("=")
            if not sep or not key:
                raise ValueError(f"disk_class {item!r}: give DIR_GLOB=ssd or DIR_GLOB=hdd")
            rules[key] = value
        return DiskClasses.of(rules).over(tiers.get(cluster))

    def props_of(cluster: str) -> Mapping[str, Any] | JSONResponse:
        if cluster not in clusters:
            known = ", ".join(sorted(clusters)) or "none"
            return _error(404, f"unknown cluster {cluster!r} (configured: {known})")
        return clusters[cluster]

    @app.get("/balance/{cluster}/plan", tags=["balance"])
    def plan(
        cluster: str,
        operation: Operation = "rebalance",
        brokers: list[int] = Query(default=[]),
        threshold: float = Query(default=0.10, gt=0, lt=1),
        traffic_window: float | None = Query(default=None, ge=0, le=600, description=TRAFFIC_WINDOW),
        disk_class: list[str] = Query(default=[], description=DISK_CLASS),
    ) -> Any:
        """A dry-run plan for the cluster (nothing moves)."""
        props = props_of(cluster)
        if isinstance(props, JSONResponse):
            return props
        try:
            return service.make_plan(
                props,
                operation,
                brokers=brokers,
                goals=Goals(threshold=threshold),
                capacities=sizes.get(cluster),
                traffic_window_s=traffic_window,
                classes=classes_of(cluster, disk_class),
            ).to_dict()
        except CapacityError as exc:
            return _error(422, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        except ClusterError as exc:
            return _error(503, f"cluster {cluster!r}: {exc}")

    @app.post("/balance/{cluster}/executions", status_code=201, tags=["balance"], dependencies=[Depends(require_token)])
    def start(cluster: str, body: ExecutionBody = Body(...)) -> Any:
        """Start an execution in the background; answers with its id."""
        props = props_of(cluster)
        if isinstance(props, JSONResponse):
            return props
        try:
            throttle = parse_bytes(body.throttle) if body.throttle else None
            chosen = (
                Plan.from_dict(body.plan)
                if body.plan is not None
                else service.make_plan(
                    props,
                    body.operation,
                    brokers=body.brokers,
                    goals=Goals(threshold=body.threshold),
                    capacities=sizes.get(cluster),
                    traffic_window_s=body.traffic_window,
                    classes=classes_of(cluster, body.disk_class),
                )
            )
            options = executor.Options(mode=body.mode, throttle=throttle)
            execution_id = service.submit(props, chosen, options, sizes.get(cluster))
        except ExecutionConflict as exc:
            return _error(409, str(exc))
        except CapacityError as exc:
            return _error(422, str(exc))
        except (PlanError, ValueError) as exc:
            return _error(400, str(exc))
        except ClusterError as exc:
            return _error(503, f"cluster {cluster!r}: {exc}")
        return {"execution": execution_id, "moves": len(chosen.moves)}

    @app.get("/balance/{cluster}/executions/current", tags=["balance"])
    def current(cluster: str) -> Any:
        """The latest execution's progress, whether it runs, and whether its executor is alive."""
        props = props_of(cluster)
        if isinstance(props, JSONResponse):
            return props
        found = service.current(props)
        return found if found is not None else _error(404, f"no balance execution on cluster {cluster!r}")

    @app.delete("/balance/{cluster}/executions/current", tags=["balance"], dependencies=[Depends(require_token)])
    def cancel(cluster: str) -> Any:
        """Cancel the moves in flight (both kinds) and remove the throttles this execution set."""
        props = props_of(cluster)
        if isinstance(props, JSONResponse):
            return props
        try:
            final = service.cancel(props)
        except ClusterError as exc:
            return _error(503, f"cluster {cluster!r}: {exc}")
        return final if final is not None else _error(404, f"no balance execution on cluster {cluster!r}")


class WatchReader(Protocol):
    """What the REST layer reads of the watch mode (`strait.balancer.watcher.BalanceWatcher`)."""

    names: list[str]

    def view(self) -> dict[str, dict[str, Any]]: ...

    def proposal(self, name: str) -> dict[str, Any] | None: ...


def mount_balance_watch(app: FastAPI, watcher: WatchReader | None) -> None:
    """Add `GET /balance/watch` and `GET /balance/{cluster}/proposal` (the watch mode's plan).

    Without a watcher (`balance.watch` off) both answer 404 saying so.
    """

    @app.get("/balance/watch", tags=["balance"])
    def watched() -> Any:
        """Per watched cluster: phase, reasons, seconds out of balance, alert, proposal summary."""
        if watcher is None:
            return _error(404, "the balance watch mode is off (balance.watch in the configuration)")
        return watcher.view()

    @app.get("/balance/{cluster}/proposal", tags=["balance"])
    def proposal(cluster: str) -> Any:
        """The plan the watch mode proposes for the cluster, with why and whether it was executed."""
        if watcher is None:
            return _error(404, "the balance watch mode is off (balance.watch in the configuration)")
        if cluster not in watcher.names:
            known = ", ".join(watcher.names) or "none"
            return _error(404, f"cluster {cluster!r} is not watched (balance.clusters: {known})")
        found = watcher.proposal(cluster)
        if found is None:
            row = watcher.view().get(cluster, {})
            return _error(404, f"no proposal for cluster {cluster!r} (watch phase: {row.get('phase', 'unknown')})")
        return found
