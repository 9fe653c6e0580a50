"""The ``strait`` command."""

from __future__ import annotations

import typer

from strait.cli import demo, sandbox

app = typer.Typer(
    help="Strait: replicate Kafka topics between clusters and keep each cluster's disks balanced.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(sandbox.app, name="sandbox")
app.command("demo")(demo.demo)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
