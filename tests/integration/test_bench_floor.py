"""The latency benchmark's floor and its payloads on the real sandbox: Kafka's EndToEndLatency
tool from the sandbox's jars runs and is read, the two hops are measured on both clusters, and a
json backlog compressed with lz4 takes on the broker's disk about what the report says."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strait.bench import workload
from strait.bench.floor import END_TO_END_CLASSES, end_to_end_run
from strait.bench.records import compression_ratios
from strait.bench.scenarios import Bench
from strait.bench.scenarios.latency import _floor_run
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_kafkas_end_to_end_tool_runs_on_the_source_and_is_read(sandbox: Sandbox, tmp_path: Path) -> None:
    run = end_to_end_run(sandbox.clusters["src"].props(), tmp_path, records=300, size=100)

    assert "error" not in run, f"{run['error']} (log: {tmp_path / 'e2e.log'})"
    assert run["tool"] in END_TO_END_CLASSES
    latency = run["latency"]
    assert 0 <= latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"]
    assert latency["mean_ms"] > 0 and latency["samples_ms"][0][0] == 0


@pytest.mark.timeout(300)
def test_one_produce_and_one_fetch_are_measured_on_both_clusters(sandbox: Sandbox, tmp_path: Path) -> None:
    bench = Bench(sandbox=sandbox, workdir=tmp_path, log=lambda _m: None)

    run = _floor_run(bench, 200, 2.0, 1.0, 2, 100, "json")

    assert "error" not in run, f"{run['error']} (logs: {run['logs']})"
    for role in ("source", "destination"):
        hop = run[role]
        assert hop["count"] >= 300 and "missing" not in hop, hop  # 2 s measured at 200/s, every record read
    both = run["latency"]
    assert both["count"] > 0
    # Two hops take longer than either alone.
    assert both["p50_ms"] >= max(run["source"]["p50_ms"], run["destination"]["p50_ms"])


def _topic_bytes_on_disk(sandbox: Sandbox, topic: str) -> int:
    broker = sandbox.clusters["src"].brokers[0]
    return sum(f.stat().st_size for d in broker.log_dirs for f in Path(d).glob(f"{topic}-*/*.log") if f.is_file())


@pytest.mark.timeout(300)
def test_a_json_backlog_compresses_on_the_broker_about_as_the_report_says(sandbox: Sandbox) -> None:
    props = sandbox.clusters["src"].props()
    records, size = 20_000, 100
    ratios = {}
    for kind, codec in [("json", "lz4"), ("json", "zstd"), ("filler", "lz4")]:
        topic = f"payload-{kind}-{codec}-{uuid.uuid4().hex[:6]}"
        workload.create_topics(props, [topic], 2)
        workload.prefill(props, topic, 2, records, size, compression=codec, payload=kind)
        ratios[(kind, codec)] = records * size / _topic_bytes_on_disk(sandbox, topic)

    for codec in ("lz4", "zstd"):
        stated = compression_ratios("json", size)[codec]
        # On disk each record also carries its framing (offset and timestamp deltas, lengths) and
        # each batch its header; zstd's window spans a whole batch, so a body repeated within one
        # would show here as a ratio far above the stated one.
        assert 0.7 * stated <= ratios[("json", codec)] <= 1.2 * stated, (codec, ratios, stated)
    assert 2.0 <= ratios[("json", "lz4")] <= 4.0, ratios
    assert ratios[("filler", "lz4")] > 2 * ratios[("json", "lz4")], ratios
