"""The latency floor: reading Kafka's EndToEndLatency output (as the sandbox's Kafka 4.4 tool
prints it), finding the tool in the jars, combining two hops, and each latency row's distance
from the floor in the ratios and in BENCHMARKS.md."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from strait.bench.floor import combine_hops, end_to_end_arguments, end_to_end_class, parse_end_to_end
from strait.bench.report import render_markdown
from strait.bench.report_latency import over_floor_words
from strait.bench.scenarios.latency import latency_ratios

# `org.apache.kafka.tools.EndToEndLatency --bootstrap-server ... --num-records 3000 --producer-acks
# all --record-size 100` on a sandbox cluster (Kafka 4.4.0), on a fresh topic: a sample every
# 1,000th record (ms), the mean, then whole-ms percentiles.
NAMED_OUTPUT = """\
Topic "floor-e2e-3f9a1c" does not exist. Will create topic with 1 partition(s) and replication factor = 1
0\t997.749516
1000\t9.386089
2000\t15.839791
Avg latency: 12.6608 ms
Percentiles: 50th = 5, 99th = 82, 99.9th = 221
"""

# The same tool given positional arguments: a deprecation warning first.
POSITIONAL_OUTPUT = """\
WARNING: Positional argument usage is deprecated and will be removed in Apache Kafka 5.0. Please use named \
arguments instead: --bootstrap-server, --topic, --num-records, --producer-acks, --record-size, --command-config
0\t69.527942
Avg latency: 2.5050 ms
Percentiles: 50th = 1, 99th = 11, 99.9th = 69
"""


def test_the_tools_summary_and_samples_are_read() -> None:
    assert parse_end_to_end(NAMED_OUTPUT) == {
        "mean_ms": 12.6608,
        "p50_ms": 5.0,
        "p99_ms": 82.0,
        "p999_ms": 221.0,
        "samples_ms": [[0, 997.749516], [1000, 9.386089], [2000, 15.839791]],
    }
    parsed = parse_end_to_end(POSITIONAL_OUTPUT)
    assert parsed is not None and (parsed["mean_ms"], parsed["p50_ms"], parsed["p99_ms"]) == (2.505, 1.0, 11.0)


def test_output_without_a_summary_is_no_result() -> None:
    failed = '0\t12.5\nException in thread "main" org.apache.kafka.common.errors.TimeoutException: ...\n'
    assert parse_end_to_end(failed) is None
    assert parse_end_to_end("Avg latency: 2.5050 ms\n") is None  # cut off before the percentiles


def test_the_tool_is_found_in_the_jars_newest_class_first(tmp_path: Path) -> None:
    def jar(name: str, *classes: str) -> None:
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            for cls in classes:
                archive.writestr(cls, b"")

    (tmp_path / "broken.jar").write_bytes(b"not a zip")
    jar("kafka-clients.jar", "org/apache/kafka/clients/producer/KafkaProducer.class")
    assert end_to_end_class(tmp_path) is None
    jar("kafka_2.13.jar", "kafka/tools/EndToEndLatency.class")
    assert end_to_end_class(tmp_path) == "kafka.tools.EndToEndLatency"
    jar("kafka-tools.jar", "org/apache/kafka/tools/EndToEndLatency.class")
    assert end_to_end_class(tmp_path) == "org.apache.kafka.tools.EndToEndLatency"


def test_named_arguments_for_the_tools_class_positional_for_the_old_one() -> None:
    config = Path("/tmp/e2e.properties")
    named = end_to_end_arguments("org.apache.kafka.tools.EndToEndLatency", "127.0.0.1:9092", "t", 500, 100, config)
    assert named == [
        "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", "--num-records", "500",
        "--producer-acks", "all", "--record-size", "100", "--command-config", "/tmp/e2e.properties",
    ]  # fmt: skip
    old = end_to_end_arguments("kafka.tools.EndToEndLatency", "127.0.0.1:9092", "t", 500, 100, config)
    assert old == ["127.0.0.1:9092", "t", "500", "all", "100", "/tmp/e2e.properties"]


def test_two_hops_combine_into_a_floor_whose_tail_is_below_the_sum_of_the_tails() -> None:
    constant = combine_hops([1000] * 500, [2000] * 800)
    assert (constant["p50_ms"], constant["p99_ms"], constant["max_ms"]) == (3.0, 3.0, 3.0)
    # 1 % slow records on each hop: a record is rarely slow on both.
    source = [1000] * 990 + [50_000] * 10
    destination = [1000] * 990 + [50_000] * 10
    combined = combine_hops(source, destination)
    assert combined["p50_ms"] == 2.0
    assert 2.0 < combined["p99_ms"] <= 51.0 < 100.0
    assert combine_hops(source, destination) == combined  # seeded
    assert combine_hops([], destination) == {"count": 0}


def _run(system: str, rate: float, p50: float, p99: float, payload: str | None = "json") -> dict[str, Any]:
    return {
        "system": system,
        "rate": rate,
        "latency": {"p50_ms": p50, "p99_ms": p99, "p999_ms": p99 * 2, "max_ms": p99 * 3, "count": 1000},
        "verify": {"missing": 0, "duplicated": 0, "out_of_order": 0},
        **({"payload": payload} if payload else {}),
    }


def _hops(rate: float, p50: float, p99: float, repeat: int = 0) -> dict[str, Any]:
    hop = {"count": 500, "p50_ms": p50 / 2, "p99_ms": p99 / 2}
    return {
        "rate": rate,
        "repeat": repeat,
        "source": hop,
        "destination": hop,
        "latency": {"count": 1000, "p50_ms": p50, "p99_ms": p99, "p999_ms": p99 * 2},
    }


def test_each_rate_says_how_far_each_system_is_above_the_floor() -> None:
    runs = [_run("strait", 1000, 3.0, 9.0), _run("mm2", 1000, 4.0, 12.0), _run("strait", 1000, 30.0, 90.0, "filler")]
    floors = [_hops(1000, 2.0, 6.0), _hops(1000, 2.0, 8.0, repeat=1)]
    rows = latency_ratios(runs, [1000, 10000], ["json", "filler"], floors)
    json_row = next(r for r in rows if r["payload"] == "json" and r["rate"] == 1000)
    assert (json_row["floor_p50_ms"], json_row["floor_p99_ms"]) == (2.0, 7.0)
    assert (json_row["strait_over_floor_p50_ms"], json_row["strait_over_floor_p99_ms"]) == (1.0, 2.0)
    assert (json_row["mm2_over_floor_p50_ms"], json_row["mm2_over_floor_p99_ms"]) == (2.0, 5.0)
    assert json_row["p50_ms"] == 0.75
    filler_row = next(r for r in rows if r["payload"] == "filler" and r["rate"] == 1000)
    assert filler_row["strait_p50_ms"] == 30.0 and filler_row["strait_over_floor_p50_ms"] == 28.0
    no_floor = next(r for r in rows if r["payload"] == "json" and r["rate"] == 10000)
    assert "floor_p50_ms" not in no_floor
    # Results written before payload kinds carried filler.
    assert latency_ratios([_run("strait", 1000, 3.0, 9.0, payload=None)], [1000])[0]["strait_p50_ms"] == 3.0


def test_over_floor_words() -> None:
    assert over_floor_words(3.0, 2.0) == "+1.0 (1.5x)"
    assert over_floor_words(1.5, 2.0) == "-0.5 (0.8x)"
    assert over_floor_words(None, 2.0) == "—" and over_floor_words(3.0, None) == "—"


def test_the_report_shows_the_floor_and_each_rows_distance_from_it() -> None:
    runs = [_run("strait", 1000, 3.0, 9.0), _run("mm2", 1000, 4.0, 12.0)]
    floors = {
        "hops": [_hops(1000, 2.0, 6.0)],
        "end_to_end": [
            {
                "tool": "org.apache.kafka.tools.EndToEndLatency",
                "records": 5000,
                "size": 100,
                "repeat": 0,
                "latency": parse_end_to_end(POSITIONAL_OUTPUT),
            }
        ],
    }
    doc = {
        "scenario": "latency",
        "params": {
            "rates": [1000],
            "payloads": ["json"],
            "payload_compression": {"json": {"100": {"lz4": 2.82, "zstd": 4.41}}},
        },
        "runs": runs,
        "floor": floors,
        "ratios": latency_ratios(runs, [1000], ["json"], floors["hops"]),
    }
    text = render_markdown({"latency": doc})
    assert "`json`, generated JSON events" in text and "raw / compressed 100 B lz4 2.8x, zstd 4.4x" in text
    assert "| 1,000 | json | Strait | 1 | — | 3.0 | 9.0 | 18.0 | 27.0 | +1.0 (1.5x) | +3.0 (1.5x) |" in text
    assert "| 1,000 | 1 | 1.0 / 3.0 | 1.0 / 3.0 | 2.0 | 6.0 | 12.0 | 0 |" in text
    assert "`org.apache.kafka.tools.EndToEndLatency`" in text and "| 1 | 2.5 | 1 | 11 | 69 |" in text
    assert "| 1,000 | json | 0.75 | 0.75 |" in text and "| 2.0 / 6.0 | +1.0 / +3.0 | +2.0 / +6.0 |" in text
    summary = next(line for line in text.splitlines() if line.startswith("- **Latency**"))
    assert "json records" in summary and "floor (one produce + one fetch on each cluster) at 1,000/s p50 2.0" in summary
    assert "EndToEndLatency (one record at a time) p50 1 ms, p99 11 ms" in summary
