"""``strait balance``: plan and run disk- and rack-aware partition moves on one cluster.

Dry run is the default: `plan`, `drain`, `fill`, `fix-racks` and `leaders` only print what they
would do unless given `--execute`; `execute` runs a saved plan (`--plan FILE`) or a fresh
rebalance. Execution state lives in the cluster, so `status` and `cancel` work from anywhere
with just `--bootstrap`. Disk capacities come from `--capacity` and from `balance.capacities`
in the configuration file (`--cluster NAME --config FILE`), the flags overriding the file; disk
classes (tiers) likewise from `--disk-class` and `balance.disk_classes`. With `--traffic-window`
each partition's write and read rates are measured first (`strait.balancer.sampler`).

Shared options and their parsing are in `balance_args`, tables and progress in `balance_view`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from strait.balancer import executor as execution
from strait.balancer import operations
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals
from strait.balancer.plan import Plan
from strait.balancer.service import spawn_runner
from strait.balancer.state import StateStore
from strait.cli.balance_args import (
    BOOTSTRAP,
    CAPACITY,
    CAPACITY_LIMIT,
    CLUSTER,
    CONFIG,
    DETACH,
    DISK_CLASS,
    EXECUTE,
    JSON,
    MAX_BROKER_IN,
    MAX_BROKER_OUT,
    MAX_DISK,
    MAX_IN_FLIGHT,
    MODE,
    NO_LEADERS,
    OUT,
    THRESHOLD,
    THROTTLE,
    TRAFFIC_THRESHOLD,
    TRAFFIC_WINDOW,
    CliError,
    guard,
    out,
    target,
)
from strait.cli.balance_args import goals as make_goals
from strait.cli.balance_args import options as make_options
from strait.cli.balance_planning import load, planning_command, run
from strait.cli.balance_view import drive, show_snapshot
from strait.cli.log_options import LOG_FORMAT
from strait.logformat import LogFormat

app = typer.Typer(
    help="Balance disks, brokers, racks and leaders of one cluster by moving partitions.",
    no_args_is_help=True,
)


@app.command("plan")
def plan_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    disk_class: list[str] | None = DISK_CLASS,
    traffic_window_s: float | None = TRAFFIC_WINDOW,
    threshold: float = THRESHOLD,
    traffic_threshold: float = TRAFFIC_THRESHOLD,
    capacity_limit: float = CAPACITY_LIMIT,
    no_leaders: bool = NO_LEADERS,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
) -> None:
    """Plan a rebalance and show it, per broker, before -> after: disk, and with a traffic window
    net in, net out and leader bytes in.

    Priorities: racks, capacity limit, disk spread, network in, leaders (counts, then leader bytes
    in), tiers (hot replicas on SSD dirs). Refused (exit 2) where dirs of a broker report one
    filesystem and no capacities size them.
    """
    goals = make_goals(threshold, capacity_limit, no_leaders, traffic_threshold)
    guard(
        lambda: planning_command(
            operations.rebalance,
            bootstrap,
            cluster,
            config,
            capacity,
            goals,
            as_json,
            out_file,
            False,
            None,
            "pipeline",
            False,
            (8, 2, 2, 2),
            disk_class,
            traffic_window_s,
        )
    )


@app.command("execute")
def execute_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    plan_file: Path | None = typer.Option(None, "--plan", help="A plan written by `plan --out` (default: plan now)."),
    resume: bool = typer.Option(False, "--resume", help="Carry on the unfinished execution recorded in the cluster."),
    capacity: list[str] | None = CAPACITY,
    disk_class: list[str] | None = DISK_CLASS,
    traffic_window_s: float | None = TRAFFIC_WINDOW,
    threshold: float = THRESHOLD,
    traffic_threshold: float = TRAFFIC_THRESHOLD,
    capacity_limit: float = CAPACITY_LIMIT,
    no_leaders: bool = NO_LEADERS,
    throttle: str | None = THROTTLE,
    mode: str = MODE,
    detach: bool = DETACH,
    max_in_flight: int = MAX_IN_FLIGHT,
    max_broker_in: int = MAX_BROKER_IN,
    max_broker_out: int = MAX_BROKER_OUT,
    max_disk: int = MAX_DISK,
    as_json: bool = JSON,
    log_format: Annotated[LogFormat, LOG_FORMAT] = LogFormat.text,
) -> None:
    """Run a plan to the end with a progress bar; exit 1 if any move failed.

    A move starts only when its destination disks have room for it (the plan's capacities and
    capacity limit; capacities configured now win); until then it waits, and `status` says why.
    """

    def go() -> int:
        where = target(bootstrap, cluster, config, capacity, disk_class)
        props = where.props
        caps = (max_in_flight, max_broker_in, max_broker_out, max_disk)
        options = make_options(mode, throttle, caps)
        plan: Plan | None = None
        if plan_file is not None:
            # A malformed plan is refused before anything connects to the cluster.
            try:
                text = plan_file.read_text()
            except OSError as exc:
                raise CliError(f"cannot read plan {plan_file}: {exc.strerror}") from exc
            plan = Plan.from_json(text)
        gateway = KafkaGateway(props, where.capacities)
        try:
            if resume:
                store = StateStore(props)
                runner = execution.resume(gateway, store)
                if detach:
                    pid = spawn_runner(props, runner.id)
                    out.print(f"execution {runner.id} resumed in the background (pid {pid})")
                    return 0
                return drive(runner, as_json=as_json)
            if plan is None:
                model, traffic = load(gateway, where, traffic_window_s, quiet=as_json)
                goals = make_goals(threshold, capacity_limit, no_leaders, traffic_threshold)
                plan = operations.rebalance(model, goals, traffic, where.classes)
            return run(props, gateway, plan, options, detach=detach, as_json=as_json)
        finally:
            gateway.close()

    guard(go, log_format)


@app.command("status")
def status_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    as_json: bool = JSON,
) -> None:
    """Show the latest execution on the cluster (from the cluster's own state topic)."""

    def go() -> int:
        store = StateStore(target(bootstrap, cluster, config).props)
        current = store.current()
        if current is None:
            if as_json:
                typer.echo(json.dumps({"status": "none"}))
            else:
                out.print("no execution recorded on this cluster")
            return 0
        snap = execution.snapshot_of(current)
        if as_json:
            data = snap.to_dict()
            data.update(
                alive=current.alive(),
                heartbeat_age=round(time.time() - current.heartbeat, 1),
                owner=current.progress.get("owner"),
                cancel_requested=current.cancel_requested,
            )
            typer.echo(json.dumps(data, sort_keys=True))
            return 0
        show_snapshot(snap, as_json=False)
        if not current.finished():
            age = time.time() - current.heartbeat
            who = current.progress.get("owner", "?")
            state = (
                f"alive ({who}, heartbeat {age:.0f}s ago)"
                if current.alive()
                else (f"executor gone (last heartbeat {age:.0f}s ago): run `execute --resume` or `cancel`")
            )
            out.print(f"executor: {state}")
        return 0

    guard(go)


@app.command("cancel")
def cancel_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    wait: float = typer.Option(60.0, help="Seconds to wait for a live executor before taking over."),
    as_json: bool = JSON,
) -> None:
    """Stop the window and cancel moves in flight (both kinds); remove our throttles."""

    def go() -> int:
        props = target(bootstrap, cluster, config).props
        gateway = KafkaGateway(props)
        try:
            result = execution.cancel(gateway, StateStore(props), wait=wait)
        finally:
            gateway.close()
        if result is None:
            if as_json:
                typer.echo(json.dumps({"status": "none"}))
            else:
                out.print("no execution recorded on this cluster")
            return 0
        show_snapshot(execution.snapshot_of(result), as_json=as_json)
        return 0

    guard(go)


