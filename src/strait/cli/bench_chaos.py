"""`strait bench chaos` and `chaos-report`: the seeded fault runs behind RELIABILITY.md."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer

from strait.cli.bench_session import _KEEP, _RESULTS, _WORKDIR


def _duration(text: str) -> float:
    """Seconds from "30m", "90s", "1h" or a plain number of seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a duration: use e.g. 30m, 90s or 1h", param_hint="--duration"
        ) from None


_RELIABILITY = typer.Option(
    Path("RELIABILITY.md"), "--markdown", help="The reliability report regenerated after a run."
)


def chaos(
    duration: str = typer.Option("30m", help="How long faults and load go on: 30m, 180s, 1h."),
    seed: int = typer.Option(1, help="Seed of the fault schedule: the same seed replays the same faults."),
    delivery: str = typer.Option("at-least-once", help="The route's delivery: at-least-once or exactly-once."),
    copy: str | None = typer.Option(None, "--copy", help="The route's copy mode: record or batch (default: its own)."),
    store: str = typer.Option(
        "kafka",
        "--store",
        help="Where the fleet coordinates: kafka (on the destination cluster; its coordination faults kill or "
        "freeze the broker leading a coordination topic) or zookeeper (a sandbox ZooKeeper, killed and restarted).",
    ),
    brokers: int = typer.Option(3, help="Brokers per cluster (broker faults need 3)."),
    workers: int = typer.Option(3, help="Worker processes."),
    controllers: int = typer.Option(2, help="Controller processes."),
    hog: bool = typer.Option(True, "--hog/--no-hog", help="Starve the machine with one busy-loop process per core."),
    rate: float = typer.Option(50.0, help="Steady records/s per partition (bursts come on top)."),
    catchup_timeout: float = typer.Option(300.0, help="Seconds the copy gets to catch up once the load stops."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the result document here."),
    results_dir: Path = _RESULTS,
    markdown: Path = _RELIABILITY,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Faults from a seeded schedule under a CPU hog; every record checked: lost, duplicated, out of order."""
    import json

    from strait.bench import machine
    from strait.bench.chaos import ChaosOptions, run
    from strait.bench.chaos import report as chaos_report

    if delivery not in ("at-least-once", "exactly-once"):
        raise typer.BadParameter("use at-least-once or exactly-once", param_hint="--delivery")
    if copy not in (None, "record", "batch"):
        raise typer.BadParameter("use record or batch", param_hint="--copy")
    if store not in ("kafka", "zookeeper"):
        raise typer.BadParameter("use kafka or zookeeper", param_hint="--store")
    options = ChaosOptions(
        duration_s=_duration(duration),
        seed=seed,
        delivery="exactly-once" if delivery == "exactly-once" else "at-least-once",
        brokers=brokers,
        workers=workers,
        controllers=controllers,
        hog=hog,
        rate_per_partition=rate,
        catchup_timeout_s=catchup_timeout,
        copy=None if copy is None else ("batch" if copy == "batch" else "record"),
        store="zookeeper" if store == "zookeeper" else "kafka",
    )
    root = (workdir or Path(tempfile.mkdtemp(prefix="strait-chaos-"))).resolve()
    typer.echo(f"chaos work folder (sandbox and process logs): {root}")
    described = {
        **machine.describe(),
        "kafka_broker": f"Apache Kafka 4.4.0 (KRaft, {brokers} brokers per cluster, sandbox)",
    }
    described.pop("mirrormaker", None)
    result: dict[str, Any] = {}
    try:
        result = run(options, workdir=root, log=typer.echo)
    finally:
        if keep or not result.get("ok"):
            typer.echo(f"logs kept in {root}")
    args = sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else sys.argv[1:]
    path = chaos_report.save(result, results_dir, machine=described, command=" ".join(["strait bench", *args]))
    if json_path is not None:
        json_path.write_text(path.read_text())
    chaos_report.write_markdown(results_dir, markdown)
    totals = result["totals"]
    injected = result["faults_injected"]
    typer.echo(
        f"records produced {totals['produced']:,}, checked {totals['checked']:,}; faults injected "
        f"{sum(injected.values())} ({json.dumps(injected)}); lost {totals['lost']:,}, "
        f"not yet copied {totals['not_yet_copied']:,}, duplicates {totals['duplicates']:,}, "
        f"out of order {totals['out_of_order']:,}"
    )
    typer.echo(f"wrote {path} and {markdown}")
    if not result["ok"]:
        typer.echo("FAILED: " + "; ".join(result["failures"]))
        raise typer.Exit(1)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


def chaos_report_command(results_dir: Path = _RESULTS, markdown: Path = _RELIABILITY) -> None:
    """Regenerate RELIABILITY.md from the chaos result files."""
    from strait.bench.chaos import report as chaos_report

    chaos_report.write_markdown(results_dir, markdown)
    typer.echo(f"wrote {markdown}")
