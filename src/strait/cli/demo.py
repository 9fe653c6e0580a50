"""``strait demo``: Strait's main job on an embedded default."""

from __future__ import annotations

import typer


def demo(
    workers: int = typer.Option(2, help="Worker processes to start."),
    topics: int = typer.Option(3, help="Topics the generator produces to and the demo adds for replication."),
) -> None:
    """Bring up a sandbox (src, dst), a controller and workers, generate data, add topics over REST,
    and show records copied and lag live until Ctrl-C; then stop everything."""
    import strait.demo as runner

    raise typer.Exit(runner.run(workers=workers, topics=topics))
