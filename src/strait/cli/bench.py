"""`strait bench`: Strait against MirrorMaker 2 on one sandbox, results in bench/results and BENCHMARKS.md."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(
    help="Benchmarks: Strait and MirrorMaker 2 side by side on the same sandbox clusters (not part of CI).",
    no_args_is_help=True,
)

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
) -> None:
    """Sandbox up, run ``body(bench)``, save and plot its results, regenerate the Markdown, tear down.

    Refused on a busy machine (``max_load``, ``ignore_load``: see _quiet), before anything starts.
    ``clusters``: the sandbox's cluster names and their security modes (default src and dst, plaintext)."""
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
    sandbox = Sandbox.up(SandboxSpec(clusters=names, brokers=1, log_dirs=1, state_dir=root / "sandbox", security=modes))
    failed = True
    try:
        bench = Bench(sandbox=sandbox, workdir=root / "runs", systems=_words(systems), log=lambda m: typer.echo(m))
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


@app.command()
def throughput(
    sizes: str = typer.Option("100,1024", help="Record sizes in bytes."),
    compressions: str = typer.Option("none,lz4", help="Source (and replicator producer) compression types."),
    parallelism: str = typer.Option("1,2", help="Strait worker processes = MirrorMaker tasks."),
    records: int = typer.Option(
        100_000, help="Records in each pre-filled topic (the same count for every record size)."
    ),
    partitions: int = typer.Option(8, help="Partitions of the source topic."),
    repeats: int = typer.Option(1, help="Repeat the whole matrix (system order alternates each time)."),
    copy: str = typer.Option("record", "--copy", help="Strait's route copy modes: record, batch (comma-separated)."),
    mm2_profile: str = typer.Option(
        "default",
        "--mm2-profile",
        help="MirrorMaker 2 settings: default, tuned (comma-separated; the tuned ones are listed in BENCHMARKS.md).",
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Copy a pre-filled topic: records/s, MB/s, CPU s per GB, peak RSS."""
    from strait.bench import scenarios

    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.throughput(
                bench,
                sizes=_ints(sizes),
                compressions=_words(compressions),
                parallelism=_ints(parallelism),
                records=records,
                partitions=partitions,
                repeats=repeats,
                copies=_copies(copy),
                mm2_profiles=_mm2_profiles(mm2_profile),
            )
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


def _mm2_profiles(value: str) -> list[str]:
    from strait.bench.mirrormaker import MM2_PROFILES

    profiles = _words(value)
    wrong = [p for p in profiles if p not in MM2_PROFILES]
    if wrong or not profiles:
        raise typer.BadParameter(f"--mm2-profile takes {', '.join(MM2_PROFILES)}, not {', '.join(wrong) or 'none'}")
    return profiles


def _copies(value: str) -> list[str]:
    copies = _words(value)
    wrong = [c for c in copies if c not in ("record", "batch")]
    if wrong or not copies:
        raise typer.BadParameter(f"--copy takes record and/or batch, not {', '.join(wrong) or 'nothing'}")
    return copies


@app.command()
def security(
    modes: str = typer.Option(
        "tls", help="Secured modes to compare with plaintext (always run): tls, sasl_ssl, mtls, comma-separated."
    ),
    sizes: str = typer.Option("1024", help="Record sizes in bytes."),
    records: int = typer.Option(100_000, help="Records in each pre-filled topic."),
    partitions: int = typer.Option(4, help="Partitions of the source topic."),
    compression: str = typer.Option("none", help="Source (and Strait's producer) compression type."),
    repeats: int = typer.Option(1, help="Repeat everything (the order of the modes alternates)."),
    copy: str = typer.Option(
        "default", "--copy", help="Strait's route copy modes: default (the route's), record, batch (comma-separated)."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """One Strait worker's copy throughput over TLS (and SASL_SSL, mTLS) against plaintext, in the same run."""
    from strait.bench.scenarios import security as scenario
    from strait.sandbox.errors import SandboxError

    try:
        chosen = scenario.parse_modes(modes)
    except (SandboxError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--modes") from None
    copies = _default_or_copies(copy)
    _session(
        "strait",
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenario.security(
                bench,
                modes=chosen,
                sizes=_ints(sizes),
                compression=compression,
                records=records,
                partitions=partitions,
                repeats=repeats,
                copies=copies,
            )
        ],
        clusters=scenario.sandbox_layout(chosen),
        max_load=max_load,
        ignore_load=ignore_load,
    )


@app.command()
def latency(
    rates: str = typer.Option("1000,10000", help="Produce rates in records/s."),
    duration: float = typer.Option(20.0, help="Seconds of measured traffic per run (after the warm-up)."),
    warmup: float = typer.Option(
        15.0, help="Seconds of traffic before measuring (MirrorMaker's JVM compiles its hot paths meanwhile)."
    ),
    partitions: int = typer.Option(8, help="Partitions of the topic."),
    size: int = typer.Option(100, help="Record size in bytes."),
    parallelism: int = typer.Option(1, help="Strait worker processes = MirrorMaker tasks."),
    repeats: int = typer.Option(1, help="Repeat each rate (system order alternates each time)."),
    copy: str = typer.Option(
        "default", "--copy", help="Strait's route copy modes: default (the route's), record, batch (comma-separated)."
    ),
    warm_brokers: float = typer.Option(
        20.0, help="Seconds of a first, unmeasured run that warms the brokers' JIT (0: none)."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Steady traffic at fixed rates: end-to-end latency p50 / p99 / p99.9."""
    from strait.bench import scenarios

    copies = _default_or_copies(copy)

    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.latency(
                bench,
                rates=_floats(rates),
                duration_s=duration,
                warmup_s=warmup,
                partitions=partitions,
                size=size,
                parallelism=parallelism,
                repeats=repeats,
                copies=copies,
                warm_brokers_s=warm_brokers,
            )
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


def _default_or_copies(copy: str) -> list[str | None]:
    copies: list[str | None] = [None if c == "default" else c for c in _words(copy)]
    if not copies or any(c not in (None, "record", "batch") for c in copies):
        raise typer.BadParameter("--copy takes default, record and/or batch", param_hint="--copy")
    return copies


@app.command()
def isolation(
    backlog: int = typer.Option(2_000_000, help="Records in the backlog the second topic catches up."),
    rate: float = typer.Option(1000, help="records/s on the realtime topic."),
    without: float = typer.Option(20.0, help="Seconds measured before the backlog appears (after the warm-up)."),
    warmup: float = typer.Option(
        15.0, help="Seconds of realtime traffic before measuring (MirrorMaker's JVM compiles its hot paths meanwhile)."
    ),
    drain_timeout: float = typer.Option(600.0, help="Longest wait for the backlog to be copied, in seconds."),
    after: float = typer.Option(5.0, help="Seconds of realtime traffic measured after the backlog is copied."),
    partitions: int = typer.Option(8, help="Partitions of the realtime topic."),
    backlog_partitions: int = typer.Option(8, help="Partitions of the backlog topic."),
    size: int = typer.Option(100, help="Record size in bytes (both topics)."),
    parallelism: int = typer.Option(1, help="Strait worker processes = MirrorMaker tasks."),
    repeats: int = typer.Option(1, help="Repeat everything (system order alternates each time)."),
    copy: str = typer.Option(
        "default", "--copy", help="Strait's route copy modes: default (the route's), record, batch (comma-separated)."
    ),
    mm2_profile: str = typer.Option(
        "default", "--mm2-profile", help="MirrorMaker 2 settings: default, tuned (comma-separated)."
    ),
    warm_brokers: float = typer.Option(
        20.0, help="Seconds of a first, unmeasured run that warms the brokers' JIT (0: none)."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Fetch isolation: a realtime topic's p50 / p99 without and with another topic catching up a backlog."""
    from strait.bench import scenarios

    copies = _default_or_copies(copy)
    profiles = _mm2_profiles(mm2_profile)

    def body(bench: Any) -> list[dict[str, Any]]:
        result = scenarios.isolation(
            bench,
            rate=rate,
            backlog=backlog,
            partitions=partitions,
            backlog_partitions=backlog_partitions,
            size=size,
            warmup_s=warmup,
            without_s=without,
            drain_timeout_s=drain_timeout,
            after_s=after,
            parallelism=parallelism,
            repeats=repeats,
            copies=copies,
            mm2_profiles=profiles,
            warm_brokers_s=warm_brokers,
        )
        return [result]

    _session(systems, results_dir, markdown, workdir, keep, body, max_load=max_load, ignore_load=ignore_load)


@app.command("add-topics")
def add_topics(
    rate: float = typer.Option(2000, help="records/s on topic A."),
    new_topics: int = typer.Option(10, help="Topics added while A flows."),
    new_rate: float = typer.Option(200, help="records/s over all the new topics together."),
    before: float = typer.Option(10.0, help="Seconds of traffic on A before adding."),
    after: float = typer.Option(30.0, help="Seconds of traffic after adding."),
    parallelism: int = typer.Option(1, help="Strait worker processes = MirrorMaker tasks."),
    mm2_refresh: int = typer.Option(5, help="MirrorMaker refresh.topics.interval.seconds."),
    copy: str = typer.Option(
        "default", "--copy", help="Strait's route copy mode: default (the route's, batch), record or batch."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Add ten topics while topic A flows: A's longest gap, each new topic's time to first record."""
    from strait.bench import scenarios

    # (Before batch became the route default, "record" meant the default and was passed as None:
    # since then, --copy record ran batch mode.)
    if copy not in ("default", "record", "batch"):
        raise typer.BadParameter("--copy takes default, record or batch", param_hint="--copy")
    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.add_topics(
                bench,
                rate=rate,
                new_topics=new_topics,
                new_rate=new_rate,
                before_s=before,
                after_s=after,
                parallelism=parallelism,
                mm2_refresh_topics_s=mm2_refresh,
                copy=None if copy == "default" else copy,
            )
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


@app.command("worker-failure")
def worker_failure(
    rate: float = typer.Option(2000, help="records/s."),
    before: float = typer.Option(10.0, help="Seconds of traffic before the kill."),
    after: float = typer.Option(45.0, help="Seconds of traffic after the kill."),
    mm2_rebalance_delay_ms: int = typer.Option(
        10_000, help="MirrorMaker scheduled.rebalance.max.delay.ms (its default, 300000, waits 5 minutes)."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """kill -9 one of two workers (MirrorMaker: nodes) under load: time to resume, records lost / duplicated."""
    from strait.bench import scenarios

    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.worker_failure(
                bench, rate=rate, before_s=before, after_s=after, mm2_rebalance_delay_ms=mm2_rebalance_delay_ms
            )
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


@app.command()
def failover(
    records: int = typer.Option(60_000, help="Records in the pre-filled topic."),
    partitions: int = typer.Option(6, help="Partitions of the topic (the group stops at a different depth in each)."),
    commit_every: int = typer.Option(
        500, help="The consumer commits every N records of a partition (and at its stop)."
    ),
    mm2_sync_wait: float = typer.Option(
        120.0, help="Seconds to wait for MirrorMaker to sync the group's offsets to the destination."
    ),
    delivery: str | None = typer.Option(
        None,
        help="Strait's route delivery (at-least-once, exactly-once; default the route's): exactly-once writes "
        "the offset map inside its transactions, which the map's cost then shows.",
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """A consumer group fails over to the destination: records it re-reads and skips, Strait's exact
    translation (strait failover) against MirrorMaker 2's checkpoints and group offset sync."""
    from strait.bench import scenarios

    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.failover(
                bench,
                records=records,
                partitions=partitions,
                commit_every=commit_every,
                mm2_sync_wait_s=mm2_sync_wait,
                delivery=delivery,
            )
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


@app.command()
def smoke(
    records: int = typer.Option(5000, help="Records in the pre-filled topic."),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """The CI-sized run: each system copies a small topic and the verifier must count 0 lost."""
    from strait.bench import scenarios

    outcome: list[dict[str, Any]] = []

    def body(bench: Any) -> list[dict[str, Any]]:
        outcome.append(scenarios.smoke(bench, records=records))
        return outcome

    _session(systems, results_dir, markdown, workdir, keep, body, max_load=max_load, ignore_load=ignore_load)
    bad = [r for r in outcome[0]["runs"] if r.get("error") or not r.get("verify", {}).get("ok")]
    if bad:
        raise typer.Exit(1)


@app.command()
def profile(
    records: int = typer.Option(300_000, help="Records in the pre-filled topic."),
    size: int = typer.Option(100, help="Record size in bytes."),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Profile one Strait worker (py-spy) while it copies a backlog: where its time goes."""
    from strait.bench import profile as profiling

    _session(
        "strait",
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [profiling.profile_worker(bench, records=records, size=size)],
        max_load=max_load,
        ignore_load=ignore_load,
    )


@app.command("all")
def run_all(
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Every scenario at its default size, on one sandbox (about 20-30 minutes on two cores)."""
    from strait.bench import scenarios

    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.smoke(bench),
            scenarios.throughput(bench),
            scenarios.latency(bench),
            scenarios.add_topics(bench),
            scenarios.worker_failure(bench),
            scenarios.failover(bench),
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


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


@app.command()
def chaos(
    duration: str = typer.Option("30m", help="How long faults and load go on: 30m, 180s, 1h."),
    seed: int = typer.Option(1, help="Seed of the fault schedule: the same seed replays the same faults."),
    delivery: str = typer.Option("at-least-once", help="The route's delivery: at-least-once or exactly-once."),
    copy: str | None = typer.Option(None, "--copy", help="The route's copy mode: record or batch (default: its own)."),
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


@app.command("chaos-report")
def chaos_report_command(results_dir: Path = _RESULTS, markdown: Path = _RELIABILITY) -> None:
    """Regenerate RELIABILITY.md from the chaos result files."""
    from strait.bench.chaos import report as chaos_report

    chaos_report.write_markdown(results_dir, markdown)
    typer.echo(f"wrote {markdown}")


@app.command()
def delivery(
    sizes: str = typer.Option("100,1024", help="Record sizes in bytes of the throughput copies."),
    records: int = typer.Option(200_000, help="Records in each pre-filled topic."),
    partitions: int = typer.Option(4, help="Partitions of every topic."),
    rates: str = typer.Option("1000,10000", help="Produce rates in records/s of the latency runs."),
    duration: float = typer.Option(20.0, help="Seconds of measured traffic per latency run (after the warm-up)."),
    warmup: float = typer.Option(5.0, help="Seconds of traffic before measuring latency."),
    repeats: int = typer.Option(1, help="Repeat everything (the order of the two modes alternates)."),
    copy: str = typer.Option(
        "default",
        "--copy",
        help="Copy modes of the at-least-once runs: default (the route's), record, batch (comma-separated); "
        "exactly-once copies record by record.",
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Strait exactly-once vs at-least-once: copy records/s, CPU, and latency through a read_committed reader."""
    from strait.bench import scenarios

    copies = _default_or_copies(copy)

    _session(
        "strait",
        results_dir,
        markdown,
        workdir,
        keep,
        lambda bench: [
            scenarios.delivery(
                bench,
                sizes=_ints(sizes),
                records=records,
                partitions=partitions,
                rates=_floats(rates),
                duration_s=duration,
                warmup_s=warmup,
                repeats=repeats,
                copies=copies,
            )
        ],
        max_load=max_load,
        ignore_load=ignore_load,
    )


@app.command()
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
    import json

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
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "assignment.json"
    result["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(f"wrote {path}")
    if result["violations"]:
        raise typer.Exit(1)


@app.command()
def zookeeper(
    partitions: int = typer.Option(100_000, help="Partitions to assign."),
    workers: int = typer.Option(5, help="Simulated workers (each its own ZooKeeper session)."),
    topics: int = typer.Option(100, help="Topics the partitions are spread over."),
    connect: str | None = typer.Option(None, "--zookeeper", help="HOST:PORT of a ZooKeeper (default: a sandbox)."),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
) -> None:
    """A real controller publishing 100,000 partitions on a real ZooKeeper: node sizes, time to
    publish, time for a worker to read its part (the split layout; not part of CI)."""
    import json

    from strait.bench import zk_scale

    checked = _quiet(max_load, ignore_load)
    sandbox = None
    if connect is None:
        from strait.sandbox import Sandbox, SandboxSpec

        state = Path(tempfile.mkdtemp(prefix="strait-bench-zk-"))
        sandbox = Sandbox.up(SandboxSpec(clusters=("src",), brokers=1, log_dirs=1, state_dir=state))
        connect = sandbox.zookeeper
    try:
        result = zk_scale.run(connect, partitions=partitions, workers=workers, topics=topics, log=typer.echo)
    finally:
        if sandbox is not None:
            sandbox.down()
    result.update(checked)
    sizes = result["znodes_after_first"]
    typer.echo(
        f"{result['partitions']} partitions on {workers} workers: largest node {result['max_znode_bytes']} bytes "
        f"({sizes['max_node']}; one map, as before, would be {result['layout1_assignment_bytes']} bytes), "
        f"publish {result['first_publish_s']} s (after a death {result['death_publish_s']} s), worker read median "
        f"{result['worker_read_s']['median']} s, max {result['worker_read_s']['max']} s; load average "
        f"{result['load_average_before']} on {result['cpus']} CPUs"
    )
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "zookeeper_scale.json"
    result["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(f"wrote {path}")
    if not result["under_limit"]:
        raise typer.Exit(1)


@app.command()
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
    import json

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
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "planner.json"
    doc = {"runs": runs, **checked, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    typer.echo(f"wrote {path}")


@app.command()
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
    import json

    from strait.bench import balancer_longtail

    checked = _quiet(max_load, ignore_load)
    result = balancer_longtail.run(small=small, big_mb=big_mb, throttle=throttle, window=window, log=typer.echo)
    result.update(checked)
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "longtail.json"
    result["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(f"wrote {path}")


@app.command()
def report(results_dir: Path = _RESULTS, markdown: Path = _MARKDOWN) -> None:
    """Regenerate the Markdown report (and plots) from the result files."""
    from strait.bench import report as reporting

    for doc in reporting.load_all(results_dir).values():
        reporting.plot(doc, results_dir)
    reporting.write_markdown(results_dir, markdown)
    typer.echo(f"wrote {markdown}")


if __name__ == "__main__":
    app()  # `python -m strait.cli.bench ...` works before `strait bench` is registered
