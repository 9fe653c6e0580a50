"""The ``strait`` command."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import typer

from strait.cli import balance, bench, controller, demo, failover, sandbox, status, topics, worker, workers

app = typer.Typer(
    help="Strait: replicate Kafka topics between clusters and keep each cluster's disks balanced.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def package_version() -> str:
    """The installed `strait` distribution's version (from its metadata)."""
    try:
        return version("strait")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"strait {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print Strait's version and exit."
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