def _targets(brokers: list[int], what: str) -> list[int]:
    if not brokers:
        raise CliError(f"name at least one broker to {what}")
    return brokers


@app.command("drain")
def drain_cmd(
    brokers: list[int] = typer.Argument(..., help="Broker ids to empty."),
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    disk_class: list[str] | None = DISK_CLASS,
    traffic_window_s: float | None = TRAFFIC_WINDOW,
    threshold: float = THRESHOLD,
    traffic_threshold: float = TRAFFIC_THRESHOLD,
    capacity_limit: float = CAPACITY_LIMIT,
    no_leaders: bool = NO_LEADERS,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
    execute: bool = EXECUTE,
    throttle: str | None = THROTTLE,
    mode: str = MODE,
    detach: bool = DETACH,
    max_in_flight: int = MAX_IN_FLIGHT,
    max_broker_in: int = MAX_BROKER_IN,
    max_broker_out: int = MAX_BROKER_OUT,
    max_disk: int = MAX_DISK,
    log_format: Annotated[LogFormat, LOG_FORMAT] = LogFormat.text,
) -> None:
    """Move every replica off BROKERS (e.g. before decommissioning them)."""
    goals = make_goals(threshold, capacity_limit, no_leaders, traffic_threshold)
    guard(
        lambda: planning_command(
            lambda m, g, t, c: operations.drain(m, _targets(brokers, "drain"), g, t, c),
            bootstrap,
            cluster,
            config,
            capacity,
            goals,
            as_json,
            out_file,
            execute,
            throttle,
            mode,
            detach,
            (max_in_flight, max_broker_in, max_broker_out, max_disk),
            disk_class,
            traffic_window_s,
        ),
        log_format,
    )


