"""End-to-end latency at fixed produce rates, read by an independent consumer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from strait.bench import agent, workload
from strait.bench.floor import combine_hops, end_to_end_run
from strait.bench.markdown import missing_words
from strait.bench.procstat import ProcessMeter
from strait.bench.records import compression_ratios
from strait.bench.scenarios.harness import (
    SEC,
    SYSTEMS,
    Bench,
    live,
    mean,
    ratio,
    run_safely,
    topic_name,
    verdict,
)
from strait.bench.stats import latency_summary
from strait.bench.worker_stages import WorkerStages, summarize

_CDF_POINTS = (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100)


def latency(
    bench: Bench,
    *,
    rates: Sequence[float] = (1000, 10000),
    duration_s: float = 20.0,
    # At 10,000 records/s MirrorMaker fell ~10 s behind during a 5 s warm-up on two busy cores (JIT
    # compilation): excluding a longer warm-up measures both systems in their steady state.
    warmup_s: float = 15.0,
    partitions: int = 8,
    size: int = 100,
    parallelism: int = 1,
    repeats: int = 1,
    copies: Sequence[str | None] = (None,),
    warm_brokers_s: float = 20.0,
    payloads: Sequence[str] = ("json",),
    floor: bool = True,
    floor_records: int = 5000,
) -> dict[str, Any]:
    """Steady traffic at fixed rates; end-to-end latency from send to arrival at the destination.

    ``copies``: Strait's route ``copy`` modes to measure, each its own run (None: the route's
    default); MirrorMaker runs once per rate. ``warm_brokers_s``: a first, unmeasured run of that
    length (Strait at the highest rate), so no measured run meets brokers whose JIT is still
    cold: the first run on a fresh sandbox had 2-5x the p99 of the same run later (73 ms and
    15 ms for the same record-mode run at 1,000 records/s, quiet machine). ``payloads``: the
    record body kinds, the first the headline one; each further kind runs every rate again.
    ``floor``: per repeat, Kafka's end-to-end latency tool (``floor_records`` records, 0: not
    run), and per rate one produce and one fetch on each cluster (:mod:`strait.bench.floor`)."""
    if rates:
        warm_brokers(bench, warm_brokers_s, rate=max(rates), partitions=partitions, size=size, scenario="latency")
    runs = []
    floors: dict[str, list[dict[str, Any]]] = {"end_to_end": [], "hops": []}
    for repeat in range(repeats):
        if floor and floor_records > 0:
            bench.log(f"latency: floor, Kafka's EndToEndLatency on the source ({floor_records:,} records of {size} B)")
            tool = end_to_end_run(
                bench.src, bench.run_dir(topic_name("latency", "floor-e2e")), records=floor_records, size=size
            )
            tool["repeat"] = repeat
            floors["end_to_end"].append(tool)
            bench.log(f"  -> {_floor_words(tool)}")
        for rate in rates:
            if floor:
                bench.log(f"latency: floor, one produce + one fetch on each cluster at {rate:,.0f} records/s")
                hops = _floor_run(bench, rate, duration_s, warmup_s, partitions, size, payloads[0])
                hops["repeat"] = repeat
                floors["hops"].append(hops)
                bench.log(f"  -> {_floor_words(hops)}")
            for payload, system in [(k, s) for k in payloads for s in bench.order(repeat)]:
                for copy in copies if system == "strait" else (None,):
                    mode = f" copy {copy}" if copy else ""
                    bench.log(
                        f"latency: {system}{mode} x{parallelism} at {rate:,.0f} records/s for {duration_s:.0f}s, "
                        f"{payload} records"
                    )
                    run = _latency_run(
                        bench,
                        system,
                        rate,
                        duration_s,
                        warmup_s,
                        partitions,
                        size,
                        parallelism,
                        copy=copy,
                        payload=payload,
                    )
                    run["repeat"] = repeat
                    runs.append(run)
                    lat = run.get("latency", {})
                    bench.log(
                        f"  -> p50 {lat.get('p50_ms', float('nan')):.1f} ms, "
                        f"p99 {lat.get('p99_ms', float('nan')):.1f} ms, "
                        f"p99.9 {lat.get('p999_ms', float('nan')):.1f} ms, {missing_words(run.get('verify', {}))}"
                        + (f" FAILED: {run['error']}" if run.get("error") else "")
                    )
                    if run.get("broker_cpu_percent"):
                        bench.log(f"     {broker_cpu_words(run['broker_cpu_percent'])}")
                    if run.get("worker_stages"):
                        bench.log(f"     worker: {stages_words(run['worker_stages'])}")
    ratios = latency_ratios(runs, rates, payloads, floors["hops"])
    return {
        "scenario": "latency",
        "params": {
            "rates": list(rates),
            "duration_s": duration_s,
            "warmup_s": warmup_s,
            "partitions": partitions,
            "size": size,
            "parallelism": parallelism,
            "repeats": repeats,
            "copies": [c or "default" for c in copies],
            "warm_brokers_s": warm_brokers_s,
            "payloads": list(payloads),
            "payload_compression": {kind: {str(size): compression_ratios(kind, size)} for kind in payloads},
            "floor_records": floor_records if floor else 0,
        },
        "runs": runs,
        **({"floor": floors} if floor else {}),
        "ratios": ratios,
    }


def warm_brokers(bench: Bench, seconds: float, *, rate: float, partitions: int, size: int, scenario: str) -> None:
    """A first, unmeasured Strait run of ``seconds`` at ``rate`` (half warm-up, half traffic), so no
    measured run meets brokers whose JIT is still cold (0: none). Shared by the scenarios whose
    first run would otherwise be measured on a fresh sandbox (latency, isolation)."""
    if seconds <= 0:
        return
    bench.log(f"{scenario}: warming the brokers for {seconds:.0f}s (not measured)")
    _latency_run(bench, "strait", rate, seconds / 2, seconds / 2, partitions, size, 1)


def _latency_run(
    bench: Bench,
    system: str,
    rate: float,
    duration_s: float,
    warmup_s: float,
    partitions: int,
    size: int,
    parallelism: int,
    *,
    delivery: str | None = None,
    copy: str | None = None,
    payload: str = "filler",
) -> dict[str, Any]:
    """One rate. With ``delivery`` (Strait's route setting) the reader reads ``read_committed``;
    ``copy`` sets Strait's route copy mode (None: the route's default); record bodies are of the
    ``payload`` kind."""
    label = [system, int(rate), payload] + ([delivery] if delivery else []) + ([copy] if copy else [])
    run_dir = bench.run_dir(topic_name("latency", *label))
    topic = topic_name("lat", uuid.uuid4().hex[:6], int(rate), system)
    workload.create_topics(bench.src, [topic], partitions)
    replicator = bench.replicator(system, run_dir, parallelism=parallelism, delivery=delivery, strait_copy=copy)
    result: dict[str, Any] = {
        **({"delivery": delivery} if delivery else {}),
        **({"copy": copy} if copy else {}),
        "system": system,
        "rate": rate,
        "payload": payload,
        "parallelism": parallelism,
        "replicator": replicator.describe(),
        "logs": str(run_dir),
    }

    def body() -> None:
        with live(bench, run_dir, replicator) as session:
            session.warm({topic: partitions}, size)
            session.read(
                [topic],
                [topic],
                deadline_s=duration_s + warmup_s + 600,
                isolation_level="read_committed" if delivery else None,
            )
            meter = ProcessMeter()
            cpu0 = meter.sample(replicator.pids())
            # The brokers' CPU over the same interval: what each system's requests cost the
            # clusters (on this machine they share the cores with the replicator).
            brokers = {
                role: (ProcessMeter(), broker_pids(bench, cluster))
                for role, cluster in (("source", bench.src_cluster), ("destination", bench.dst_cluster))
            }
            broker0 = {role: m.sample(pids) for role, (m, pids) in brokers.items()}
            # Strait's own view of where the time goes (its workers' stats reports, per stage).
            zookeeper, root = getattr(replicator, "zookeeper", None), getattr(replicator, "root", None)
            names = getattr(replicator, "worker_names", [])
            stages = WorkerStages(zookeeper, root, names).start() if zookeeper and root else None
            try:
                session.produce(
                    "steady",
                    {topic: partitions},
                    rate=rate,
                    duration_s=warmup_s + duration_s,
                    size=size,
                    payload=payload,
                )
                session.producers[0].wait(3600)
                cpu1 = meter.sample(replicator.pids())
                broker1 = {role: m.sample(pids) for role, (m, pids) in brokers.items()}
            finally:
                stage_windows = stages.stop() if stages is not None else []
            arrivals, windows = session.finish(drain_s=60)
            started_us, ended_us = windows[0]
            latencies = arrivals.latencies_us(sent_after_us=started_us + int(warmup_s * SEC), min_seq=1)
            summary = latency_summary(latencies)
            ordered = sorted(latencies)
            result["latency"] = {k: round(v, 3) for k, v in summary.items()}
            result["cdf_ms"] = cdf_ms(ordered)
            result["produced"] = sum(session.expected.values())
            result["achieved_rate"] = round(
                (sum(session.expected.values()) - partitions) / ((ended_us - started_us) / SEC), 1
            )
            elapsed_s = (ended_us - started_us) / SEC
            result["cpu_percent"] = round(100 * (cpu1 - cpu0) / elapsed_s, 1)
            result["broker_cpu_percent"] = {
                role: round(100 * (broker1[role] - broker0[role]) / elapsed_s, 1) for role in brokers
            }
            result["peak_rss_mb"] = round(meter.peak_rss_total_mb(), 1)
            result["verify"] = verdict(bench, replicator, arrivals, session.expected)
            if stages is not None:
                # Windows wholly inside the measured interval (a report covers ~2 s before it).
                result["worker_stages"] = summarize(
                    stage_windows, after=started_us / SEC + warmup_s + STATS_WINDOW_S, before=ended_us / SEC
                )

    return run_safely(result, body)


def cdf_ms(ordered: Sequence[int]) -> list[list[float]]:
    """[percentile, ms] at ``_CDF_POINTS`` of sorted latencies in µs (the plot's curve)."""
    if not ordered:
        return []
    return [[q, ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] / 1000] for q in _CDF_POINTS]


