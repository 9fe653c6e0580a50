"""`strait bench`: Strait against MirrorMaker 2 on one sandbox, results in bench/results and BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from strait.cli import bench_chaos, bench_events, bench_scale
from strait.cli.bench_session import (
    _IGNORE_LOAD,
    _KEEP,
    _MARKDOWN,
    _MAX_LOAD,
    _RESULTS,
    _SYSTEMS,
    _WORKDIR,
    _floats,
    _ints,
    _session,
    _words,
)

# The harness (strait.bench) is a tool outside the runtime's import graph, with an extra of its own.
BENCH_EXTRA = ("psutil", "matplotlib")


def missing_bench_extra() -> list[str]:
    """The modules of the `bench` extra that are not installed."""
    return [name for name in BENCH_EXTRA if importlib.util.find_spec(name) is None]


class _BenchCommands(TyperGroup):
    """Every `strait bench` command needs the `bench` extra; its help does not."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        missing = missing_bench_extra()
        if missing and not ctx.resilient_parsing and not {"--help", "-h"} & set(args):
            typer.echo(
                f"strait bench needs the `bench` extra ({', '.join(missing)} not installed): "
                "pip install 'strait[bench]'",
                err=True,
            )
            raise typer.Exit(2)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_BenchCommands,
    help="Benchmarks: Strait and MirrorMaker 2 side by side on the same sandbox clusters (not part of CI).",
    no_args_is_help=True,
)

_PAYLOAD = typer.Option(
    "json",
    "--payload",
    help="Record body kinds, comma-separated, the first the headline one: json (generated events, lz4 about "
    "2-4x) or filler (one repeated text, lz4 10x and more); each further kind runs again as labelled rows.",
)


