"""The latency floor on this machine: what Kafka itself takes to carry a record, with no replicator.

Two figures anchor every latency row:

- **Kafka's end-to-end latency tool** (``EndToEndLatency`` from the sandbox's Kafka jars) on
  the source cluster: one record in flight at a time, sent (linger 0, acks as given) and read
  back by a consumer that polls without a fetch wait; its percentiles are whole milliseconds,
  as the tool prints them (truncated), and include its JVM's warm-up.
- **One produce and one fetch on each cluster** (:func:`combine_hops`): the benchmark's own
  producer and reader, at the latency run's rate, on the source and then on the destination
  (a replicated record meets a produce and a fetch on the source, then a produce and the
  reader's fetch on the destination). A replicated record makes both hops, so their sum is what
  a replicator that added no time of its own would show.
"""

from __future__ import annotations

import random
import re
import subprocess
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strait.bench import workload
from strait.bench.mirrormaker import java_client_properties, write_properties
from strait.bench.stats import latency_summary
from strait.sandbox import artifacts
from strait.sandbox.process import JVM_OPTIONS, java_binary

# The tool's class: kafka-tools since Kafka 3.7, the core jar's Scala one before.
END_TO_END_CLASSES = ("org.apache.kafka.tools.EndToEndLatency", "kafka.tools.EndToEndLatency")

_AVG = re.compile(r"^Avg latency: ([\d.]+) ms\s*$", re.MULTILINE)
_PERCENTILES = re.compile(r"^Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)\s*$", re.MULTILINE)
_SAMPLE = re.compile(r"^(\d+)\t([\d.]+)\s*$", re.MULTILINE)


def parse_end_to_end(output: str) -> dict[str, Any] | None:
    """The tool's summary: mean and p50 / p99 / p99.9 in ms (whole ms, truncated, as it prints
    them), and the sampled latencies it prints every 1,000th record; None without a summary."""
    avg = _AVG.findall(output)
    percentiles = _PERCENTILES.findall(output)
    if not avg or not percentiles:
        return None
    p50, p99, p999 = (float(v) for v in percentiles[-1])
    return {
        "mean_ms": float(avg[-1]),
        "p50_ms": p50,
        "p99_ms": p99,
        "p999_ms": p999,
        "samples_ms": [[int(i), float(ms)] for i, ms in _SAMPLE.findall(output)],
    }


def end_to_end_class(jars: Path) -> str | None:
    """Which of :data:`END_TO_END_CLASSES` the jars in ``jars`` hold (the first found), if any."""
    wanted = {name.replace(".", "/") + ".class": name for name in END_TO_END_CLASSES}
    found = set()
    for jar in sorted(jars.glob("*.jar")):
        try:
            with zipfile.ZipFile(jar) as archive:
                found |= {wanted[n] for n in archive.namelist() if n in wanted}
        except (OSError, zipfile.BadZipFile):
            continue
    return next((name for name in END_TO_END_CLASSES if name in found), None)


def end_to_end_arguments(tool: str, bootstrap: str, topic: str, records: int, size: int, config: Path) -> list[str]:
    """The tool's arguments: named ones for the kafka-tools class (positional ones are deprecated
    there), positional ones for the old Scala class, which knows no others."""
    if tool.startswith("org.apache"):
        return [
            "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
            "--producer-acks", "all", "--record-size", str(size), "--command-config", str(config),
        ]  # fmt: skip
    return [bootstrap, topic, str(records), "all", str(size), str(config)]


def end_to_end_run(
    props: Mapping[str, Any], run_dir: Path, *, records: int, size: int, timeout_s: float = 600.0
) -> dict[str, Any]:
    """Kafka's end-to-end latency tool on the cluster of ``props``: ``records`` records of ``size``
    bytes, one at a time, acks=all, on a fresh one-partition topic; an ``error`` entry when it failed."""
    jars = artifacts.resolve("kafka")
    tool = end_to_end_class(jars)
    result: dict[str, Any] = {"records": records, "size": size, "acks": "all", "logs": str(run_dir)}
    if tool is None:
        result["error"] = f"no EndToEndLatency class in the Kafka jars of {jars}"
        return result
    result["tool"] = tool
    topic = f"floor-e2e-{uuid.uuid4().hex[:6]}"
    workload.create_topics(props, [topic], 1)
    config = write_properties(run_dir / "e2e.properties", java_client_properties(props))
    output = run_dir / "e2e.log"
    args = end_to_end_arguments(tool, str(props["bootstrap.servers"]), topic, records, size, config)
    with open(output, "wb") as log:
        try:
            code = subprocess.run(
                [java_binary(), "-Xmx256m", *JVM_OPTIONS, "-cp", artifacts.classpath("kafka"), tool, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    parsed = parse_end_to_end(output.read_text(errors="replace"))
    if parsed is None:
        why = "timed out" if code is None else f"exit code {code}"
        result["error"] = f"EndToEndLatency gave no result ({why}; log {output})"
        return result
    result["latency"] = parsed
    return result


# Pairs drawn to combine two hops: enough for a steady p99.9.
COMBINED_PAIRS = 200_000


def combine_hops(source_us: Sequence[int], destination_us: Sequence[int], *, seed: int = 0) -> dict[str, float]:
    """The latency summary (ms) of a record that makes both hops, each hop's latency an independent
    draw from its measured ones (``COMBINED_PAIRS`` seeded draws); ``{"count": 0}`` if either is empty.

    Adding the hops' percentiles instead would overstate the tail: two hops are rarely slow at once."""
    if not source_us or not destination_us:
        return {"count": 0}
    rng = random.Random(seed)
    pairs = min(COMBINED_PAIRS, max(len(source_us), len(destination_us)))
    sums = [rng.choice(source_us) + rng.choice(destination_us) for _ in range(pairs)]
    return latency_summary(sums)
