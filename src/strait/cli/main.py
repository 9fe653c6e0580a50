"""The ``strait`` command."""

from __future__ import annotations

import typer

from strait.cli import (
    balance,
    bench,
    controller,
    coordination,
    demo,
    failover,
    sandbox,
    status,
    topics,
    worker,
    workers,
)
from strait.version import package_version, version_line

__all__ = ["app", "main", "package_version"]

app = typer.Typer(
    help="Strait: replicate Kafka topics between clusters and keep each cluster's disks balanced.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print Strait's version and the commit it was built from, and exit.",
    ),
) -> None:
    """Strait: replicate Kafka topics between clusters and keep each cluster's disks balanced."""


app.add_typer(sandbox.app, name="sandbox")
app.command("demo")(demo.demo)
app.command("controller")(controller.controller)
app.command("worker")(worker.worker)
app.add_typer(topics.app, name="topics")
app.add_typer(workers.app, name="workers")
app.command("status")(status.status)
app.command("failover")(failover.failover)
app.add_typer(balance.app, name="balance")
app.add_typer(bench.app, name="bench")
app.add_typer(coordination.app, name="coordination")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