@app.command("fill")
def fill_cmd(
    brokers: list[int] = typer.Argument(..., help="Broker ids to fill (new brokers)."),
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    threshold: float = THRESHOLD,
    capacity_limit: float = CAPACITY_LIMIT,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
    execute: bool = EXECUTE,
    throttle: str | None = THROTTLE,
    mode: str = MODE,
    detach: bool = DETACH,
    max_in_flight: int = MAX_IN_FLIGHT,
    max_broker_in: int = MAX_BROKER_IN,
    max_broker_out: int = MAX_BROKER_OUT,
    max_disk: int = MAX_DISK,
    log_format: Annotated[LogFormat, LOG_FORMAT] = LogFormat.text,
) -> None:
    """Move a fair share of data onto BROKERS, and nothing else."""
    goals = make_goals(threshold, capacity_limit, True)
    guard(
        lambda: planning_command(
            lambda m, g, t, c: operations.fill(m, _targets(brokers, "fill"), g, t),
            bootstrap,
            cluster,
            config,
            capacity,
            goals,
            as_json,
            out_file,
            execute,
            throttle,
            mode,
            detach,
            (max_in_flight, max_broker_in, max_broker_out, max_disk),
        ),
        log_format,
    )


@app.command("fix-racks")
def fix_racks_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    capacity_limit: float = CAPACITY_LIMIT,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
    execute: bool = EXECUTE,
    throttle: str | None = THROTTLE,
    mode: str = MODE,
    detach: bool = DETACH,
    log_format: Annotated[LogFormat, LOG_FORMAT] = LogFormat.text,
) -> None:
    """Move replicas so no two replicas of a partition share a rack (as far as racks allow)."""
    goals = make_goals(0.10, capacity_limit, True)
    guard(
        lambda: planning_command(
            lambda m, g, t, c: operations.fix_racks(m, g),
            bootstrap,
            cluster,
            config,
            capacity,
            goals,
            as_json,
            out_file,
            execute,
            throttle,
            mode,
            detach,
            (8, 2, 2, 2),
        ),
        log_format,
    )


@app.command("leaders")
def leaders_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    traffic_window_s: float | None = TRAFFIC_WINDOW,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
    execute: bool = EXECUTE,
) -> None:
    """Even out preferred leaders (counts, then leader bytes in with a traffic window; replica
    lists reordered, no data copied), then elect them."""
    guard(
        lambda: planning_command(
            lambda m, g, t, c: operations.leaders(m, g, t),
            bootstrap,
            cluster,
            config,
            capacity,
            Goals(),
            as_json,
            out_file,
            execute,
            None,
            "pipeline",
            False,
            (64, 64, 64, 64),
            None,
            traffic_window_s,
        )
    )


@app.command("tiers")
def tiers_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    disk_class: list[str] | None = DISK_CLASS,
    traffic_window_s: float | None = TRAFFIC_WINDOW,
    capacity_limit: float = CAPACITY_LIMIT,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
    execute: bool = EXECUTE,
    throttle: str | None = THROTTLE,
    mode: str = MODE,
    detach: bool = DETACH,
    log_format: Annotated[LogFormat, LOG_FORMAT] = LogFormat.text,
) -> None:
    """Only place replicas by tier: each broker's hottest on its SSD dirs (within their capacity
    budget), the rest on its HDD dirs, by intra-broker moves. Needs disk classes."""
    goals = make_goals(0.10, capacity_limit, True)

    def go() -> int:
        if not target(bootstrap, cluster, config, capacity, disk_class).classes:
            raise CliError("no disk classes: give --disk-class DIR_GLOB=ssd (and =hdd), or balance.disk_classes")
        return planning_command(
            lambda m, g, t, c: operations.tiers(m, t, c, g),
            bootstrap,
            cluster,
            config,
            capacity,
            goals,
            as_json,
            out_file,
            execute,
            throttle,
            mode,
            detach,
            (8, 2, 2, 2),
            disk_class,
            traffic_window_s,
        )

    guard(go, log_format)
