"""``strait balance``: plan and run disk- and rack-aware partition moves on one cluster.

Dry run is the default: `plan`, `drain`, `fill`, `fix-racks` and `leaders` only print what they
would do unless given `--execute`; `execute` runs a saved plan (`--plan FILE`) or a fresh
rebalance. Execution state lives in the cluster, so `status` and `cancel` work from anywhere
with just `--bootstrap`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from strait.balancer import executor as execution
from strait.balancer import operations
from strait.balancer.errors import BalanceError
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals, leader_counts
from strait.balancer.model import ClusterModel
from strait.balancer.plan import InterBrokerMove, Plan, apply
from strait.balancer.service import spawn_runner
from strait.balancer.state import StateStore
from strait.balancer.units import human, parse_bytes
from strait.balancer.window import Caps

app = typer.Typer(
    help="Balance disks, brokers, racks and leaders of one cluster by moving partitions.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)

BOOTSTRAP = typer.Option(None, "--bootstrap", "-b", help="Kafka bootstrap servers, host:port[,host:port].")
CLUSTER = typer.Option(None, "--cluster", help="Cluster name from the configuration file (instead of --bootstrap).")
CONFIG = typer.Option(None, "--config", "-c", help="Strait configuration file (for --cluster).")
CAPACITY = typer.Option(
    None,
    "--capacity",
    help="Disk size where the broker cannot tell it (or all dirs share one filesystem): "
    "'*=100GB', '/data/d1=2TB' or '3:/data/d1=2TB'. Repeatable.",
)
THRESHOLD = typer.Option(0.10, help="Allowed max-min spread of disk usage ratios (0.10 = 10 points).")
CAPACITY_LIMIT = typer.Option(0.90, help="No move may fill a disk past this fraction of its capacity.")
NO_LEADERS = typer.Option(False, "--no-leaders", help="Do not even out preferred leaders.")
JSON = typer.Option(False, "--json", help="Print one JSON object instead of tables.")
OUT = typer.Option(None, "--out", help="Also write the plan as JSON to this file.")
EXECUTE = typer.Option(False, "--execute", help="Run the plan now (default: only show it).")
THROTTLE = typer.Option(None, "--throttle", help="Replication throttle per broker, e.g. 50KB or 20MB (bytes/s).")
MODE = typer.Option("pipeline", "--mode", help="pipeline (sliding window) or batch (wait for each batch).")
DETACH = typer.Option(False, "--detach", help="Start the run in the background and return at once.")
MAX_IN_FLIGHT = typer.Option(8, "--max-in-flight", help="Moves in flight at once (batch size in batch mode).")
MAX_BROKER_IN = typer.Option(2, "--max-broker-in", help="Moves copying into one broker at once.")
MAX_BROKER_OUT = typer.Option(2, "--max-broker-out", help="Moves taking a replica off one broker at once.")
MAX_DISK = typer.Option(2, "--max-disk", help="Moves reading or writing one disk at once.")


class CliError(Exception):
    """A user-facing failure: printed as `error: ...`, exit code 2."""


def _guard(fn: Callable[[], int | None]) -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.ERROR)
    try:
        code = fn()
    except (BalanceError, CliError, ValueError, OSError) as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from exc
    if code:
        raise typer.Exit(code)


def _props(bootstrap: str | None, cluster: str | None, config: Path | None) -> dict[str, Any]:
    if bootstrap:
        return {"bootstrap.servers": bootstrap}
    if cluster and config:
        from strait.config import load_config

        loaded = load_config(config)
        if cluster not in loaded.clusters:
            raise CliError(f"cluster {cluster!r} is not in {config} (clusters: {', '.join(sorted(loaded.clusters))})")
        return dict(loaded.clusters[cluster])
    raise CliError("say which cluster: --bootstrap HOST:PORT, or --cluster NAME with --config FILE")


def _capacities(values: list[str] | None) -> dict[str, int]:
    result: dict[str, int] = {}
    for item in values or []:
        key, sep, amount = item.rpartition("=")
        if not sep or not key:
            raise CliError(f"--capacity {item!r}: expected KEY=SIZE, e.g. '*=100GB'")
        try:
            result[key] = parse_bytes(amount)
        except ValueError as exc:
            raise CliError(f"--capacity {item!r}: {exc}") from exc
    return result


def _rate(throttle: str | None) -> int | None:
    if throttle is None:
        return None
    try:
        return parse_bytes(throttle)
    except ValueError as exc:
        raise CliError(f"--throttle: {exc}") from exc


def _goals(threshold: float, capacity_limit: float, no_leaders: bool) -> Goals:
    return Goals(threshold=threshold, capacity_limit=capacity_limit, leaders=not no_leaders)


# ---- showing plans ------------------------------------------------------------------------------


def _show_plan(model: ClusterModel, plan: Plan, *, as_json: bool, out_file: Path | None, limit: int = 30) -> None:
    if out_file is not None:
        out_file.write_text(plan.to_json() + "\n")
    if as_json:
        typer.echo(plan.to_json())
        return
    after = apply(model, plan.moves)
    before_leaders, after_leaders = leader_counts(model), leader_counts(after)
    brokers = Table(title=f"{plan.operation}: brokers (before -> after)")
    for col in ("broker", "rack", "used", "usage", "leaders"):
        brokers.add_column(col, justify="right" if col != "rack" else "left")
    for b, broker in model.brokers.items():
        used0 = sum(d.used for d in model.log_dirs[b])
        used1 = sum(d.used for d in after.log_dirs[b])
        cap = sum(d.capacity for d in model.log_dirs[b]) or 1
        brokers.add_row(
            str(b),
            broker.rack or "-",
            f"{human(used0)} -> {human(used1)}",
            f"{used0 / cap:.1%} -> {used1 / cap:.1%}",
            f"{before_leaders.get(b, 0)} -> {after_leaders.get(b, 0)}",
        )
    out.print(brokers)
    disks = Table(title="disks (before -> after)")
    for col in ("broker", "log dir", "capacity", "usage"):
        disks.add_column(col, justify="left" if col == "log dir" else "right")
    for d in model.all_dirs():
        new = after.log_dir(d.broker, d.path)
        ratio1 = new.ratio if new is not None else 0.0
        disks.add_row(str(d.broker), d.path, human(d.capacity), f"{d.ratio:.1%} -> {ratio1:.1%}")
    out.print(disks)
    moves = Table(title=f"moves ({len(plan.moves)}, {human(plan.bytes)})")
    for col in ("kind", "partition", "from", "to", "bytes"):
        moves.add_column(col)
    for m in sorted(plan.moves, key=lambda m: (-m.bytes, m.id))[:limit]:
        if isinstance(m, InterBrokerMove):
            src, dst = str(list(m.source)), str(list(m.target))
        else:
            src, dst = f"{m.broker}:{m.source_dir}", f"{m.broker}:{m.target_dir}"
        moves.add_row(m.kind, f"{m.topic}-{m.partition}", src, dst, human(m.bytes))
    if len(plan.moves) > limit:
        moves.caption = f"{len(plan.moves) - limit} smaller moves not shown (use --json or --out)"
    out.print(moves)
    s = plan.stats
    out.print(
        f"spread {s.get('spread_before', 0):.3f} -> {s.get('spread_after', 0):.3f} "
        f"(threshold {plan.goals.get('threshold')}), bytes to move {human(plan.bytes)}"
        + (f", lower bound {human(s['min_bytes'])}" if s.get("min_bytes") else "")
    )
    for w in plan.warnings:
        out.print(f"[yellow]warning:[/yellow] {w}")
    if not plan.moves:
        out.print("nothing to do: the cluster already meets the goals")


# ---- running ------------------------------------------------------------------------------------


def _options(mode: str, throttle: str | None, caps: tuple[int, int, int, int]) -> execution.Options:
    if mode not in ("pipeline", "batch"):
        raise CliError(f"--mode must be pipeline or batch, not {mode!r}")
    in_flight, broker_in, broker_out, disk = caps
    return execution.Options(
        mode=mode,
        throttle=_rate(throttle),
        caps=Caps(in_flight=in_flight, broker_in=broker_in, broker_out=broker_out, disk=disk),
    )


def _run(
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
    return _drive(runner, as_json=as_json)


def _drive(runner: execution.Executor, *, as_json: bool) -> int:
    if as_json:
        final = runner.run()
    else:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} moves"),
            TextColumn("{task.fields[flight]} in flight"),
            TextColumn("{task.fields[bytes]}"),
            TimeElapsedColumn(),
            console=out,
        ) as bar:
            task = bar.add_task(f"execution {runner.id}", total=len(runner.plan.moves), flight=0, bytes="")

            def tick(s: execution.Snapshot) -> None:
                bar.update(
                    task,
                    completed=s.done + s.failed,
                    flight=s.in_flight,
                    bytes=f"{human(s.bytes_done)} / {human(s.bytes_total)}",
                )

            try:
                final = runner.run(tick)
            except KeyboardInterrupt:
                out.print("interrupted: cancelling the moves in flight")
                runner.request_cancel()
                final = runner.run(tick)
    _show_snapshot(final, as_json=as_json)
    return 1 if final.failed or final.status == "failed" else 0


def _show_snapshot(s: execution.Snapshot, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(s.to_dict(), sort_keys=True))
        return
    table = Table(title=f"execution {s.execution_id}: {s.status}")
    for col in ("moves", "done", "failed", "in flight", "pending", "bytes done"):
        table.add_column(col, justify="right")
    table.add_row(
        str(s.total),
        str(s.done),
        str(s.failed),
        str(s.in_flight),
        str(s.pending),
        f"{human(s.bytes_done)} / {human(s.bytes_total)}",
    )
    out.print(table)
    trouble = {k: v for k, v in s.moves.items() if v.get("state") in ("failed", "skipped") or v.get("warning")}
    if trouble:
        detail = Table(title="moves needing attention")
        for col in ("move", "state", "reason"):
            detail.add_column(col)
        for k, v in sorted(trouble.items()):
            detail.add_row(k, str(v.get("state")), str(v.get("error") or v.get("warning") or ""))
        out.print(detail)


# ---- commands -----------------------------------------------------------------------------------


def _planning_command(
    operation: Callable[[ClusterModel, Goals], Plan],
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
) -> int:
    props = _props(bootstrap, cluster, config)
    options = _options(mode, throttle, caps) if execute else None
    gateway = KafkaGateway(props, _capacities(capacity))
    try:
        model = gateway.load_model()
        plan = operation(model, goals)
        if not (execute and as_json):
            _show_plan(model, plan, as_json=as_json, out_file=out_file)
        elif out_file is not None:
            out_file.write_text(plan.to_json() + "\n")
        if options is None:
            return 0
        return _run(props, gateway, plan, options, detach=detach, as_json=as_json)
    finally:
        gateway.close()


@app.command("plan")
def plan_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    threshold: float = THRESHOLD,
    capacity_limit: float = CAPACITY_LIMIT,
    no_leaders: bool = NO_LEADERS,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
) -> None:
    """Plan a rebalance (racks first, then disks of all brokers, then leaders) and show it."""
    goals = _goals(threshold, capacity_limit, no_leaders)
    _guard(
        lambda: _planning_command(
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
    threshold: float = THRESHOLD,
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
) -> None:
    """Run a plan to the end with a progress bar; exit 1 if any move failed."""

    def go() -> int:
        props = _props(bootstrap, cluster, config)
        caps = (max_in_flight, max_broker_in, max_broker_out, max_disk)
        options = _options(mode, throttle, caps)
        plan: Plan | None = None
        if plan_file is not None:
            # A malformed plan is refused before anything connects to the cluster.
            try:
                text = plan_file.read_text()
            except OSError as exc:
                raise CliError(f"cannot read plan {plan_file}: {exc.strerror}") from exc
            plan = Plan.from_json(text)
        gateway = KafkaGateway(props, _capacities(capacity))
        try:
            if resume:
                store = StateStore(props)
                runner = execution.resume(gateway, store)
                if detach:
                    pid = spawn_runner(props, runner.id)
                    out.print(f"execution {runner.id} resumed in the background (pid {pid})")
                    return 0
                return _drive(runner, as_json=as_json)
            if plan is None:
                plan = operations.rebalance(gateway.load_model(), _goals(threshold, capacity_limit, no_leaders))
            return _run(props, gateway, plan, options, detach=detach, as_json=as_json)
        finally:
            gateway.close()

    _guard(go)


@app.command("status")
def status_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    as_json: bool = JSON,
) -> None:
    """Show the latest execution on the cluster (from the cluster's own state topic)."""

    def go() -> int:
        store = StateStore(_props(bootstrap, cluster, config))
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
        _show_snapshot(snap, as_json=False)
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

    _guard(go)


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
        props = _props(bootstrap, cluster, config)
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
        _show_snapshot(execution.snapshot_of(result), as_json=as_json)
        return 0

    _guard(go)


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
    threshold: float = THRESHOLD,
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
) -> None:
    """Move every replica off BROKERS (e.g. before decommissioning them)."""
    goals = _goals(threshold, capacity_limit, no_leaders)
    _guard(
        lambda: _planning_command(
            lambda m, g: operations.drain(m, _targets(brokers, "drain"), g),
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
        )
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
) -> None:
    """Move a fair share of data onto BROKERS, and nothing else."""
    goals = _goals(threshold, capacity_limit, True)
    _guard(
        lambda: _planning_command(
            lambda m, g: operations.fill(m, _targets(brokers, "fill"), g),
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
        )
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
) -> None:
    """Move replicas so no two replicas of a partition share a rack (as far as racks allow)."""
    goals = _goals(0.10, capacity_limit, True)
    _guard(
        lambda: _planning_command(
            operations.fix_racks,
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
        )
    )


@app.command("leaders")
def leaders_cmd(
    bootstrap: str | None = BOOTSTRAP,
    cluster: str | None = CLUSTER,
    config: Path | None = CONFIG,
    capacity: list[str] | None = CAPACITY,
    as_json: bool = JSON,
    out_file: Path | None = OUT,
    execute: bool = EXECUTE,
) -> None:
    """Even out preferred leaders (reorder replica lists, no data copied), then elect them."""
    _guard(
        lambda: _planning_command(
            operations.leaders,
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
        )
    )
