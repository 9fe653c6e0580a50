"""`strait workers list|drain`: see and drain workers through the controller's API."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from strait.cli.topics import API_OPTION, CONFIG_OPTION, TOKEN_OPTION, api_call

app = typer.Typer(help="List and drain replication workers.", no_args_is_help=True)


@app.command("list")
def list_workers(
    config: Path | None = CONFIG_OPTION,
    api: str | None = API_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """List workers with their lifecycle state and partitions."""
    rows = api_call(config, api, token, "GET", "/workers")
    table = Table("id", "state", "pool", "host", "partitions", "records copied", "lag")
    for row in rows:
        table.add_row(
            row["id"],
            row["state"],
            row.get("pool", "default"),
            row["host"],
            str(len(row["partitions"])),
            str(row["records_copied"]),
            str(row["lag"]),
        )
    Console().print(table)


@app.command("drain")
def drain(
    worker_id: str,
    config: Path | None = CONFIG_OPTION,
    api: str | None = API_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Hand WORKER_ID's partitions to the other workers, then let it leave."""
    api_call(config, api, token, "POST", f"/workers/{worker_id}/drain")
    typer.echo(f"draining {worker_id}")
