"""``strait balance``: the options every command shares and turning them into balancer values."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from strait import access_errors
from strait.balancer import executor as execution
from strait.balancer.capacity import Capacities
from strait.balancer.errors import BalanceError
from strait.balancer.goals import Goals
from strait.balancer.tiers import DiskClasses, parse_class
from strait.balancer.units import parse_bytes
from strait.balancer.window import Caps
from strait.logformat import LogFormat, configure

out = Console()
err = Console(stderr=True)

BOOTSTRAP = typer.Option(None, "--bootstrap", "-b", help="Kafka bootstrap servers, host:port[,host:port].")
CLUSTER = typer.Option(
    None,
    "--cluster",
    help="Cluster name from the configuration file: its client properties (unless --bootstrap) and its "
    "disk capacities (balance.capacities).",
)
CONFIG = typer.Option(None, "--config", "-c", help="Strait configuration file (for --cluster).")
CAPACITY = typer.Option(
    None,
    "--capacity",
    help="Disk size, overriding the configuration file dir by dir: '*=100GB' (every dir), '/data/ssd*=2TB' "
    "(dir glob), '3=4TB' (every dir of broker 3) or '3:/data/d1=1TB'. Most specific wins. Needed where "
    "a broker cannot size its dirs, or its dirs share one filesystem. Repeatable.",
)
DISK_CLASS = typer.Option(
    None,
    "--disk-class",
    help="Storage tier of log dirs, overriding balance.disk_classes dir by dir: '/data/ssd*=ssd', '*=hdd', "
    "'3:/data/d0=ssd'. On brokers with both, the hottest replicas (recent write + read bytes/s) are kept on "
    "SSD within its capacity budget and cold ones moved to HDD, by intra-broker moves. Repeatable.",
)
TRAFFIC_WINDOW = typer.Option(
    None,
    "--traffic-window",
    help="Seconds to measure each partition's write and read rates first (log-end offsets, sizes and "
    "committed offsets sampled twice; no JMX), so the plan also evens out network in, network out and "
    "leader bytes in per broker. 0: disks only. Default: 0, or 10 when disk classes are given.",
)
TRAFFIC_THRESHOLD = typer.Option(
    0.10, help="Allowed max-min spread of each broker's traffic, as a fraction of its mean (with a traffic window)."
)
THRESHOLD = typer.Option(0.10, help="Allowed max-min spread of disk usage ratios (0.10 = 10 points).")
CAPACITY_LIMIT = typer.Option(
    0.90, help="No disk may be filled past this fraction of its capacity, by the plan or while moves run."
)
NO_LEADERS = typer.Option(False, "--no-leaders", help="Do not even out preferred leaders.")
JSON = typer.Option(False, "--json", help="Print one JSON object instead of tables.")
OUT = typer.Option(None, "--out", help="Also write the plan as JSON to this file.")
EXECUTE = typer.Option(False, "--execute", help="Run the plan now (default: only show it).")
THROTTLE = typer.Option(None, "--throttle", help="Replication throttle per broker, e.g. 50KB or 20MB (bytes/s).")
MODE = typer.Option("pipeline", "--mode", help="pipeline (sliding window) or batch (wait for each batch).")
DETACH = typer.Option(False, "--detach", help="Start the run in the background and return at once.")
MAX_IN_FLIGHT = typer.Option(8, "--max-in-flight", help="Moves in flight at once (batch size in batch mode).")
MAX_BROKER_IN = typer.Option(2, "--max-broker-in", help="Moves copying into one broker at once.")
MAX_BROKER_OUT = typer.Option(2, "--max-broker-out", help="Moves taking a replica off one broker at once.")
MAX_DISK = typer.Option(2, "--max-disk", help="Moves reading or writing one disk at once.")


class CliError(Exception):
    """A user-facing failure: printed as `error: ...`, exit code 2."""


def guard(fn: Callable[[], int | None], log_format: LogFormat = LogFormat.text) -> None:
    """Run a command body: known failures become `error: ...` and exit code 2.

    Warnings and errors are logged in `log_format` (secrets masked), and a background executor
    this command starts logs in it too (`_STRAIT_LOG_FORMAT`)."""
    configure(logging.WARNING, log_format)
    logging.getLogger("kafka").setLevel(logging.ERROR)
    try:
        code = fn()
    except (BalanceError, CliError, ValueError, OSError) as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from exc
    if code:
        raise typer.Exit(code)


@dataclass(frozen=True)
class Target:
    """The cluster a command works on: client properties and disk capacities."""

    props: dict[str, Any]
    capacities: Capacities
    classes: DiskClasses = DiskClasses()  # noqa: RUF009 (frozen, so one shared empty value is safe)


def target(
    bootstrap: str | None,
    cluster: str | None,
    config: Path | None,
    capacity: list[str] | None = None,
    disk_class: list[str] | None = None,
) -> Target:
    """Properties from --bootstrap or the configured cluster; capacities from --capacity and disk
    classes from --disk-class, over the file's."""
    flags = Capacities.of(parse_capacities(capacity))
    classes = DiskClasses.of(parse_disk_classes(disk_class))
    if cluster and config:
        from strait.config import load_config

        loaded = load_config(config)
        access_errors.name_clusters(loaded.clusters)  # errors say "cluster src", not a broker list
        if cluster not in loaded.clusters:
            raise CliError(f"cluster {cluster!r} is not in {config} (clusters: {', '.join(sorted(loaded.clusters))})")
        props = {"bootstrap.servers": bootstrap} if bootstrap else dict(loaded.clusters[cluster])
        return Target(
            props, flags.over(loaded.balance.capacities_of(cluster)), classes.over(loaded.balance.classes_of(cluster))
        )
    if bootstrap:
        return Target({"bootstrap.servers": bootstrap}, flags, classes)
    if cluster:
        raise CliError("--cluster needs --config FILE (the configuration file that names the cluster)")
    raise CliError("say which cluster: --bootstrap HOST:PORT, or --cluster NAME with --config FILE")


