"""Throughput: copy a pre-filled topic; records/s, MB/s, CPU seconds per GB and peak RSS.

Timing: the destination's record count (sum of end offsets) is polled every ``POLL_S`` (10 ms)
from before the replicator starts. A batch copy of 200,000 records can take about 0.1 s, so the
rate is taken between the first poll that saw records and the first that saw them all, counting
only the records that arrived in between (``records - first_count``); a copy that lands whole
between two polls is timed by those two polls and flagged ``resolution_limited`` (a lower bound).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException

from strait.bench import reader, workload
from strait.bench.ceiling import ceiling_run
from strait.bench.markdown import missing_words
from strait.bench.mirrormaker import MirrorMaker2, profile_properties
from strait.bench.procstat import ProcessMeter
from strait.bench.records import compression_ratios
from strait.bench.replicator import Replicator
from strait.bench.scenarios.harness import (
    Bench,
    CommittedCount,
    ConnectCommittedCount,
    DestinationCount,
    mean,
    ratio,
    running,
    topic_name,
    verdict,
)

# Destination polls while a copy runs: a batch copy of 200,000 records can take about 0.1 s.
POLL_S = 0.01


def throughput(
    bench: Bench,
    *,
    sizes: Sequence[int] = (100, 1024),
    compressions: Sequence[str] = ("none", "lz4"),
    parallelism: Sequence[int] = (1, 2),
    records: int = 100_000,
    partitions: int = 8,
    repeats: int = 1,
    timeout_s: float = 600.0,
    copies: Sequence[str] = ("record",),
    mm2_profiles: Sequence[str] = ("default",),
    ceiling: bool = False,
    payloads: Sequence[str] = ("json",),
) -> dict[str, Any]:
    """Copy a pre-filled topic; records/s, MB/s, CPU seconds per GB and peak RSS of the replicator.

    ``copies``: Strait's route ``copy`` modes to run (record, batch); ``mm2_profiles``: MirrorMaker
    2's settings (default, tuned: :data:`strait.bench.mirrormaker.MM2_PROFILES`), each compared
    with each Strait mode in the same run. ``ceiling``: per record size and codec, Kafka's own
    tools read and write the same amount at once (:mod:`strait.bench.ceiling`). ``payloads``:
    the record body kinds (:data:`strait.bench.records.PAYLOADS`), the first the headline one;
    each further kind runs the same matrix, its rows labelled with it.
    """
    for name in mm2_profiles:
        profile_properties(name)  # an unknown profile fails before any run
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for payload in payloads:
            for size in sizes:
                for compression in compressions:
                    label = f"{records:,} {payload} records of {size} B, compression {compression}"
                    if ceiling:
                        bench.log(
                            f"throughput: ceiling (Kafka's ProducerPerformance and ConsumerPerformance at once), "
                            f"{label} (repeat {repeat + 1}/{repeats})"
                        )
                        run = ceiling_run(
                            bench.src,
                            bench.dst,
                            bench.run_dir(topic_name("ceiling", size, compression, payload)),
                            size=size,
                            compression=compression,
                            records=records,
                            partitions=partitions,
                            timeout_s=timeout_s,
                            payload=payload,
                        )
                        run["repeat"] = repeat
                        runs.append(run)
                        bench.log(f"  -> {_fmt_ceiling(run)}")
                    for workers in parallelism:
                        for system, copy, profile in _systems(bench.order(repeat), copies, mm2_profiles):
                            mode = f" copy {copy}" if copy else f" profile {profile}" if profile else ""
                            bench.log(f"throughput: {system}{mode} x{workers}, {label} (repeat {repeat + 1}/{repeats})")
                            run = _throughput_run(
                                bench,
                                system,
                                workers,
                                size,
                                compression,
                                records,
                                partitions,
                                timeout_s,
                                copy=copy,
                                mm2_profile=profile,
                                payload=payload,
                            )
                            run["repeat"] = repeat
                            runs.append(run)
                            bench.log(f"  -> {_fmt_throughput(run)}")
    ratios = throughput_ratios(runs, sizes, compressions, parallelism, copies, mm2_profiles, payloads)
    return {
        "scenario": "throughput",
        "params": {
            "sizes": list(sizes),
            "compressions": list(compressions),
            "parallelism": list(parallelism),
            "records": records,
            "partitions": partitions,
            "repeats": repeats,
            "copies": list(copies),
            "mm2_profiles": list(mm2_profiles),
            "mm2_profile_settings": {p: profile_properties(p) for p in mm2_profiles},
            "ceiling": ceiling,
            "payloads": list(payloads),
            "payload_compression": payload_compression(payloads, sizes),
        },
        "runs": runs,
        "ratios": ratios,
    }


def _systems(
    order: Sequence[str], copies: Sequence[str | None], profiles: Sequence[str] = ("default",)
) -> list[tuple[str, str | None, str | None]]:
    """(system, Strait copy mode, MM2 profile) in the run order: Strait has no profile, MM2 no copy mode."""
    return [
        (system, copy, profile)
        for system in order
        for copy, profile in ([(c, None) for c in copies] if system == "strait" else [(None, p) for p in profiles])
    ]


def payload_compression(payloads: Sequence[str], sizes: Sequence[int]) -> dict[str, dict[str, dict[str, float]]]:
    """Each payload kind's compression ratio per record size (a string key, as JSON keeps it) and codec."""
    return {kind: {str(size): compression_ratios(kind, size) for size in sizes} for kind in payloads}


