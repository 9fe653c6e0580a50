"""The ceiling of a copy on this machine: Kafka's own tools read the source and write the
destination at the same time, with no replicator between them.

``ConsumerPerformance`` reads the pre-filled source topic while ``ProducerPerformance`` writes
as many records of the same size and codec to a fresh destination topic (producer settings of
MirrorMaker 2's ``tuned`` profile, acks=all). A copy needs both at once on the same two cores,
so the slower of the two rates bounds what a replicator that decodes and re-encodes records can
reach here; a replicator's records/s against it shows the gap to that limit. A copy of
whole batches (Strait's batch mode) re-encodes nothing and can pass it. The tools' payloads are
bodies of the benchmark's own kind (so lz4 compresses them alike) but not the same bytes.

Each rate is the tool's own: ProducerPerformance's from its first send to its last
acknowledgement, ConsumerPerformance's over its fetching (the group join excluded), both with
the JVM's warm-up inside (the replicators' rates exclude start-up: first to last record). CPU
is each tool's whole life (``wait4``'s rusage, JVM start-up included): an upper bound next to
the replicators' CPU, which counts only the copy.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strait.bench import workload
from strait.bench.mirrormaker import MM2_PROFILES, java_client_properties, write_properties
from strait.bench.records import STAMP_SIZE, encode
from strait.sandbox import artifacts
from strait.sandbox.process import JVM_OPTIONS, java_binary

PRODUCER_CLASS = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_CLASS = "org.apache.kafka.tools.ConsumerPerformance"


def _client_settings(prefix: str) -> dict[str, str]:
    """MirrorMaker 2's tuned settings of one of its clients (``dst.producer.``, ``src.consumer.``)."""
    return {k.removeprefix(prefix): v for k, v in MM2_PROFILES["tuned"].items() if k.startswith(prefix)}


# What a careful operator's producer and consumer use for a bulk copy (MirrorMaker 2's tuned profile).
PRODUCER_SETTINGS = {"acks": "all", **_client_settings("dst.producer.")}
CONSUMER_SETTINGS = _client_settings("src.consumer.")
# Distinct payloads ProducerPerformance picks from at random.
PAYLOADS = 1000

_SENT = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def parse_producer(output: str) -> dict[str, float] | None:
    """ProducerPerformance's closing line: records, records/s, MB/s (None without one)."""
    found = _SENT.findall(output)
    if not found:
        return None
    records, rate, mb = found[-1]
    return {"records": int(records), "records_per_s": float(rate), "mb_per_s": float(mb)}


def parse_consumer(output: str) -> dict[str, float] | None:
    """ConsumerPerformance's result row by its header: records, and records/s and MB/s while
    fetching (group join excluded, as the replicators' start-up is); None without one."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if header_at is None or header_at + 1 >= len(lines):
        return None
    header = [h.strip() for h in lines[header_at].split(",")]
    values = [v.strip() for v in lines[header_at + 1].split(",")]
    row = dict(zip(header, values, strict=False))
    try:
        return {
            "records": int(float(row["data.consumed.in.nMsg"])),
            "records_per_s": float(row["fetch.nMsg.sec"]),
            "mb_per_s": float(row["fetch.MB.sec"]),
        }
    except (KeyError, ValueError):
        return None


def payload_file(path: Path, size: int, payload: str = "filler") -> Path:
    """``PAYLOADS`` newline-separated values of ``size`` bytes, bodies of the benchmark's ``payload`` kind."""
    lines = []
    for i in range(PAYLOADS):
        # The stamp is binary: stand in for it with digits of the same length, newline-free.
        text = f"{i:0{STAMP_SIZE}d}".encode()[:STAMP_SIZE] + encode(0, i, 0, size, payload)[STAMP_SIZE:]
        lines.append(text[:size].replace(b"\n", b" "))
    path.write_bytes(b"\n".join(lines))
    return path


