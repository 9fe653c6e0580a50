"""What every `strait bench` command shares: its options, the busy-machine check, and the session
that brings a sandbox up, runs a scenario and writes its results."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

_SYSTEMS = typer.Option("strait,mm2", "--systems", help="Comma-separated systems to run: strait, mm2.")
_RESULTS = typer.Option(Path("bench/results"), "--results-dir", help="Where result JSON and PNG files go.")
_MARKDOWN = typer.Option(Path("BENCHMARKS.md"), "--markdown", help="The Markdown report regenerated after a run.")
_WORKDIR = typer.Option(None, "--workdir", help="Sandbox and process logs (default: a new temporary folder).")
_KEEP = typer.Option(False, "--keep", help="Keep the work folder (logs of every process) after the run.")
# Every measured benchmark refuses a busy machine (see _quiet); the load is recorded in its result.
_MAX_LOAD = typer.Option(
    1.0, "--max-load", help="Refuse to start while the 1-minute load average is above this (recorded in the result)."
)
_IGNORE_LOAD = typer.Option(
    False, "--ignore-load", help="Run even on a busy machine (a smoke run: its figures are then not evidence)."
)
_STORE = typer.Option(
    "kafka",
    "--store",
    help="Where Strait's fleet coordinates: kafka (on the destination cluster; the sandbox starts no ZooKeeper) "
    "or zookeeper (a sandbox ZooKeeper).",
)


def _store(store: str) -> str:
    if store not in ("kafka", "zookeeper"):
        raise typer.BadParameter("use kafka or zookeeper", param_hint="--store")
    return store


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _quiet(max_load: float, ignore_load: bool) -> dict[str, Any]:
    """Refuse a busy machine (exit 2, naming the load and the threshold) unless ``ignore_load``;
    what was checked, to record in the result's ``params``."""
    from strait.bench import machine

    try:
        load = machine.check_quiet(None if ignore_load else max_load)
    except machine.MachineBusy as exc:
        typer.echo(f"{exc} (or pass --ignore-load: the figures are then not evidence)", err=True)
        raise typer.Exit(2) from None
    return {"max_load": max_load, "ignore_load": ignore_load, "load_at_check": load}


def _session(
    systems: str,
    results_dir: Path,
    markdown: Path,
    workdir: Path | None,
    keep: bool,
    body: Callable[[Any], list[dict[str, Any]]],
    *,
    max_load: float,
    ignore_load: bool,
    clusters: tuple[tuple[str, ...], dict[str, str]] | None = None,
    store: str = "zookeeper",
    proxied: tuple[str, ...] = (),
) -> None:
    """Sandbox up, run ``body(bench)``, save and plot its results, regenerate the Markdown, tear down.

    Refused on a busy machine (``max_load``, ``ignore_load``: see _quiet), before anything starts.
    ``clusters``: the sandbox's cluster names and their security modes (default src and dst, plaintext).
    ``store``: where Strait's fleet coordinates (kafka: on ``dst``, and the sandbox starts no ZooKeeper).
    ``proxied``: clusters whose brokers get a listener for a proxy in front (``SandboxSpec.proxied``)."""
    from strait.bench import machine, report
    from strait.bench.scenarios import Bench
    from strait.sandbox import Sandbox, SandboxSpec

    unknown = set(_words(systems)) - {"strait", "mm2"}
    if unknown:
        raise typer.BadParameter(
            f"unknown system(s) {', '.join(sorted(unknown))}: use strait, mm2", param_hint="--systems"
        )
    checked = _quiet(max_load, ignore_load)
    root = (workdir or Path(tempfile.mkdtemp(prefix="strait-bench-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    described = machine.describe()
    typer.echo(f"benchmark work folder: {root}")
    started = time.monotonic()
    names, modes = clusters or (("src", "dst"), {})
    spec = SandboxSpec(
        clusters=names,
        brokers=1,
        log_dirs=1,
        state_dir=root / "sandbox",
        security=modes,
        zookeeper=_store(store) == "zookeeper",
        proxied=proxied,
    )
    sandbox = Sandbox.up(spec)
    failed = True
    try:
        bench = Bench(
            sandbox=sandbox, workdir=root / "runs", systems=_words(systems), log=lambda m: typer.echo(m), store=store
        )
        for result in body(bench):
            result.setdefault("params", {}).update(checked)
            # The arguments as given, whether run as `strait bench ...` or `python -m strait.cli.bench ...`.
            args = sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else sys.argv[1:]
            command = " ".join(["strait bench", *args])
            path = report.save(result, results_dir, machine=described, command=command)
            image = report.plot(result, results_dir)
            typer.echo(f"wrote {path}" + (f" and {image}" if image else ""))
        report.write_markdown(results_dir, markdown)
        typer.echo(f"wrote {markdown} ({time.monotonic() - started:.0f}s in all)")
        failed = False
    finally:
        sandbox.down(keep=keep or failed)
        if keep or failed:
            typer.echo(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
