"""The balancer as a few calls, for the controller's REST layer (and anything else embedding it).

    GET    /balance/{cluster}/plan                  -> make_plan(props, ...).to_dict()
    GET    /balance/{cluster}/proposal              -> the watch mode's plan (`strait.balancer.watcher`)
    POST   /balance/{cluster}/executions            -> submit(props, plan, options)
    GET    /balance/{cluster}/executions/current    -> current(props)
    DELETE /balance/{cluster}/executions/current    -> cancel(props)

Executions run in their own background process (`strait.balancer.runner`), so a web server
restart does not stop them, and their state lives in the cluster, so any controller can answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from strait.balancer import executor, operations, sampler
from strait.balancer.capacity import Capacities
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals
from strait.balancer.plan import Plan
from strait.balancer.state import StateStore
from strait.balancer.tiers import DiskClasses
from strait.balancer.traffic import Traffic

OPERATIONS = ("rebalance", "drain", "fill", "fix-racks", "leaders")


def make_plan(
    props: Mapping[str, Any],
    operation: str = "rebalance",
    *,
    brokers: Collection[int] = (),
    goals: Goals | None = None,
    capacities: Capacities | Mapping[str, int] | None = None,
    traffic_window_s: float | None = None,
    classes: DiskClasses | None = None,
) -> Plan:
    """Load the cluster and plan `operation` (dry run: nothing changes).

    With `traffic_window_s` > 0, each partition's traffic is measured over that window first
    (`strait.balancer.sampler`) and the plan balances broker loads too; disk `classes` place hot
    replicas on SSD dirs (`rebalance` and `drain`), and need a window (10 s unless given), as on
    the command line. Raises `CapacityError` where the plan needs disk sizes the brokers cannot
    tell (dirs sharing one filesystem) and `capacities` does not give them.
    """
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r} (one of {', '.join(OPERATIONS)})")
    if operation in ("drain", "fill") and not brokers:
        raise ValueError(f"{operation} needs the broker ids to {operation}")
    window = (10.0 if classes else 0.0) if traffic_window_s is None else traffic_window_s
    if window < 0:
        raise ValueError(f"the traffic window must be 0 or more seconds, not {window}")
    traffic: Traffic | None = None
    gateway = KafkaGateway(props, capacities)
    try:
        if window > 0:
            model, traffic = sampler.measure(gateway, props, window)
        else:
            model = gateway.load_model()
    finally:
        gateway.close()
    goals = goals or Goals()
    if operation == "drain":
        return operations.drain(model, brokers, goals, traffic, classes)
    if operation == "fill":
        return operations.fill(model, brokers, goals, traffic)
    if operation == "fix-racks":
        return operations.fix_racks(model, goals)
    if operation == "leaders":
        return operations.leaders(model, goals, traffic)
    return operations.rebalance(model, goals, traffic, classes)


def submit(
    props: Mapping[str, Any],
    plan: Plan,
    options: executor.Options | None = None,
    capacities: Capacities | Mapping[str, int] | None = None,
) -> str:
    """Validate and record `plan`, start it in a background process, return the execution id.

    `capacities` (configured disk sizes) are recorded with the plan and held while moves run.
    Raises `ExecutionConflict` if an execution is already running or unfinished, and
    `PlanError`/`StalePlanError` (naming the partition) if the plan does not fit the cluster.
    """
    gateway = KafkaGateway(props, capacities)
    try:
        run = executor.start(gateway, StateStore(props), plan, options or executor.Options())
    finally:
        gateway.close()
    spawn_runner(props, run.id)
    return run.id


def current(props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The latest execution's progress and whether its executor is alive; None if there is none."""
    execution = StateStore(props).current()
    if execution is None:
        return None
    data = executor.snapshot_of(execution).to_dict()
    data.update(
        alive=execution.alive(),
        heartbeat_age=round(time.time() - execution.heartbeat, 1),
        owner=execution.progress.get("owner"),
        cancel_requested=execution.cancel_requested,
    )
    return data


def cancel(props: Mapping[str, Any], *, wait: float = 60.0) -> dict[str, Any] | None:
    """Cancel the current execution (see `executor.cancel`); returns its final progress."""
    gateway = KafkaGateway(props)
    try:
        execution = executor.cancel(gateway, StateStore(props), wait=wait, by="api")
    finally:
        gateway.close()
    return None if execution is None else executor.snapshot_of(execution).to_dict()


def spawn_runner(props: Mapping[str, Any], execution_id: str) -> int:
    """Start `strait.balancer.runner` for `execution_id` in its own session; returns its pid."""
    log_file = Path(tempfile.gettempdir()) / f"strait-balance-{execution_id}.log"
    with log_file.open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "strait.balancer.runner", "--execution", execution_id],
            # Cluster properties may hold credentials: the environment keeps them out of `ps`.
            env={**os.environ, "STRAIT_BALANCE_PROPS": json.dumps(dict(props))},
            stdout=sink,
            stderr=sink,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid
