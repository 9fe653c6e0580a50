"""Throughput: copy a pre-filled topic; records/s, MB/s, CPU seconds per GB and peak RSS."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException

from strait.bench import reader, workload
from strait.bench.markdown import missing_words
from strait.bench.procstat import ProcessMeter
from strait.bench.replicator import Replicator
from strait.bench.scenarios.harness import (
    Bench,
    CommittedCount,
    DestinationCount,
    mean,
    ratio,
    running,
    topic_name,
    verdict,
)


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
) -> dict[str, Any]:
    """Copy a pre-filled topic; records/s, MB/s, CPU seconds per GB and peak RSS of the replicator.

    ``copies``: Strait's route ``copy`` modes to run (record, batch), each next to the same MM2 run.
    """
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for size in sizes:
            for compression in compressions:
                for workers in parallelism:
                    for system, copy in _systems(bench.order(repeat), copies):
                        mode = f" copy {copy}" if copy else ""
                        bench.log(
                            f"throughput: {system}{mode} x{workers}, {records:,} records of {size} B, "
                            f"compression {compression} (repeat {repeat + 1}/{repeats})"
                        )
                        run = _throughput_run(
                            bench, system, workers, size, compression, records, partitions, timeout_s, copy=copy
                        )
                        run["repeat"] = repeat
                        runs.append(run)
                        bench.log(f"  -> {_fmt_throughput(run)}")
    ratios = throughput_ratios(runs, sizes, compressions, parallelism, copies)
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
        },
        "runs": runs,
        "ratios": ratios,
    }


def _systems(order: Sequence[str], copies: Sequence[str]) -> list[tuple[str, str | None]]:
    """(system, Strait copy mode) in the run order; MM2 has no copy mode."""
    return [(system, copy) for system in order for copy in (copies if system == "strait" else [None])]


def throughput_ratios(
    runs: Sequence[dict[str, Any]],
    sizes: Sequence[int],
    compressions: Sequence[str],
    parallelism: Sequence[int],
    copies: Sequence[str] = ("record",),
) -> list[dict[str, Any]]:
    """Strait / MM2 per configuration and Strait copy mode: of the mean over repeats, and
    records/s of each system's best run. A run without a copy mode copied records."""
    rows = []
    for size in sizes:
        for compression in compressions:
            for workers, copy in [(w, c) for w in parallelism for c in copies]:
                config = (size, compression, workers)

                def values(
                    system: str, metric: str, config: tuple[int, str, int] = config, copy: str = copy
                ) -> list[float]:
                    return [
                        r[metric]
                        for r in runs
                        if (r["system"], r["size"], r["compression"], r["parallelism"]) == (system, *config)
                        and (system != "strait" or r.get("copy", "record") == copy)
                        and r.get(metric) is not None
                    ]

                def avg(system: str, metric: str) -> float | None:
                    return mean(values(system, metric))

                rows.append(
                    {
                        "size": size,
                        "compression": compression,
                        "parallelism": workers,
                        "copy": copy,
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
                )
    return rows


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
) -> dict[str, Any]:
    """One full copy. With ``delivery`` (Strait's route setting) the copy counts only once the
    records are visible to a ``read_committed`` reader, and the verifier reads ``read_committed``.
    ``copy``: Strait's route copy mode (batch or record)."""
    label = [system, workers, size, compression] + ([delivery] if delivery else []) + ([copy] if copy else [])
    run_dir = bench.run_dir(topic_name("throughput", *label))
    topic = topic_name("tp", uuid.uuid4().hex[:6], size, compression, system, workers)
    workload.create_topics(bench.src, [topic], partitions)
    expected = workload.prefill(bench.src, topic, partitions, records, size, compression=compression)
    replicator = bench.replicator(
        system, run_dir, parallelism=workers, compression=compression, delivery=delivery, strait_copy=copy
    )
    result: dict[str, Any] = {
        **({"delivery": delivery} if delivery else {}),
        **({"copy": copy} if copy else {}),
        "system": system,
        "parallelism": workers,
        "size": size,
        "compression": compression,
        "records": records,
        "bytes": records * size,
        "replicator": replicator.describe(),
        "logs": str(run_dir),
    }
    counter = (
        CommittedCount(bench.dst, {topic: partitions})
        if delivery == "exactly-once"
        else DestinationCount(bench.dst, {topic: partitions})
    )
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
        first, done = watch.first, watch.done
        if first is None or done is None:
            seen = watch.timeline[-1][1] if watch.timeline else 0
            result["error"] = f"copy incomplete after {timeout_s:.0f}s ({seen} records)"
        else:
            copy_s = max(done[0] - first[0], 1e-3)
            cpu_copy = done[1] - first[1]
            result.update(
                startup_s=round(first[0] - watch.started, 2),
                copy_s=round(copy_s, 2),
                total_s=round(done[0] - watch.started, 2),
                records_per_s=round(records / copy_s, 1),
                mb_per_s=round(records * size / copy_s / 1e6, 2),
                cpu_s_copy=round(cpu_copy, 2),
                cpu_s_total=round(done[1], 2),
                cpu_s_per_gb=round(cpu_copy / (records * size / 1e9), 1),
                first_count=watch.first_count,
            )
        # Every 100 ms is needed to time the copy, not to draw it: keep about 100 points per run.
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
    return result


class _CopyWatch(threading.Thread):
    """Polls the destination's record count and the replicator's CPU every 100 ms until the copy is complete."""

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
            try:
                count = self.counter.count()
            except KafkaException:
                # A slow metadata answer on a busy machine: skip this poll rather than end the watch.
                self.stop.wait(0.1)
                continue
            now = time.monotonic()
            cpu = self.meter.sample(self.replicator.pids())
            self.timeline.append((round(now - self.started, 3), count, round(cpu, 2)))
            if self.first is None and count > 0:
                self.first = (now, cpu)
                self.first_count = count
            if count >= self.records:
                self.done = (now, cpu)
                return
            self.stop.wait(0.1)
