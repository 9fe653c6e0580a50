"""`strait bench` commands that need no replication pair: assignment and ZooKeeper scale, the
balancer's planner and its long-tail executor run."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from strait.cli.bench_session import _IGNORE_LOAD, _MAX_LOAD, _RESULTS, _quiet


def assignment(
    partitions: int = typer.Option(100_000, help="Partitions to assign."),
    workers: int = typer.Option(500, help="Workers, spread evenly over the pools."),
    pools: int = typer.Option(5, help="Worker pools; routes limited to one pool each hold a fifth of the partitions."),
    repeats: int = typer.Option(5, help="Deaths and joins measured (a different worker each time)."),
    seed: int = typer.Option(1, help="Seed of the generated fleet."),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
) -> None:
    """No cluster: time to compute a new assignment after a worker dies and after one joins (goal < 1 s)."""

    from strait.bench import assignment as scenario

    checked = _quiet(max_load, ignore_load)
    result = scenario.run(partitions, workers, pools, repeats, seed, log=typer.echo)
    result.update(checked)
    death, join = result["death_assign_s"], result["join_assign_s"]
    typer.echo(
        f"after a death: median {death['median']:.3f} s, max {death['max']:.3f} s; after a join: median "
        f"{join['median']:.3f} s, max {join['max']:.3f} s (goal < {result['goal_s']:.0f} s); "
        f"load average {result['load_average_before']} on {result['cpus']} CPUs; violations {result['violations']}"
    )
    _save(result, results_dir / "assignment.json")
    if result["violations"]:
        raise typer.Exit(1)


def zookeeper(
    partitions: int = typer.Option(100_000, help="Partitions to assign."),
    workers: int = typer.Option(5, help="Simulated workers (each its own ZooKeeper session)."),
    topics: int = typer.Option(100, help="Topics the partitions are spread over."),
    connect: str | None = typer.Option(None, "--zookeeper", help="HOST:PORT of a ZooKeeper (default: a sandbox)."),
    store: str = typer.Option(
        "zookeeper",
        "--store",
        help="zookeeper, or kafka: the Kafka store on a sandbox cluster (record sizes instead of node sizes).",
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
) -> None:
    """A real controller publishing 100,000 partitions on a real ZooKeeper (or the Kafka store): node
    (record) sizes, time to publish, time for a worker to read its part (the split layout; not part of CI)."""

    from strait.bench import machine, zk_scale
    from strait.bench.report import run_commit
    from strait.cli.bench_session import _store

    checked = _quiet(max_load, ignore_load)
    described = machine.describe()  # the load average at the start
    on_kafka = _store(store) == "kafka"
    if on_kafka and connect is not None:
        raise typer.BadParameter("--zookeeper names a ZooKeeper: not with --store kafka", param_hint="--store")
    sandbox = None
    kafka = None
    if connect is None:
        from strait.sandbox import Sandbox, SandboxSpec

        state = Path(tempfile.mkdtemp(prefix="strait-bench-zk-"))
        spec = SandboxSpec(clusters=("src",), brokers=1, log_dirs=1, state_dir=state, zookeeper=not on_kafka)
        sandbox = Sandbox.up(spec)
        if on_kafka:
            kafka = sandbox.clusters["src"].props()
        else:
            connect = sandbox.zookeeper
    try:
        result = zk_scale.run(
            connect, kafka=kafka, partitions=partitions, workers=workers, topics=topics, log=typer.echo
        )
    finally:
        if sandbox is not None:
            sandbox.down()
    args = sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else sys.argv[1:]
    result.update(checked, command=" ".join(["strait bench", *args]), commit=run_commit(), machine=described)
    sizes = result["znodes_after_first"]
    typer.echo(
        f"{result['partitions']} partitions on {workers} workers: largest node {result['max_znode_bytes']} bytes "
        f"({sizes['max_node']}; one map, as before, would be {result['layout1_assignment_bytes']} bytes), "
        f"publish {result['first_publish_s']} s (after a death {result['death_publish_s']} s), worker read median "
        f"{result['worker_read_s']['median']} s, max {result['worker_read_s']['max']} s; load average "
        f"{result['load_average_before']} on {result['cpus']} CPUs"
    )
    _save(result, results_dir / ("kafka_scale.json" if on_kafka else "zookeeper_scale.json"))
    if not result["under_limit"]:
        raise typer.Exit(1)


def planner(
    size: str = typer.Option("both", help="small (100 brokers, 100k replicas), large (1,000, 1M) or both."),
    goals: str = typer.Option("traffic", help="disks, traffic, tiers or all."),
    seed: int = typer.Option(7, help="Seed of the generated cluster and its traffic."),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
) -> None:
    """No cluster: time (wall and CPU) and peak memory of planning a rebalance of generated
    clusters, up to 1,000 brokers x 12 disks x 1M replicas (goal < 10 s with traffic)."""

    from strait.bench import balancer_plan

    try:
        chosen = balancer_plan.cases(size, goals)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    checked = _quiet(max_load, ignore_load)
    runs = []
    for s, g in chosen:
        result = balancer_plan.run(s, g, seed)
        typer.echo(balancer_plan.describe(result))
        runs.append(result)
    _save({"runs": runs, **checked}, results_dir / "planner.json")


def longtail(
    small: int = typer.Option(24, help="Small partitions (60 KB each)."),
    big_mb: float = typer.Option(4.0, help="Size of the big partition, MB."),
    throttle: int = typer.Option(150_000, help="Replication throttle, bytes/s."),
    window: int = typer.Option(4, help="Moves in flight (the batch size in batch mode)."),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
) -> None:
    """The balancer's executor on a 4-broker sandbox: one big partition and many small ones moved
    in batch mode, then with the pipelined window; wall times and the ratio."""

    from strait.bench import balancer_longtail

    checked = _quiet(max_load, ignore_load)
    result = balancer_longtail.run(small=small, big_mb=big_mb, throttle=throttle, window=window, log=typer.echo)
    result.update(checked)
    _save(result, results_dir / "longtail.json")


def _save(result: dict[str, Any], path: Path) -> None:
    """Write a no-pair bench's result, stamped with when it finished, and say where."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    result["finished"] = result["finished_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(f"wrote {path}")
