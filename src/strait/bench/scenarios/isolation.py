"""Fetch isolation: a realtime topic's end-to-end latency while another topic catches up a backlog.

Per system, on fresh topics: a realtime topic gets ``rate`` records/s from a producer process and
an independent reader process times every arrival on the destination (the latency scenario's
machinery). A second topic holds a backlog of ``backlog`` records, written inside one open
transaction after the replicator started. Both replicators read ``read_committed`` (Strait's
fetchers always do; MirrorMaker 2 is given ``src.consumer.isolation.level=read_committed``), so
the backlog topic looks empty until the harness commits, and then all of it appears at once: a
topic that has to catch up, with nothing else changing. (MirrorMaker learns of topics only by
its pattern, so a backlog in a topic it copies would otherwise be copied while it is written.)

The realtime topic's records are split by send time:

- warm-up (``warmup_s``, MirrorMaker's JIT compiles meanwhile): not counted;
- without the backlog: from the warm-up's end to one second before the commit (the second
  before is left out: records sent then are still in flight when the backlog appears);
- with the backlog: from the commit until the destination holds the whole backlog (its end
  offsets polled every 0.1 s), or ``drain_timeout_s``;
- after: from the end of the drain to the end of traffic (``after_s``).

The ratio with / without of p50 and p99 is each system's own; the goal: Strait's
realtime p99 rises by less than 2x while the backlog drains.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException

from strait.bench import agent, reader, workload
from strait.bench.machine import LoadWatch
from strait.bench.markdown import missing_words
from strait.bench.mirrormaker import profile_properties
from strait.bench.procstat import ProcessMeter
from strait.bench.scenarios.harness import (
    SEC,
    Bench,
    DestinationCount,
    Live,
    live,
    mean,
    ratio,
    run_safely,
    topic_name,
    verdict,
)
from strait.bench.scenarios.latency import warm_brokers
from strait.bench.stats import latency_summary

GOAL_P99_RATIO = 2.0
# Records sent this long before the commit are still in flight when the backlog appears.
_EDGE_US = SEC
# Seconds between starting the producer process and its first record (a Python start-up).
_PRODUCER_START_S = 2.0
_POLL_S = 0.1
# What makes the held backlog invisible to MirrorMaker until the commit, as it is to Strait.
MM2_READ_COMMITTED = {"src.consumer.isolation.level": "read_committed"}
WINDOWS = ("without", "with", "after")
# The unmeasured broker warm-up runs at least this rate (the latency bench's highest), so the
# brokers' produce and fetch paths are compiled before the first measured run, whoever runs first.
_WARM_RATE = 10_000.0


@dataclass(frozen=True)
class Shape:
    """What every run of one invocation shares."""

    rate: float
    backlog: int
    partitions: int
    backlog_partitions: int
    size: int
    warmup_s: float
    without_s: float
    drain_timeout_s: float
    after_s: float
    parallelism: int


def isolation(
    bench: Bench,
    *,
    rate: float = 1000,
    backlog: int = 2_000_000,
    partitions: int = 8,
    backlog_partitions: int = 8,
    size: int = 100,
    warmup_s: float = 15.0,
    without_s: float = 20.0,
    drain_timeout_s: float = 600.0,
    after_s: float = 5.0,
    parallelism: int = 1,
    repeats: int = 1,
    copies: Sequence[str | None] = (None,),
    mm2_profiles: Sequence[str] = ("default",),
    warm_brokers_s: float = 20.0,
    pacings: Sequence[str | None] = (None,),
    warm_drain: int = 0,
) -> dict[str, Any]:
    """Realtime latency without and with a backlog draining, per system, in one invocation.

    ``copies``: Strait's route ``copy`` modes (None: the route's default); ``mm2_profiles``:
    MirrorMaker 2's settings (:data:`strait.bench.mirrormaker.MM2_PROFILES`), each with
    :data:`MM2_READ_COMMITTED` added. ``warm_brokers_s``: a first, unmeasured run (the latency
    scenario's) so the first measured run does not meet cold brokers: the first quiet run had
    Strait's no-backlog p99 at 187.7 ms where the latency bench, warm, sees ~15 ms. The systems'
    order alternates per repeat, and so does the order of each system's modes; each run records
    its place (``order``, 0 = first).
    ``pacings``: the batch pipeline's pace next to realtime partitions in Strait's workers
    (:func:`pacing_env`; None: the worker's configured one), each Strait mode once per pacing.
    ``warm_drain``: records of a backlog drained by an unmeasured Strait run after the broker
    warm-up (0: none), so the first measured drain does not meet brokers whose drain paths (large
    ``read_committed`` fetches, large appends) are still cold; its figures are logged, not kept.
    """
    for pacing in pacings:
        pacing_env(pacing)  # an unknown pacing fails before any run
    for name in mm2_profiles:
        profile_properties(name)  # an unknown profile fails before any run
    shape = Shape(
        rate, backlog, partitions, backlog_partitions, size, warmup_s, without_s, drain_timeout_s, after_s, parallelism
    )
    warm_brokers(
        bench, warm_brokers_s, rate=max(rate, _WARM_RATE), partitions=partitions, size=size, scenario="isolation"
    )
    if warm_drain > 0:
        bench.log(f"isolation: warming the brokers with a drain of {warm_drain:,} records (not measured)")
        warm = Shape(rate, warm_drain, partitions, backlog_partitions, size, 5.0, 5.0, drain_timeout_s, 1.0, 1)
        bench.log(f"  -> {describe_run(_isolation_run(bench, 'strait', warm, copy=None, mm2_profile=None))}")
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        order = 0
        for system in bench.order(repeat):
            modes = (
                [(c, None, pacing) for c in copies for pacing in pacings]
                if system == "strait"
                else [(None, p, None) for p in mm2_profiles]
            )
            # A system's modes alternate their order per repeat too: a mode that always runs
            # first after another system (or the warm-up) meets the busier machine every time
            # (latency pace first in every pair: its no-backlog p99 15.7-19.2 ms against the
            # fixed pace's 7.7-11.8 in four pairs, so its ratio was measured on another baseline).
            for copy, profile, pacing in modes if repeat % 2 == 0 else modes[::-1]:
                mode = f" copy {copy}" if copy else f" profile {profile}" if profile else ""
                mode += f" pacing {pacing}" if pacing else ""
                bench.log(
                    f"isolation: {system}{mode} x{parallelism}, realtime {rate:,.0f} records/s, backlog "
                    f"{backlog:,} records of {size} B (repeat {repeat + 1}/{repeats})"
                )
                with worker_env(pacing_env(pacing)):
                    run = _isolation_run(bench, system, shape, copy=copy, mm2_profile=profile)
                if pacing:
                    run["pacing"] = pacing
                run["repeat"] = repeat
                run["order"] = order
                order += 1
                run["mode"] = mode_of(run)
                runs.append(run)
                bench.log(f"  -> {describe_run(run)}")
    return {
        "scenario": "isolation",
        "params": {
            **asdict(shape),
            "repeats": repeats,
            "copies": [c or "default" for c in copies],
            "mm2_profiles": list(mm2_profiles),
            "mm2_extra": MM2_READ_COMMITTED,
            "warm_brokers_s": warm_brokers_s,
            "pacings": [p or "default" for p in pacings],
            "warm_drain": warm_drain,
        },
        "goal_p99_ratio": GOAL_P99_RATIO,
        "runs": runs,
        "summary": isolation_summary(runs),
    }


def _isolation_run(
    bench: Bench, system: str, shape: Shape, *, copy: str | None, mm2_profile: str | None
) -> dict[str, Any]:
    label = [system, *([copy] if copy else []), *([mm2_profile] if mm2_profile else [])]
    run_dir = bench.run_dir(topic_name("isolation", *label))
    prefix = topic_name("iso", uuid.uuid4().hex[:6], system)
    realtime, lagging = f"{prefix}-rt", f"{prefix}-backlog"
    workload.create_topics(bench.src, [realtime], shape.partitions)
    workload.create_topics(bench.src, [lagging], shape.backlog_partitions)
    replicator = bench.replicator(
        system,
        run_dir,
        parallelism=shape.parallelism,
        strait_copy=copy,
        mm2_extra={**profile_properties(mm2_profile or "default"), **MM2_READ_COMMITTED} if system == "mm2" else None,
    )
    result: dict[str, Any] = {
        **({"copy": copy} if copy else {}),
        **({"mm2_profile": mm2_profile} if mm2_profile else {}),
        "system": system,
        "rate": shape.rate,
        "backlog": shape.backlog,
        "parallelism": shape.parallelism,
        "replicator": replicator.describe(),
        "logs": str(run_dir),
    }

    def body() -> None:
        with LoadWatch() as load, live(bench, run_dir, replicator) as session:
            try:
                _measure(bench, session, shape, realtime, lagging, result)
            finally:
                result["load"] = load.summary()

    return run_safely(result, body)


def _measure(bench: Bench, session: Live, shape: Shape, realtime: str, lagging: str, result: dict[str, Any]) -> None:
    replicator = session.replicator
    session.warm({realtime: shape.partitions, lagging: shape.backlog_partitions}, shape.size)
    # The reader reads the realtime topic only (a second process reading the backlog would load
    # the machine while it drains): its expected count leaves the backlog topic out.
    probes = {k: session.expected.pop(k) for k in list(session.expected) if k[0] == lagging}
    bench.log(f"  writing the backlog: {shape.backlog:,} records in one open transaction")
    began = time.monotonic()
    held = workload.HeldBacklog(bench.src, lagging, probes, shape.backlog, shape.size)
    try:
        result["backlog_write_s"] = round(time.monotonic() - began, 1)
        traffic_s = shape.warmup_s + shape.without_s + shape.drain_timeout_s + shape.after_s
        session.read([realtime], [realtime], deadline_s=traffic_s + 600)
        session.produce(
            "realtime", {realtime: shape.partitions}, rate=shape.rate, duration_s=traffic_s, size=shape.size
        )
        meter = ProcessMeter()
        time.sleep(_PRODUCER_START_S + shape.warmup_s)
        cpu0, t0 = meter.sample(replicator.pids()), time.monotonic()
        time.sleep(shape.without_s)
        cpu1, t1 = meter.sample(replicator.pids()), time.monotonic()
        commit_us = time.time_ns() // 1000
        held.commit()
    finally:
        held.close()
    target = sum(held.counts.values())
    counter = DestinationCount(bench.dst, {lagging: shape.backlog_partitions})
    try:
        drain = watch_drain(counter, target=target, already=sum(probes.values()), timeout_s=shape.drain_timeout_s)
    finally:
        counter.close()
    cpu2, t2 = meter.sample(replicator.pids()), time.monotonic()
    time.sleep(shape.after_s)
    agent.stop_producer(session.producers[0])
    arrivals, windows = session.finish(drain_s=60)
    started_us, ended_us = windows[0]
    measure_from_us = started_us + int(shape.warmup_s * SEC)
    drained_us = drain.get("done_us") or drain["last_us"]
    sends = realtime_sends(arrivals, realtime)
    split = split_windows(sends, measure_from_us=measure_from_us, commit_us=commit_us, drained_us=drained_us)
    result["windows_s"] = {
        "without": round((commit_us - _EDGE_US - measure_from_us) / SEC, 2),
        "with": round((drained_us - commit_us) / SEC, 2),
        "after": round((ended_us - drained_us) / SEC, 2),
    }
    for name in WINDOWS:
        result[f"latency_{name}"] = {k: round(v, 3) for k, v in latency_summary(split[name]).items()}
    result["with_by_second"] = by_second(sends, start_us=commit_us, end_us=drained_us)
    result.update(window_ratios(result))
    result["drain"] = {**drain, **drain_figures(drain, commit_us, shape.backlog)}
    # The probes (one record per partition, sent before the traffic) are not part of the rate.
    result["produced"] = sum(v for (t, _), v in session.expected.items() if t == realtime) - shape.partitions
    result["achieved_rate"] = round(result["produced"] / max((ended_us - started_us) / SEC, 1e-3), 1)
    result["cpu_percent_without"] = round(100 * (cpu1 - cpu0) / max(t1 - t0, 1e-3), 1)
    result["cpu_percent_with"] = round(100 * (cpu2 - cpu1) / max(t2 - t1, 1e-3), 1)
    result["peak_rss_mb"] = round(meter.peak_rss_total_mb(), 1)
    # The backlog topic is read for the verifier only now, once the measurement is over.
    session.expected.update(held.counts)
    reader.read(bench.dst, [lagging], done=lambda n: n >= target, deadline_s=600, arrivals=arrivals)
    result["verify"] = verdict(bench, replicator, arrivals, session.expected)


def watch_drain(counter: DestinationCount, *, target: int, already: int, timeout_s: float) -> dict[str, Any]:
    """Poll the backlog topic's destination count every 0.1 s until it holds ``target`` records.

    ``first_us``: the first poll that saw more than ``already`` records (wall clock µs, as the
    records' stamps); ``done_us``: the first that saw all (absent on a timeout); ``last_us``: the
    last poll; ``timeline``: (µs, records) about once a second."""
    out: dict[str, Any] = {"target": target, "timeline": []}
    deadline = time.monotonic() + timeout_s
    next_point = 0.0
    while True:
        try:
            count = counter.count()
        except KafkaException:
            count = None  # a slow metadata answer on a busy machine: the next poll counts
        now_us = time.time_ns() // 1000
        out["last_us"], out["seen"] = now_us, count if count is not None else out.get("seen", 0)
        if count is not None:
            if count > already and "first_us" not in out:
                out["first_us"] = now_us
            if time.monotonic() >= next_point:
                out["timeline"].append((now_us, count))
                next_point = time.monotonic() + 1.0
            if count >= target:
                out["done_us"] = now_us
                out["timeline"].append((now_us, count))
                return out
        if time.monotonic() > deadline:
            return out
        time.sleep(_POLL_S)


def drain_figures(drain: dict[str, Any], commit_us: int, backlog: int) -> dict[str, Any]:
    """Seconds from the commit to the first backlog record and to the last, and the backlog's rate."""
    first, done = drain.get("first_us"), drain.get("done_us")
    figures: dict[str, Any] = {
        "drained": done is not None,
        "first_s": None if first is None else round((first - commit_us) / SEC, 2),
        "drain_s": None if done is None else round((done - commit_us) / SEC, 2),
    }
    figures["records_per_s"] = round(backlog / figures["drain_s"], 1) if figures["drain_s"] else None
    return figures


def realtime_sends(arrivals: reader.Arrivals, topic: str) -> list[tuple[int, int]]:
    """(sent µs, latency µs) of every benchmark record of ``topic`` that arrived, probes left out."""
    return [
        (sent, at - sent)
        for name, _dst, src, seq, sent, at in arrivals.iter_rows()
        if name == topic and src >= 0 and seq >= 1
    ]


def split_windows(
    sends: Iterable[tuple[int, int]], *, measure_from_us: int, commit_us: int, drained_us: int, edge_us: int = _EDGE_US
) -> dict[str, list[int]]:
    """Latencies (µs) by the window their record's send time falls in: ``without`` from
    ``measure_from_us`` to ``edge_us`` before the commit, ``with`` from the commit to the end of
    the drain, ``after`` later. Earlier records (warm-up) and those at the edge count nowhere."""
    out: dict[str, list[int]] = {name: [] for name in WINDOWS}
    for sent, latency in sends:
        if measure_from_us <= sent < commit_us - edge_us:
            out["without"].append(latency)
        elif commit_us <= sent <= drained_us:
            out["with"].append(latency)
        elif sent > drained_us:
            out["after"].append(latency)
    return out


def by_second(sends: Iterable[tuple[int, int]], *, start_us: int, end_us: int) -> list[dict[str, Any]]:
    """Per second of send time from ``start_us`` to ``end_us``: records and their p50 / p99 / max
    (ms), so a run shows whether its tail came from one stretch of the drain or all of it."""
    buckets: dict[int, list[int]] = {}
    for sent, latency in sends:
        if start_us <= sent <= end_us:
            buckets.setdefault((sent - start_us) // SEC, []).append(latency)
    out = []
    for second in sorted(buckets):
        summary = latency_summary(buckets[second])
        figures = {k: round(summary[k], 1) for k in ("p50_ms", "p99_ms", "max_ms")}
        out.append({"s": second, "count": summary["count"], **figures})
    return out


def window_ratios(run: dict[str, Any]) -> dict[str, float | None]:
    """With / without the backlog, of p50 and p99 (higher: the backlog hurt the realtime topic more)."""
    without, with_ = run.get("latency_without") or {}, run.get("latency_with") or {}
    return {f"ratio_{q}": ratio(with_.get(f"{q}_ms"), without.get(f"{q}_ms")) for q in ("p50", "p99")}


def mode_of(run: dict[str, Any]) -> str:
    """A run's system and mode as a label: ``strait``, ``strait batch``, ``strait pacing fixed``,
    ``mm2``, ``mm2 tuned``."""
    mode = run.get("copy") if run["system"] == "strait" else run.get("mm2_profile", "default")
    label = run["system"] if mode in (None, "default") else f"{run['system']} {mode}"
    return f"{label} pacing {run['pacing']}" if run.get("pacing") else label


# The environment overrides of the worker's ``worker.batch_sharing`` keys that set the backlog's
# pace (strait.worker.batch.budget).
SHARING_ENV = "STRAIT_WORKER__BATCH_SHARING__"
PACING_ENV = tuple(f"{SHARING_ENV}{key}" for key in ("ENABLED", "PACE", "FIXED_MB_S", "LATENCY_BUDGET_MS"))


def pacing_env(pacing: str | None) -> dict[str, str]:
    """The worker environment of one ``--pacing`` word: ``latency`` (the worker's budget) or
    ``latency:MS`` (a budget of MS ms), ``fixed`` (the configured rate) or ``fixed:MB`` (MB/s),
    ``off`` (the backlog never paced); None: the worker's configuration alone."""
    if pacing is None:
        return {}
    kind, _, value = pacing.partition(":")
    try:
        number = None if not value else float(value)
    except ValueError:
        number = -1.0
    if kind == "off" and not value:
        return {f"{SHARING_ENV}ENABLED": "false"}
    if kind == "latency" and (number is None or number > 0):
        budget = {} if not value else {f"{SHARING_ENV}LATENCY_BUDGET_MS": value}
        return {f"{SHARING_ENV}PACE": "latency", **budget}
    if kind == "fixed" and (number is None or number > 0):
        return {f"{SHARING_ENV}PACE": "fixed", **({} if not value else {f"{SHARING_ENV}FIXED_MB_S": value})}
    raise ValueError(f"unknown pacing {pacing!r}: latency[:ms], fixed[:MB/s] or off")


@contextlib.contextmanager
def worker_env(env: dict[str, str]) -> Iterator[None]:
    """Workers started inside see ``env`` and none of the other pacing variables (restored after)."""
    before = {name: os.environ.pop(name) for name in PACING_ENV if name in os.environ}
    os.environ.update(env)
    try:
        yield
    finally:
        for name in PACING_ENV:
            os.environ.pop(name, None)
        os.environ.update(before)


def isolation_summary(runs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per system and mode, means over the repeats (ratios of the means, and the per-run p99
    ratios); then each Strait mode against each MirrorMaker profile."""
    rows = []
    for label in dict.fromkeys(mode_of(r) for r in runs):
        group = [r for r in runs if mode_of(r) == label and not r.get("error")]
        row: dict[str, Any] = {"mode": label, "system": label.split()[0], "runs": len(group)}
        for window in ("without", "with"):
            for q in ("p50", "p99"):
                row[f"{window}_{q}_ms"] = mean([(r.get(f"latency_{window}") or {}).get(f"{q}_ms") for r in group])
        row["ratio_p50"] = ratio(row["with_p50_ms"], row["without_p50_ms"])
        row["ratio_p99"] = ratio(row["with_p99_ms"], row["without_p99_ms"])
        row["run_ratios_p99"] = [r.get("ratio_p99") for r in group]
        row["drain_s"] = mean([(r.get("drain") or {}).get("drain_s") for r in group])
        row["meets_goal"] = None if row["ratio_p99"] is None else row["ratio_p99"] < GOAL_P99_RATIO
        rows.append(row)
    versus = [
        {
            "strait": s["mode"],
            "mm2": m["mode"],
            "with_p99": ratio(s["with_p99_ms"], m["with_p99_ms"]),
            "ratio_p99": ratio(s["ratio_p99"], m["ratio_p99"]),
            "drain_s": ratio(s["drain_s"], m["drain_s"]),
        }
        for s in rows
        if s["system"] == "strait"
        for m in rows
        if m["system"] == "mm2"
    ]
    return {"systems": rows, "versus": versus}


def describe_run(run: dict[str, Any]) -> str:
    """The progress line of one run."""
    if run.get("error"):
        return f"FAILED: {run['error']}"
    parts = []
    for window in WINDOWS:
        lat = run.get(f"latency_{window}") or {}
        parts.append(
            f"{window} p50 {lat.get('p50_ms', float('nan')):.1f} / p99 {lat.get('p99_ms', float('nan')):.1f} ms "
            f"({lat.get('count', 0)})"
        )
    drain = run.get("drain") or {}
    load = run.get("load") or {}
    seconds = run.get("with_by_second") or []
    if seconds:
        worst = max(seconds, key=lambda s: s["p99_ms"])
        parts.append(f"worst second {worst['s']} of the drain p99 {worst['p99_ms']:.1f} ms")
    return (
        "; ".join(parts)
        + f"; p99 with/without {run.get('ratio_p99')}; backlog "
        + (f"drained in {drain.get('drain_s')} s" if drain.get("drained") else f"NOT drained ({drain.get('seen')})")
        + f"; load {load.get('min_1m')}-{load.get('max_1m')}; {missing_words(run.get('verify', {}))}"
    )