def ceiling_run(
    src: Mapping[str, Any],
    dst: Mapping[str, Any],
    run_dir: Path,
    *,
    size: int,
    compression: str,
    records: int,
    partitions: int,
    timeout_s: float = 600.0,
    payload: str = "filler",
) -> dict[str, Any]:
    """One ceiling measurement (see the module doc) with bodies of the ``payload`` kind; an
    ``error`` entry when a tool failed."""
    tag = uuid.uuid4().hex[:6]
    source_topic, destination_topic = f"ceiling-{tag}-{size}-{compression}", f"ceiling-{tag}-{size}-{compression}-dst"
    workload.create_topics(src, [source_topic], partitions)
    workload.create_topics(dst, [destination_topic], partitions)
    workload.prefill(src, source_topic, partitions, records, size, compression=compression, payload=payload)
    classpath = artifacts.classpath("kafka")
    producer_config = write_properties(
        run_dir / "producer.properties",
        {**java_client_properties(dst), **PRODUCER_SETTINGS, "compression.type": compression},
    )
    consumer_config = write_properties(
        run_dir / "consumer.properties",
        {**java_client_properties(src), **CONSUMER_SETTINGS, "auto.offset.reset": "earliest"},
    )
    tools = {
        "write": [
            PRODUCER_CLASS,
            "--bootstrap-server",
            str(dst["bootstrap.servers"]),
            "--topic",
            destination_topic,
            "--num-records",
            str(records),
            "--throughput",
            "-1",
            "--payload-file",
            str(payload_file(run_dir / "payloads.txt", size, payload)),
            "--command-config",
            str(producer_config),
        ],
        "read": [
            CONSUMER_CLASS,
            "--bootstrap-server",
            str(src["bootstrap.servers"]),
            "--topic",
            source_topic,
            "--num-records",
            str(records),
            "--group",
            f"strait-bench-ceiling-{tag}",
            "--command-config",
            str(consumer_config),
        ],
    }
    outputs = {name: run_dir / f"{name}.log" for name in tools}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name, args in tools.items():
        with open(outputs[name], "wb") as log:
            procs[name] = subprocess.Popen(
                [java_binary(), "-Xmx256m", *JVM_OPTIONS, "-cp", classpath, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
    usage = _wait_all(procs, timeout_s)
    result: dict[str, Any] = {
        "system": "ceiling",
        "parallelism": 1,
        "size": size,
        "compression": compression,
        "payload": payload,
        "records": records,
        "bytes": records * size,
        "logs": str(run_dir),
        "producer_settings": {**PRODUCER_SETTINGS, "compression.type": compression},
        "consumer_settings": CONSUMER_SETTINGS,
    }
    write = parse_producer(outputs["write"].read_text(errors="replace"))
    read = parse_consumer(outputs["read"].read_text(errors="replace"))
    failed = [name for name, parsed in (("write", write), ("read", read)) if parsed is None]
    if failed or write is None or read is None:
        codes = {name: usage[name][0] for name in failed}
        result["error"] = f"{', '.join(failed)} tool gave no result (exit codes {codes}; logs in {run_dir})"
        return result
    cpu = sum(u[1] for u in usage.values())
    slower = min(write["records_per_s"], read["records_per_s"])
    result.update(
        {
            "write": write,
            "read": read,
            "records_per_s": round(slower, 1),
            "mb_per_s": round(slower * size / 1e6, 2),
            "cpu_s": round(cpu, 2),
            "cpu_s_per_gb": round(cpu / (records * size / 1e9), 1),
            "peak_rss_mb": round(sum(u[2] for u in usage.values()), 1),
        }
    )
    return result


def _wait_all(procs: Mapping[str, subprocess.Popen[bytes]], timeout_s: float) -> dict[str, tuple[int, float, float]]:
    """Wait for every tool (killing any still running at the deadline): exit code, CPU seconds
    and peak RSS in MB of each, from its rusage."""
    deadline = time.monotonic() + timeout_s
    usage: dict[str, tuple[int, float, float]] = {}
    while len(usage) < len(procs):
        for name, proc in procs.items():
            if name in usage:
                continue
            if time.monotonic() > deadline:
                proc.kill()
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG if time.monotonic() <= deadline else 0)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                usage[name] = (proc.returncode, rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss / 1024)
        time.sleep(0.05)
    return usage