def _payloads(value: str) -> list[str]:
    from strait.bench.records import PAYLOADS

    kinds = _words(value)
    wrong = [k for k in kinds if k not in PAYLOADS]
    if wrong or not kinds:
        raise typer.BadParameter(
            f"use {', '.join(PAYLOADS)}, not {', '.join(wrong) or 'nothing'}", param_hint="--payload"
        )
    return kinds


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
    ceiling: bool = typer.Option(
        False,
        "--ceiling",
        help="Also measure the ceiling: Kafka's ProducerPerformance and ConsumerPerformance writing and "
        "reading the same records at once, no replicator between (per record size and compression).",
    ),
    payload: str = _PAYLOAD,
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

    payloads = _payloads(payload)
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
                ceiling=ceiling,
                payloads=payloads,
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
    produce_lanes: str = typer.Option(
        "default",
        "--produce-lanes",
        help="Batch mode's connections per destination broker: default (Strait's: one) and/or counts, "
        "comma-separated; each is compared with plaintext at the same setting.",
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
    try:
        lanes = scenario.parse_lanes(produce_lanes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--produce-lanes") from None
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
                lanes=lanes,
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
    payload: str = _PAYLOAD,
    floor: bool = typer.Option(
        True,
        "--floor/--no-floor",
        help="Also measure the floor: per rate, one produce and one fetch on each cluster at that rate (no "
        "replicator), and Kafka's EndToEndLatency tool on the source.",
    ),
    floor_records: int = typer.Option(
        5000, help="Records Kafka's EndToEndLatency sends, one at a time, per repeat (0: not run)."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Steady traffic at fixed rates: end-to-end latency p50 / p99 / p99.9, next to the floor."""
    from strait.bench import scenarios

    copies = _default_or_copies(copy)
    payloads = _payloads(payload)

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
                payloads=payloads,
                floor=floor,
                floor_records=floor_records,
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
    pacing: str = typer.Option(
        "default",
        "--pacing",
        help="The batch pipeline's pace next to realtime partitions, per Strait run: default (the worker's), "
        "latency[:budget ms], fixed[:MB/s], off (comma-separated; each Strait mode runs once per pacing).",
    ),
    warm_drain: int = typer.Option(
        0,
        help="Records of a backlog an unmeasured Strait run drains after --warm-brokers, warming the drain's "
        "paths (0: none).",
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
    from strait.bench.scenarios.isolation import pacing_env

    copies = _default_or_copies(copy)
    profiles = _mm2_profiles(mm2_profile)
    pacings: list[str | None] = [None if p == "default" else p for p in dict.fromkeys(_words(pacing))] or [None]
    for word in pacings:
        try:
            pacing_env(word)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--pacing") from exc

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
            pacings=pacings,
            warm_drain=warm_drain,
        )
        return [result]

    _session(systems, results_dir, markdown, workdir, keep, body, max_load=max_load, ignore_load=ignore_load)


@app.command()
def wan(
    delays: str = typer.Option(
        "0,50,100", help="Round trips to the source cluster in ms (half each way), comma-separated; 0 is the baseline."
    ),
    size: int = typer.Option(1024, help="Record size in bytes."),
    compression: str = typer.Option("none", help="Source (and replicator producer) compression type."),
    records: int = typer.Option(200_000, help="Records in each pre-filled topic."),
    partitions: int = typer.Option(8, help="Partitions of the source topic."),
    parallelism: int = typer.Option(1, help="Strait worker processes = MirrorMaker tasks."),
    repeats: int = typer.Option(1, help="Repeat every delay (system order alternates each time)."),
    copy: str = typer.Option(
        "default", "--copy", help="Strait's route copy modes: default (the route's), record, batch (comma-separated)."
    ),
    mm2_profile: str = typer.Option(
        "wan", "--mm2-profile", help="MirrorMaker 2 settings: default, tuned, wan (comma-separated)."
    ),
    timeout: float = typer.Option(600.0, help="Longest wait for one copy, in seconds."),
    warm_records: int = typer.Option(
        100_000, help="Records of a first, unmeasured copy at 0 ms that warms the fresh brokers (0: none)."
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    systems: str = _SYSTEMS,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Copy a pre-filled topic with the source cluster D ms away (a Toxiproxy delayed link): records/s."""
    from strait.bench import delayed_link
    from strait.bench.scenarios.wan import wan as scenario

    chosen = _delays(delays)
    copies = _default_or_copies(copy)
    profiles = _mm2_profiles(mm2_profile)
    try:
        delayed_link.binary()  # found or built before any cluster starts
    except delayed_link.LinkError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None

    def body(bench: Any) -> list[dict[str, Any]]:
        source = bench.sandbox.clusters[bench.src_cluster]
        link = delayed_link.DelayedLink(
            [(b.proxy_port, b.proxied_port) for b in source.brokers], bench.workdir / "link"
        )
        link.start()
        try:
            bench.replicator_source = source.proxied_bootstrap
            result = scenario(
                bench,
                link,
                delays_ms=chosen,
                size=size,
                compression=compression,
                records=records,
                partitions=partitions,
                parallelism=parallelism,
                repeats=repeats,
                copies=copies,
                mm2_profiles=profiles,
                timeout_s=timeout,
                warm_records=warm_records,
            )
        finally:
            link.stop()
        return [result]

    _session(
        systems,
        results_dir,
        markdown,
        workdir,
        keep,
        body,
        max_load=max_load,
        ignore_load=ignore_load,
        proxied=("src",),
    )


def _delays(value: str) -> list[int]:
    try:
        delays = [int(x) for x in _words(value)]
    except ValueError:
        delays = []
    if not delays or any(d < 0 for d in delays):
        raise typer.BadParameter("give round trips in whole ms, 0 or more, comma-separated", param_hint="--delays")
    return delays


# Scenarios kept in their own module (strait.cli.bench_events), registered here in `--help` order.
app.command("add-topics")(bench_events.add_topics)
app.command("worker-failure")(bench_events.worker_failure)
app.command("leader-failure")(bench_events.leader_failure)
app.command()(bench_events.failover)


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


@app.command()
def delivery(
    sizes: str = typer.Option("100,1024", help="Record sizes in bytes of the throughput copies."),
    records: int = typer.Option(
        2_000_000, help="Records in each pre-filled topic (enough that a copy lasts many 100 ms polls)."
    ),
    partitions: int = typer.Option(4, help="Partitions of every topic."),
    rates: str = typer.Option("1000,10000", help="Produce rates in records/s of the latency runs."),
    duration: float = typer.Option(20.0, help="Seconds of measured traffic per latency run (after the warm-up)."),
    warmup: float = typer.Option(
        15.0, help="Seconds of traffic before measuring latency (MirrorMaker 2 settles after its JIT warm-up)."
    ),
    repeats: int = typer.Option(1, help="Repeat everything (the order of the two modes alternates)."),
    copy: str = typer.Option(
        "default",
        "--copy",
        help="Copy modes to run both delivery modes in: default (the route's), record, batch (comma-separated); "
        "each ratio divides exactly-once by at-least-once in the same copy mode.",
    ),
    systems: str = typer.Option(
        "strait,mm2",
        "--systems",
        help="strait, and mm2 to run MirrorMaker 2 exactly-once (KIP-618) too for the comparison.",
    ),
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
    results_dir: Path = _RESULTS,
    markdown: Path = _MARKDOWN,
    workdir: Path | None = _WORKDIR,
    keep: bool = _KEEP,
) -> None:
    """Strait exactly-once vs at-least-once, and against MirrorMaker 2 exactly-once: copy records/s, CPU, and
    latency through a read_committed reader."""
    from strait.bench import scenarios

    copies = _default_or_copies(copy)

    _session(
        systems,
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


# Commands kept in their own modules, registered here so `strait bench --help` lists them all.
app.command()(bench_chaos.chaos)
app.command("chaos-report")(bench_chaos.chaos_report_command)
app.command()(bench_scale.assignment)
app.command()(bench_scale.zookeeper)
app.command()(bench_scale.planner)
app.command()(bench_scale.longtail)


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