def _floor_run(
    bench: Bench, rate: float, duration_s: float, warmup_s: float, partitions: int, size: int, payload: str
) -> dict[str, Any]:
    """One produce and one fetch on each cluster at ``rate``: the benchmark's producer and reader
    on a fresh topic of the source, then on one of the destination, no replicator between
    (:mod:`strait.bench.floor`). One hop at a time: both at once would run two producers and two
    readers on the cores a replication run gives one of each and the replicator, and the floor
    is a lower bound. Per hop and combined: the latency summary, warm-up excluded."""
    run_dir = bench.run_dir(topic_name("latency", "floor", int(rate)))
    tag = uuid.uuid4().hex[:6]
    clusters = {"source": bench.src, "destination": bench.dst}
    result: dict[str, Any] = {"rate": rate, "payload": payload, "partitions": partitions, "logs": str(run_dir)}
    hops: dict[str, list[int]] = {}

    def hop(role: str) -> None:
        props, topic = clusters[role], topic_name("floor", tag, int(rate), role)
        workload.create_topics(props, [topic], partitions)
        children: list[agent.Agent] = []
        try:
            reader = agent.start_reader(
                run_dir / f"read-{role}.json",
                props,
                [topic],
                ready_topics=[topic],
                deadline_s=warmup_s + duration_s + 600,
            )
            children.append(reader)
            agent.wait_ready(reader)
            producer = agent.start_producer(
                run_dir / f"produce-{role}.json",
                props,
                {topic: partitions},
                rate=rate,
                duration_s=warmup_s + duration_s,
                size=size,
                payload=payload,
            )
            children.append(producer)
            producer.wait(3600)
            counts, started_us, _ended_us = agent.producer_result(producer)
            arrivals = agent.stop_reader(reader, sum(counts.values()), drain_s=60)
        finally:
            for child in children:
                child.kill()
        hops[role] = arrivals.latencies_us(sent_after_us=started_us + int(warmup_s * SEC))
        missing = arrivals.verify(counts).missing
        result[role] = {
            **{k: round(v, 3) for k, v in latency_summary(hops[role]).items()},
            **({"missing": missing} if missing else {}),
        }

    def body() -> None:
        for role in clusters:
            hop(role)
        combined = combine_hops(hops["source"], hops["destination"])
        result["latency"] = {k: round(v, 3) for k, v in combined.items()}

    return run_safely(result, body)