def parse_capacities(values: list[str] | None) -> dict[str, int]:
    """`--capacity KEY=SIZE` flags as a {key: bytes} mapping, refusing a malformed one by name."""
    result: dict[str, int] = {}
    for item in values or []:
        key, sep, amount = item.rpartition("=")
        if not sep or not key:
            raise CliError(f"--capacity {item!r}: expected KEY=SIZE, e.g. '*=100GB'")
        try:
            result[key] = parse_bytes(amount)
            Capacities.of({key: result[key]})
        except ValueError as exc:
            raise CliError(f"--capacity {item!r}: {exc}") from exc
    return result


def parse_disk_classes(values: list[str] | None) -> dict[str, str]:
    """`--disk-class KEY=CLASS` flags as a {key: class} mapping, refusing a malformed one by name."""
    result: dict[str, str] = {}
    for item in values or []:
        key, sep, kind = item.rpartition("=")
        if not sep or not key:
            raise CliError(f"--disk-class {item!r}: expected DIR_GLOB=ssd|hdd, e.g. '/data/ssd*=ssd'")
        try:
            result[key] = parse_class(kind)
            DiskClasses.of({key: result[key]})
        except ValueError as exc:
            raise CliError(f"--disk-class {item!r}: {exc}") from exc
    return result


def traffic_window(window: float | None, classes: DiskClasses) -> float:
    """Seconds to sample traffic: as given, else 10 where disk classes need rates, else none."""
    if window is None:
        return 10.0 if classes else 0.0
    if window < 0:
        raise CliError(f"--traffic-window must be 0 or more seconds, not {window}")
    return window


def rate(throttle: str | None) -> int | None:
    if throttle is None:
        return None
    try:
        return parse_bytes(throttle)
    except ValueError as exc:
        raise CliError(f"--throttle: {exc}") from exc


def goals(threshold: float, capacity_limit: float, no_leaders: bool, traffic_threshold: float = 0.10) -> Goals:
    return Goals(
        threshold=threshold, capacity_limit=capacity_limit, leaders=not no_leaders, traffic_threshold=traffic_threshold
    )


def options(mode: str, throttle: str | None, caps: tuple[int, int, int, int]) -> execution.Options:
    if mode not in ("pipeline", "batch"):
        raise CliError(f"--mode must be pipeline or batch, not {mode!r}")
    in_flight, broker_in, broker_out, disk = caps
    return execution.Options(
        mode=mode,
        throttle=rate(throttle),
        caps=Caps(in_flight=in_flight, broker_in=broker_in, broker_out=broker_out, disk=disk),
    )
