"""`strait worker`: run a worker (several may run on one host with different ids)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from strait import logformat
from strait.cli.controller import load_or_exit
from strait.cli.log_options import LOG_FORMAT
from strait.config import StraitConfig, WorkerConfig
from strait.metrics.exposition import require_token


def worker(
    config: Path = typer.Option(..., "--config", "-c", help="Strait YAML configuration file."),
    worker_id: str | None = typer.Option(None, "--id", help="Worker id, unique in the fleet (default: hostname)."),
    pool: str | None = typer.Option(
        None, "--pool", help="Worker pool to join (default: worker.pool of the config, else 'default')."
    ),
    log_level: str = typer.Option("INFO", help="Python log level."),
    log_format: Annotated[logformat.LogFormat, LOG_FORMAT] = logformat.LogFormat.text,
) -> None:
    """Copy the partitions the controller assigns to this worker; SIGTERM drains and leaves."""
    from strait.worker.process import run_worker

    logformat.configure(log_level, log_format)  # secrets masked in either format
    settings = load_or_exit(config)
    if pool is not None:
        settings = with_pool(settings, pool)
    require_token(settings.observability.metrics_token)  # the worker's /metrics needs it, when set
    run_worker(settings, worker_id or socket.gethostname(), config_path=config, pool=pool)


def with_pool(config: StraitConfig, pool: str) -> StraitConfig:
    """`config` with `worker.pool` set, validated like the file's."""
    try:
        worker = WorkerConfig.model_validate({**config.worker.model_dump(), "pool": pool})
    except ValidationError as exc:
        raise typer.BadParameter(
            f"{pool!r}: " + "; ".join(str(e["msg"]) for e in exc.errors()), param_hint="--pool"
        ) from None
    return config.model_copy(update={"worker": worker})
