"""``strait balance``: loading a cluster (and its traffic), planning, and running a plan."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from strait.balancer import executor as execution
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel
from strait.balancer.plan import Plan
from strait.balancer.sampler import measure
from strait.balancer.service import spawn_runner
from strait.balancer.state import StateStore
from strait.balancer.tiers import DiskClasses
from strait.balancer.traffic import Traffic
from strait.cli.balance_args import Target, out, target, traffic_window
from strait.cli.balance_args import options as make_options
from strait.cli.balance_view import drive, show_plan

# ---- running ------------------------------------------------------------------------------------


def run(
    props: dict[str, Any],
    gateway: KafkaGateway,
    plan: Plan,
    options: execution.Options,
    *,
    detach: bool,
    as_json: bool,
) -> int:
    if not plan.moves:
        if as_json:
            typer.echo(json.dumps({"status": "done", "moves": 0}))
        else:
            out.print("nothing to do: the plan has no moves")
        return 0
    store = StateStore(props)
    runner = execution.start(gateway, store, plan, options)
    if detach:
        pid = spawn_runner(props, runner.id)
        if as_json:
            typer.echo(json.dumps({"execution": runner.id, "pid": pid, "status": "started"}))
        else:
            out.print(
                f"execution {runner.id} started in the background (pid {pid}); "
                "follow it with `strait balance status`, stop it with `strait balance cancel`"
            )
        return 0
    return drive(runner, as_json=as_json)


Operation = Callable[[ClusterModel, Goals, Traffic | None, DiskClasses], Plan]


def load(
    gateway: KafkaGateway, where: Target, window: float | None, *, quiet: bool
) -> tuple[ClusterModel, Traffic | None]:
    """The model, and the traffic measured over the window when there is one."""
    seconds = traffic_window(window, where.classes)
    if seconds <= 0:
        return gateway.load_model(), None
    if not quiet:
        out.print(f"measuring traffic for {seconds:g}s (log-end offsets, sizes, committed offsets)")
    return measure(gateway, where.props, seconds)


def planning_command(
    operation: Operation,
    bootstrap: str | None,
    cluster: str | None,
    config: Path | None,
    capacity: list[str] | None,
    goals: Goals,
    as_json: bool,
    out_file: Path | None,
    execute: bool,
    throttle: str | None,
    mode: str,
    detach: bool,
    caps: tuple[int, int, int, int],
    disk_class: list[str] | None = None,
    window: float | None = 0.0,
) -> int:
    where = target(bootstrap, cluster, config, capacity, disk_class)
    props = where.props
    options = make_options(mode, throttle, caps) if execute else None
    gateway = KafkaGateway(props, where.capacities)
    try:
        model, traffic = load(gateway, where, window, quiet=as_json)
        plan = operation(model, goals, traffic, where.classes)
        if not (execute and as_json):
            show_plan(model, plan, as_json=as_json, out_file=out_file)
        elif out_file is not None:
            out_file.write_text(plan.to_json() + "\n")
        if options is None:
            return 0
        return run(props, gateway, plan, options, detach=detach, as_json=as_json)
    finally:
        gateway.close()
