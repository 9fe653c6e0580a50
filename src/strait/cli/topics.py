"""`strait topics add|remove|list`: manage replicated topics through the controller's API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from strait.cli.controller import load_or_exit
from strait.web.client import ApiError, ControllerClient

CONFIG_OPTION = typer.Option(None, "--config", "-c", help="Configuration file (for the API address and token).")
API_OPTION = typer.Option(None, "--api", help="Controller API base URL, e.g. http://127.0.0.1:9000.")
TOKEN_OPTION = typer.Option(None, "--token", envvar="STRAIT_API_TOKEN", help="API bearer token.")


def api_call(config: Path | None, api: str | None, token: str | None, method: str, path: str, **kwargs: Any) -> Any:
    """Call the controller API addressed by --api or the config file; exit with its error message."""
    loaded = load_or_exit(config) if config else None
    if api is None:
        if loaded is None:
            typer.echo("error: pass --api URL or --config FILE", err=True)
            raise typer.Exit(2)
        api = loaded.controller.url
    if token is None and loaded is not None:
        token = loaded.controller.api_token
    tls = loaded.controller.tls if loaded is not None else None
    verify = tls.client_verify() if tls is not None else True
    try:
        return ControllerClient(api, token=token, verify=verify).call(method, path, **kwargs)
    except ApiError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


app = typer.Typer(help="Add, remove and list replicated topics.", no_args_is_help=True)


@app.command("add")
def add(
    topic: str,
    route: str | None = typer.Option(None, help="Route (needed when there are several)."),
    destination_topic: str | None = typer.Option(
        None, help="Destination topic name (default: the route's naming; the same name unless it sets one)."
    ),
    start: str | None = typer.Option(None, help="Where partitions without a checkpoint start: earliest|latest."),
    config: Path | None = CONFIG_OPTION,
    api: str | None = API_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Start replicating TOPIC."""
    body = {k: v for k, v in {"route": route, "destination_topic": destination_topic, "start": start}.items() if v}
    result = api_call(config, api, token, "POST", f"/topics/{topic}", json=body or None)
    typer.echo(
        f"{result['route']}: {result['topic']} -> {result['destination_topic']} ({result['partitions']} partitions)"
    )


@app.command("remove")
def remove(
    topic: str,
    route: str | None = typer.Option(None, help="Route (needed when there are several)."),
    config: Path | None = CONFIG_OPTION,
    api: str | None = API_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Stop replicating TOPIC (its partitions are handed over cleanly, then released)."""
    api_call(config, api, token, "DELETE", f"/topics/{topic}", params={"route": route} if route else None)
    typer.echo(f"removed {topic}")


@app.command("list")
def list_topics(
    config: Path | None = CONFIG_OPTION,
    api: str | None = API_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """List replicated topics."""
    rows = api_call(config, api, token, "GET", "/topics")
    table = Table("route", "topic", "destination", "partitions", "state")
    for row in rows:
        table.add_row(row["route"], row["topic"], row["destination_topic"], str(row["partitions"]), row["state"])
    Console().print(table)
