"""`strait controller`: run a controller node (leader or standby)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from strait.config import ConfigError, StraitConfig, load_config
from strait.secrets import install_log_redaction


def controller(
    config: Path = typer.Option(..., "--config", "-c", help="Strait YAML configuration file."),
    listen: str | None = typer.Option(
        None, help="host:port for the REST API (overrides controller.listen; port 0 = any free)."
    ),
    controller_id: str | None = typer.Option(
        None, "--id", help="Controller id (default: hostname plus a random suffix)."
    ),
    log_level: str = typer.Option("INFO", help="Python log level."),
) -> None:
    """Run a controller: one of them leads (ZooKeeper election), the others stand by."""
    from strait.controller.server import serve

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_redaction()
    serve(load_or_exit(config), controller_id=controller_id, listen=listen)


def load_or_exit(path: Path) -> StraitConfig:
    """The configuration, or exit 2 with the message naming the bad key."""
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
