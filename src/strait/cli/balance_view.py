"""``strait balance``: how plans and executions are shown (tables, progress bar, JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from strait.balancer import executor as execution
from strait.balancer.goals import leader_counts
from strait.balancer.model import ClusterModel
from strait.balancer.plan import InterBrokerMove, Plan, apply
from strait.balancer.traffic import RESOURCE_TITLES, RESOURCES
from strait.balancer.units import human
from strait.cli.balance_args import out


def show_plan(model: ClusterModel, plan: Plan, *, as_json: bool, out_file: Path | None, limit: int = 30) -> None:
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
    _show_traffic(plan)
    disks = Table(title="disks (before -> after)")
    for col in ("broker", "log dir", "capacity", "sized by", "usage"):
        disks.add_column(col, justify="left" if col in ("log dir", "sized by") else "right")
    for d in model.all_dirs():
        new = after.log_dir(d.broker, d.path)
        ratio1 = new.ratio if new is not None else 0.0
        sized_by = "rule" if d.configured else "broker"
        disks.add_row(str(d.broker), d.path, human(d.capacity), sized_by, f"{d.ratio:.1%} -> {ratio1:.1%}")
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


def _show_traffic(plan: Plan) -> None:
    """Per broker, each traffic resource before -> after (bytes/s), when the plan measured traffic."""
    per_broker = plan.stats.get("traffic_brokers")
    if not per_broker:
        return
    window = plan.stats.get("traffic_window_s", 0)
    table = Table(title=f"traffic per broker, per second, measured over {window:g}s (before -> after)")
    table.add_column("broker", justify="right")
    for res in RESOURCES:
        table.add_column(RESOURCE_TITLES[res], justify="right")
    brokers = sorted({int(b) for res in RESOURCES for b in per_broker.get(res, {})})
    for b in brokers:
        cells = []
        for res in RESOURCES:
            old, new = per_broker.get(res, {}).get(str(b), (0.0, 0.0))
            cells.append(f"{human(int(old))} -> {human(int(new))}")
        table.add_row(str(b), *cells)
    before, after = plan.stats.get("traffic_spread_before", {}), plan.stats.get("traffic_spread_after", {})
    table.caption = "max-min: " + ", ".join(
        f"{RESOURCE_TITLES[r]} {human(int(before.get(r, 0)))} -> {human(int(after.get(r, 0)))}" for r in RESOURCES
    )
    out.print(table)


def drive(runner: execution.Executor, *, as_json: bool) -> int:
    if as_json:
        final = runner.run()
    else:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} moves"),
            TextColumn("{task.fields[flight]} in flight"),
            TextColumn("{task.fields[waiting]}"),
            TextColumn("{task.fields[bytes]}"),
            TimeElapsedColumn(),
            console=out,
        ) as bar:
            task = bar.add_task(f"execution {runner.id}", total=len(runner.plan.moves), flight=0, waiting="", bytes="")

            def tick(s: execution.Snapshot) -> None:
                bar.update(
                    task,
                    completed=s.done + s.failed,
                    flight=s.in_flight,
                    waiting=f"{s.waiting} waiting for disk room" if s.waiting else "",
                    bytes=f"{human(s.bytes_done)} / {human(s.bytes_total)}",
                )

            try:
                final = runner.run(tick)
            except KeyboardInterrupt:
                out.print("interrupted: cancelling the moves in flight")
                runner.request_cancel()
                final = runner.run(tick)
    show_snapshot(final, as_json=as_json)
    return 1 if final.failed or final.status == "failed" else 0


def show_snapshot(s: execution.Snapshot, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(s.to_dict(), sort_keys=True))
        return
    table = Table(title=f"execution {s.execution_id}: {s.status}")
    for col in ("moves", "done", "failed", "in flight", "pending", "waiting for room", "bytes done"):
        table.add_column(col, justify="right")
    table.add_row(
        str(s.total),
        str(s.done),
        str(s.failed),
        str(s.in_flight),
        str(s.pending),
        str(s.waiting),
        f"{human(s.bytes_done)} / {human(s.bytes_total)}",
    )
    out.print(table)
    trouble = {
        k: v
        for k, v in s.moves.items()
        if v.get("state") in ("failed", "skipped")
        or v.get("warning")
        or (v.get("state") == "pending" and v.get("waiting"))
    }
    if trouble:
        detail = Table(title="moves needing attention")
        for col in ("move", "state", "reason"):
            detail.add_column(col)
        for k, v in sorted(trouble.items()):
            state = "waiting" if v.get("state") == "pending" and v.get("waiting") else str(v.get("state"))
            detail.add_row(k, state, str(v.get("error") or v.get("warning") or v.get("waiting") or ""))
        out.print(detail)
