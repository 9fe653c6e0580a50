"""`strait failover`: move a consumer group to a route's destination cluster, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from strait.cli.controller import load_or_exit
from strait.offsetmap import failover as operation


def failover(
    config: Path = typer.Option(..., "--config", "-c", help="Strait YAML configuration file."),
    route: str = typer.Option(..., "--route", help="The route whose destination the group moves to."),
    group: str = typer.Option(..., "--group", help="The consumer group to fail over."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the translation; commit nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
) -> None:
    """Translate GROUP's committed source offsets through the route's offset map and commit them
    for GROUP on the destination cluster (refused while GROUP has members there; offsets only
    move forward). Shows per partition the records not replicated yet: what failing over now
    leaves behind on the source."""
    loaded = load_or_exit(config)
    try:
        partitions = operation.plan(loaded, route, group)
        written = 0 if dry_run else operation.apply(loaded, route, group, partitions)
    except operation.FailoverError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3 if isinstance(exc, operation.GroupActive) else 1) from exc
    if as_json:
        doc = {
            "route": route,
            "group": group,
            "dry_run": dry_run,
            "written": written,
            "partitions": [p.as_dict() for p in partitions],
        }
        typer.echo(json.dumps(doc))
        return
    table = Table(
        "topic",
        "partition",
        "source committed",
        "destination offset",
        "before",
        "not replicated",
        "note",
        title=f"group {group}: route {route}" + (" (dry run)" if dry_run else ""),
    )
    for p in sorted(partitions, key=lambda p: (p.topic, p.partition)):
        table.add_row(
            p.topic if p.topic == p.destination_topic else f"{p.topic} → {p.destination_topic}",
            str(p.partition),
            str(p.source_committed),
            "-" if p.destination_offset is None else str(p.destination_offset),
            "-" if p.destination_before is None else str(p.destination_before),
            str(p.not_replicated),
            p.reason if p.writes or dry_run else f"kept (destination already at {p.destination_before})",
        )
    console = Console()
    console.print(table)
    lag = sum(p.not_replicated for p in partitions)
    if lag:
        console.print(f"[yellow]{lag} record(s) the group consumed on the source are not replicated yet[/yellow]")
    console.print("dry run: nothing committed" if dry_run else f"committed {written} partition offset(s)")
