"""`strait coordination migrate`: move a stopped fleet's topics from ZooKeeper to Kafka."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from strait.cli.controller import load_or_exit
from strait.coordination import StoreUnavailable, connect, connect_kafka
from strait.coordination.migrate import MigrationRefused, apply, plan

app = typer.Typer(help="The coordination store: move a fleet from ZooKeeper to Kafka.", no_args_is_help=True)


@app.command("migrate")
def migrate(
    config: Path = typer.Option(..., "--config", "-c", help="The fleet's configuration file (ZooKeeper coordination)."),
    source: str = typer.Option("zookeeper", "--from", help="The store the fleet uses now: zookeeper."),
    target: str = typer.Option("kafka", "--to", help="The store to move to: kafka."),
    cluster: str = typer.Option(..., "--cluster", help="The cluster of `clusters:` to coordinate on."),
    prefix: str = typer.Option("__strait", "--prefix", help="Prefix of the coordination topics."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would move; write nothing."),
) -> None:
    """Copy the replicated topics and removal marks of a stopped fleet from ZooKeeper to Kafka.
    Checkpoints stay where they are (the routes' groups): the fleet started on the new
    configuration resumes where it stopped."""
    if (source, target) != ("zookeeper", "kafka"):
        typer.echo("error: only --from zookeeper --to kafka is supported", err=True)
        raise typer.Exit(2)
    loaded = load_or_exit(config)
    zookeeper = loaded.coordination.zookeeper
    if zookeeper is None:
        typer.echo(f"error: {config} coordinates on Kafka already (coordination.kafka)", err=True)
        raise typer.Exit(2)
    if cluster not in loaded.clusters:
        known = ", ".join(sorted(loaded.clusters))
        typer.echo(f"error: --cluster: unknown cluster {cluster!r} (clusters: {known})", err=True)
        raise typer.Exit(2)
    timeout_s = zookeeper.session_timeout_s
    try:
        old = connect(connect=zookeeper.connect, root=zookeeper.root, session_timeout_s=timeout_s)
        new = connect_kafka(props=loaded.clusters[cluster], prefix=prefix, session_timeout_s=timeout_s)
    except StoreUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    try:
        try:
            moves = plan(old.snapshot(), new.snapshot())
        except MigrationRefused as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        for spec in moves.create:
            typer.echo(f"topic {spec.route}/{spec.topic} -> {spec.destination_topic} ({spec.start})")
        for route, topic in moves.remove:
            typer.echo(f"removed {route}/{topic}")
        for _wanted, there in moves.conflicts:
            typer.echo(f"kept {there.route}/{there.topic}: the Kafka store has it as {there.settings()}")
        typer.echo(
            f"{len(moves.create)} topics, {len(moves.remove)} removal marks to move; "
            f"{len(moves.unchanged)} already there, {len(moves.conflicts)} kept as the Kafka store has them"
        )
        if dry_run:
            return
        apply(moves, new)
    finally:
        old.close()
        new.close()
    section = {"coordination": {"kafka": {"cluster": cluster, "prefix": prefix, "session_timeout_s": timeout_s}}}
    typer.echo("moved. Replace the zookeeper section of the configuration with:\n" + yaml.safe_dump(section))