def _floor_words(run: dict[str, Any]) -> str:
    """A floor measurement in one line."""
    if run.get("error"):
        return f"FAILED: {run['error']}"
    lat = run.get("latency", {})
    words = f"p50 {lat.get('p50_ms', float('nan')):.1f} ms, p99 {lat.get('p99_ms', float('nan')):.1f} ms"
    if "source" in run:
        words += ", per hop p50/p99: " + ", ".join(
            f"{role} {run[role].get('p50_ms', float('nan')):.1f}/{run[role].get('p99_ms', float('nan')):.1f} ms"
            for role in ("source", "destination")
        )
    return words


def broker_pids(bench: Bench, cluster: str) -> list[int]:
    """The sandbox's running broker processes of ``cluster``."""
    return [b.pid for b in bench.sandbox.clusters[cluster].brokers if b.pid]


def broker_cpu_words(cpu: dict[str, float]) -> str:
    """``brokers' CPU: source 71 %, destination 48 %`` (100 % = one core)."""
    return "brokers' CPU: " + ", ".join(f"{role} {value:.0f} %" for role, value in cpu.items())


# How long a worker's stats report window is (worker.stats_interval_s's default).
STATS_WINDOW_S = 2.0


def stages_words(stages: dict[str, dict[str, Any]]) -> str:
    """``e2e p50/p99 ms, produce_ack ...``: a run's worker-side figures in one line."""
    return ", ".join(
        f"{name} {f['p50_ms']}/{f['p99_ms']} ms (p99 max {f['p99_max_ms']})"
        for name, f in stages.items()
        if name != "checkpoint_commit"
    )