def throughput_ratios(
    runs: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    compressions: Sequence[str],
    parallelism: Sequence[int],
    copies: Sequence[str] = ("record",),
    profiles: Sequence[str] = ("default",),
    payloads: Sequence[str] = ("filler",),
) -> list[dict[str, Any]]:
    """Strait / MM2 per payload kind, configuration, Strait copy mode and MM2 profile: of the mean
    over repeats, and records/s of each system's best run. A run without a copy mode copied
    records, one without a profile ran MirrorMaker's defaults, one without a payload kind carried
    filler (the only kind before there were others)."""
    rows = []
    for payload in payloads:
        for size in sizes:
            for compression in compressions:
                for workers, copy, profile in [(w, c, p) for w in parallelism for c in copies for p in profiles]:
                    rows.append(_ratio_row(runs, payload, (size, compression, workers), copy, profile))
    return rows


def _ratio_row(
    runs: Sequence[dict[str, Any]], payload: str, config: tuple[int, str, int], copy: str, profile: str
) -> dict[str, Any]:
    size, compression, workers = config

    def values(system: str, metric: str) -> list[float]:
        return [
            r[metric]
            for r in runs
            if (r["system"], r["size"], r["compression"], r["parallelism"]) == (system, *config)
            and r.get("payload", "filler") == payload
            and (system != "strait" or r.get("copy", "record") == copy)
            and (system != "mm2" or r.get("mm2_profile", "default") == profile)
            and r.get(metric) is not None
        ]

    def avg(system: str, metric: str) -> float | None:
        return mean(values(system, metric))

    return {
        "payload": payload,
        "size": size,
        "compression": compression,
        "parallelism": workers,
        "copy": copy,
        "mm2_profile": profile,
        "strait_records_per_s": avg("strait", "records_per_s"),
        "mm2_records_per_s": avg("mm2", "records_per_s"),
        "records_per_s": ratio(avg("strait", "records_per_s"), avg("mm2", "records_per_s")),
        "best_records_per_s": ratio(
            max(values("strait", "records_per_s"), default=None),
            max(values("mm2", "records_per_s"), default=None),
        ),
        "cpu_s_per_gb": ratio(avg("strait", "cpu_s_per_gb"), avg("mm2", "cpu_s_per_gb")),
        "peak_rss_mb": ratio(avg("strait", "peak_rss_mb"), avg("mm2", "peak_rss_mb")),
    }


