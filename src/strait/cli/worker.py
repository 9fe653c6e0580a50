"""`strait worker`: run a worker (several may run on one host with different ids)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import typer

from strait.cli.controller import load_or_exit
from strait.secrets import install_log_redaction


def worker(
    config: Path = typer.Option(..., "--config", "-c", help="Strait YAML configuration file."),
    worker_id: str | None = typer.Option(None, "--id", help="Worker id, unique in the fleet (default: hostname)."),
    log_level: str = typer.Option("INFO", help="Python log level."),
) -> None:
    """Copy the partitions the controller assigns to this worker; SIGTERM drains and leaves."""
    from strait.worker.process import run_worker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_redaction()
    run_worker(load_or_exit(config), worker_id or socket.gethostname())