def latency_ratios(
    runs: Sequence[dict[str, Any]],
    rates: Sequence[float],
    payloads: Sequence[str] = ("filler",),
    floors: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Strait / MM2 per payload kind, rate, Strait copy mode and percentile: of the mean over
    repeats, and of each system's best run. A row names its copy mode (``copy``) when a run set
    one; a run without a payload kind carried filler (the only kind before there were others).
    With ``floors`` (one produce and one fetch on each cluster, per rate) a row also gives the
    floor's mean p50 / p99 at its rate and each system's mean above it (``*_over_floor_*``, ms)."""
    rows = []
    copies = sorted({r.get("copy") for r in runs if r["system"] == "strait"}, key=lambda c: c or "") or [None]
    for payload in payloads:
        for rate in rates:
            for copy in copies:
                row: dict[str, Any] = {"rate": rate, "payload": payload, **({"copy": copy} if copy else {})}
                for q in ("p50_ms", "p99_ms", "p999_ms"):
                    values = {
                        s: [
                            r["latency"].get(q)
                            for r in runs
                            if r["system"] == s
                            and r["rate"] == rate
                            and r.get("payload", "filler") == payload
                            and "latency" in r
                            and (s != "strait" or r.get("copy") == copy)
                        ]
                        for s in SYSTEMS
                    }
                    means = {s: mean(v) for s, v in values.items()}
                    bests = {s: min((x for x in v if x is not None), default=None) for s, v in values.items()}
                    row[f"strait_{q}"] = means["strait"]
                    row[f"mm2_{q}"] = means["mm2"]
                    row[q] = ratio(means["strait"], means["mm2"])
                    row[f"best_{q}"] = ratio(bests["strait"], bests["mm2"])
                row.update(over_floor(row, floors))
                rows.append(row)
    return rows


def over_floor(row: dict[str, Any], floors: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The floor's mean p50 / p99 at the row's rate and each system's mean p50 / p99 above it (ms);
    nothing when no floor was measured at that rate."""
    at_rate = [f["latency"] for f in floors if f.get("rate") == row["rate"] and f.get("latency", {}).get("count")]
    if not at_rate:
        return {}
    figures: dict[str, float | None] = {}
    for q in ("p50_ms", "p99_ms"):
        floor = mean([f.get(q) for f in at_rate])
        figures[f"floor_{q}"] = floor
        for system in SYSTEMS:
            value = row.get(f"{system}_{q}")
            figures[f"{system}_over_floor_{q}"] = None if value is None or floor is None else round(value - floor, 3)
    return figures