def _fmt_ceiling(run: dict[str, Any]) -> str:
    if run.get("error"):
        return f"FAILED: {run['error']}"
    return (
        f"{run['records_per_s']:,.0f} rec/s (write {run['write']['records_per_s']:,.0f}, "
        f"read {run['read']['records_per_s']:,.0f}), tools' CPU {run['cpu_s_per_gb']:.0f} s/GB"
    )


def _fmt_throughput(run: dict[str, Any]) -> str:
    if run.get("error"):
        return f"FAILED: {run['error']}"
    v = run["verify"]
    return (
        f"{run['records_per_s']:,.0f} rec/s, {run['mb_per_s']:.1f} MB/s, {run['cpu_s_per_gb']:.0f} CPU s/GB, "
        f"peak RSS {run['peak_rss_mb']:.0f} MB, {missing_words(v)}, dup {v['duplicated']}"
    )


def _throughput_run(
    bench: Bench,
    system: str,
    workers: int,
    size: int,
    compression: str,
    records: int,
    partitions: int,
    timeout_s: float,
    *,
    delivery: str | None = None,
    copy: str | None = None,
    mm2_profile: str | None = None,
    payload: str = "filler",
    drop_after: bool = False,
) -> dict[str, Any]:
    """One full copy of records with bodies of the ``payload`` kind. With ``delivery`` (Strait's
    route setting) the copy counts only once the records are visible to a ``read_committed``
    reader, and the verifier reads ``read_committed``.
    ``copy``: Strait's route copy mode (batch or record); ``mm2_profile``: MirrorMaker 2's
    settings (:data:`strait.bench.mirrormaker.MM2_PROFILES`); ``drop_after``: the topic is
    deleted on both clusters once verified."""
    label = (
        [system, workers, size, compression, payload]
        + ([delivery] if delivery else [])
        + ([copy] if copy else [])
        + ([mm2_profile] if mm2_profile and mm2_profile != "default" else [])
    )
    run_dir = bench.run_dir(topic_name("throughput", *label))
    topic = topic_name("tp", uuid.uuid4().hex[:6], size, compression, system, workers)
    workload.create_topics(bench.src, [topic], partitions)
    expected = workload.prefill(bench.src, topic, partitions, records, size, compression=compression, payload=payload)
    replicator = bench.replicator(
        system,
        run_dir,
        parallelism=workers,
        compression=compression,
        delivery=delivery,
        strait_copy=copy,
        mm2_extra=profile_properties(mm2_profile) if system == "mm2" and mm2_profile else None,
    )
    result: dict[str, Any] = {
        **({"delivery": delivery} if delivery else {}),
        **({"copy": copy} if copy else {}),
        **({"mm2_profile": mm2_profile} if system == "mm2" and mm2_profile else {}),
        "system": system,
        "parallelism": workers,
        "size": size,
        "compression": compression,
        "payload": payload,
        "records": records,
        "bytes": records * size,
        "replicator": replicator.describe(),
        "logs": str(run_dir),
    }
    counter: DestinationCount
    if delivery != "exactly-once":
        counter = DestinationCount(bench.dst, {topic: partitions})
    elif isinstance(replicator, MirrorMaker2):
        counter = ConnectCommittedCount(bench.dst, replicator.offsets_topic, {topic: partitions})
    else:
        counter = CommittedCount(bench.dst, {topic: partitions})
    watch = _CopyWatch(counter, replicator, records)
    try:
        # Watching starts before the replicator does: a fast copy can end before start() returns.
        watch.start()
        try:
            with running(replicator, [topic]):
                watch.join(timeout_s)
                watch.stop.set()
                watch.meter.sample(replicator.pids())
                result["peak_rss_mb"] = round(watch.meter.peak_rss_total_mb(), 1)
        finally:
            watch.stop.set()
            watch.join()
        timing = copy_timing(watch.timeline, records, size)
        if timing is None:
            seen = watch.timeline[-1][1] if watch.timeline else 0
            result["error"] = f"copy incomplete after {timeout_s:.0f}s ({seen} records)"
        else:
            result.update(timing)
        # Every poll is needed to time the copy, not to draw it: keep about 100 points per run.
        result["timeline"] = watch.timeline[:: max(1, len(watch.timeline) // 100)]
        arrivals = reader.read(
            bench.dst,
            [topic],
            done=lambda n: n >= records,
            deadline_s=120,
            isolation_level="read_committed" if delivery else None,
        )
        result["verify"] = verdict(bench, replicator, arrivals, expected)
    except Exception as exc:  # a failed run is a result to record, not the end of the benchmark
        result["error"] = f"{type(exc).__name__}: {exc}"
        result.setdefault("verify", {})
    finally:
        counter.close()
        if drop_after:
            for props in (bench.src, bench.dst):
                try:
                    workload.delete_topics(props, [topic])
                except Exception as exc:  # disk space only: the run's result stands
                    bench.log(f"  (topic {topic} not deleted: {exc})")
    return result


def copy_timing(timeline: Sequence[tuple[float, int, float]], records: int, size: int) -> dict[str, Any] | None:
    """Rate and CPU of a copy from its polls ``(seconds since the watch started, records at the
    destination, replicator CPU seconds)``; None if the copy never completed (see the module doc).

    Timed from the first poll that saw records to the first that saw all of them, over the records
    that arrived in between. A copy that landed whole between two polls is timed by those two
    polls: its rate and CPU figures are bounds (``resolution_limited``).
    """
    first = next((i for i, (_, count, _) in enumerate(timeline) if count > 0), None)
    done = next((i for i, (_, count, _) in enumerate(timeline) if count >= records), None)
    if first is None or done is None:
        return None
    limited = done == first
    start = first - 1 if limited else first
    # Before the first poll of all: the watch's start (time 0, no CPU yet).
    t0, count0, cpu0 = timeline[start] if start >= 0 else (0.0, 0, 0.0)
    t1, _, cpu1 = timeline[done]
    span = max(t1 - t0, 1e-3)
    counted = records - count0
    cpu = cpu1 - cpu0
    return {
        "startup_s": round(timeline[first][0], 2),
        "copy_s": round(span, 3),
        "total_s": round(t1, 2),
        "records_per_s": round(counted / span, 1),
        "mb_per_s": round(counted * size / span / 1e6, 2),
        "cpu_s_copy": round(cpu, 2),
        "cpu_s_total": round(cpu1, 2),
        "cpu_s_per_gb": round(cpu / (counted * size / 1e9), 1),
        "first_count": timeline[first][1],
        "timed_records": counted,
        "polls_in_copy": done - start,
        "resolution_limited": limited,
    }


class _CopyWatch(threading.Thread):
    """Polls the destination's record count and the replicator's CPU every ``POLL_S`` until the copy is complete."""

    def __init__(self, counter: DestinationCount, replicator: Replicator, records: int) -> None:
        super().__init__(name="copy-watch", daemon=True)
        self.counter = counter
        self.replicator = replicator
        self.records = records
        self.meter = ProcessMeter()
        self.stop = threading.Event()
        self.started = time.monotonic()
        self.first: tuple[float, float] | None = None  # (time, CPU seconds) at the first copied record
        self.first_count = 0  # records already there at that first poll
        self.done: tuple[float, float] | None = None  # the same once every record is there
        self.timeline: list[tuple[float, int, float]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            asked = time.monotonic()
            try:
                count = self.counter.count()
            except KafkaException:
                # A slow metadata answer on a busy machine: skip this poll rather than end the watch.
                self.stop.wait(POLL_S)
                continue
            now = time.monotonic()
            cpu = self.meter.sample(self.replicator.pids())
            # The count is of some moment during the request: its middle stands for it.
            self.timeline.append((round((asked + now) / 2 - self.started, 4), count, round(cpu, 3)))
            if self.first is None and count > 0:
                self.first = (now, cpu)
                self.first_count = count
            if count >= self.records:
                self.done = (now, cpu)
                return
            self.stop.wait(POLL_S)
