"""`strait bench add-topics`, `worker-failure` and `failover`: something happens while records
flow (topics added, a worker killed, a consumer group moved to the destination) and the scenario
measures what the change cost, Strait against MirrorMaker 2."""

from __future__ import annotations

from pathlib import Path

import typer

from strait.cli.bench_session import (
    _IGNORE_LOAD,
    _KEEP,
    _MARKDOWN,
    _MAX_LOAD,
    _RESULTS,
    _STORE,
    _SYSTEMS,
    _WORKDIR,
    _session,
)


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


def worker_failure(
    rate: float = typer.Option(2000, help="records/s."),
    before: float = typer.Option(10.0, help="Seconds of traffic before the kill."),
    after: float = typer.Option(45.0, help="Seconds of traffic after the kill."),
    mm2_rebalance_delay_ms: int = typer.Option(
        10_000, help="MirrorMaker scheduled.rebalance.max.delay.ms (its default, 300000, waits 5 minutes)."
    ),
    store: str = _STORE,
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
        store=store,
    )


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


def leader_failure(
    store: str = _STORE,
    repeats: int = typer.Option(3, help="Leader kills measured (the killed controller restarts as the standby)."),
    timeout: float = typer.Option(120.0, help="Seconds a repeat waits for the new leader to act."),
    results_dir: Path = _RESULTS,
    max_load: float = _MAX_LOAD,
    ignore_load: bool = _IGNORE_LOAD,
) -> None:
    """kill -9 the leading controller (Strait only): time until the standby leads and until it acts
    (assigns a topic added through its API at the kill)."""
    import json
    import sys
    import time

    from strait.bench import leader_failure, machine
    from strait.bench.report import run_commit
    from strait.cli.bench_session import _quiet, _store

    checked = _quiet(max_load, ignore_load)
    described = machine.describe()  # the load average at the start
    result = leader_failure.run(store=_store(store), repeats=repeats, timeout_s=timeout, log=typer.echo)
    args = sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else sys.argv[1:]
    result.update(checked, command=" ".join(["strait bench", *args]), commit=run_commit(), machine=described)
    result["finished_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"leader-failure-{store}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    typer.echo(
        f"{store}: new leader after median {result['leader_s']['median']} s (max {result['leader_s']['max']}), "
        f"acting after median {result['acting_s']['median']} s (max {result['acting_s']['max']}); "
        f"failed repeats {result['failed_repeats']}; wrote {path}"
    )
    if result["failed_repeats"]:
        raise typer.Exit(1)
