"""`strait controller`: run a controller node (leader or standby)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strait import logformat
from strait.cli.log_options import LOG_FORMAT
from strait.config import ConfigError, StraitConfig, load_config


def controller(
    config: Path = typer.Option(..., "--config", "-c", help="Strait YAML configuration file."),
    listen: str | None = typer.Option(
        None, help="host:port for the REST API (overrides controller.listen; port 0 = any free)."
    ),
    controller_id: str | None = typer.Option(
        None, "--id", help="Controller id (default: hostname plus a random suffix)."
    ),
    log_level: str = typer.Option("INFO", help="Python log level."),
    log_format: Annotated[logformat.LogFormat, LOG_FORMAT] = logformat.LogFormat.text,
) -> None:
    """Run a controller: one of them leads (ZooKeeper election), the others stand by."""
    from strait.controller.server import serve

    logformat.configure(log_level, log_format)  # secrets masked in either format
    serve(load_or_exit(config), controller_id=controller_id, listen=listen, config_path=config)


def load_or_exit(path: Path) -> StraitConfig:
    """The configuration, or exit 2 with the message naming the bad key."""
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
