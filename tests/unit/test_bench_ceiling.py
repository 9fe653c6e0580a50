"""The throughput benchmark's ceiling: reading Kafka's tools' output, their payloads, and the
report's table of every system against the ceiling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strait.bench.ceiling import (
    CONSUMER_SETTINGS,
    PAYLOADS,
    PRODUCER_SETTINGS,
    parse_consumer,
    parse_producer,
    payload_file,
)
from strait.bench.mirrormaker import write_properties
from strait.bench.report_throughput import ceiling_md, throughput_md

# ProducerPerformance prints a line every 5 s and a closing one with percentiles: the last counts.
PRODUCER_OUTPUT = """\
212345 records sent, 42469.0 records/sec (4.05 MB/sec), 310.5 ms avg latency, 820.0 ms max latency.
500000 records sent, 98765.4 records/sec (9.42 MB/sec), 250.10 ms avg latency, 900.00 ms max latency, \
240 ms 50th, 600 ms 95th, 800 ms 99th, 890 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
[2026-12-03 07:50:00,000] WARN some client warning (org.apache.kafka.clients.NetworkClient)
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-12-03 07:50:00:000, 2026-12-03 07:50:05:000, 47.6837, 9.5367, 500000, 100000.0000, 3000, 2000, \
23.8419, 250000.0000
"""


def test_the_producer_tools_closing_line_is_read() -> None:
    assert parse_producer(PRODUCER_OUTPUT) == {"records": 500000, "records_per_s": 98765.4, "mb_per_s": 9.42}
    assert parse_producer("Exception in thread main ...") is None


def test_the_consumer_tools_row_is_read_by_its_header_fetch_rates_without_the_group_join() -> None:
    assert parse_consumer(CONSUMER_OUTPUT) == {"records": 500000, "records_per_s": 250000.0, "mb_per_s": 23.8419}
    assert parse_consumer("start.time, end.time\n") is None  # a header without its row
    assert parse_consumer("nothing useful") is None
    assert parse_consumer("start.time, end.time\n1, 2\n") is None  # a row without the fetch rates


def test_payloads_are_newline_free_values_of_the_asked_size(tmp_path: Path) -> None:
    for size in (100, 1024):
        lines = payload_file(tmp_path / f"p{size}.txt", size).read_bytes().split(b"\n")
        assert len(lines) == PAYLOADS and {len(line) for line in lines} == {size}
        assert len(set(lines)) == PAYLOADS


def _run(system: str, size: int, rate: float, **fields: Any) -> dict[str, Any]:
    return {"system": system, "size": size, "compression": "none", "parallelism": 1, "records_per_s": rate, **fields}


def test_every_system_is_given_as_a_share_of_the_ceiling_of_its_size() -> None:
    runs = [
        _run("ceiling", 100, 400_000.0, write={"records_per_s": 400_000.0}, read={"records_per_s": 900_000.0}),
        _run("ceiling", 1024, 100_000.0, write={"records_per_s": 100_000.0}, read={"records_per_s": 300_000.0}),
        _run("strait", 100, 300_000.0, copy="batch"),
        _run("strait", 100, 100_000.0, copy="batch", repeat=1),
        _run("mm2", 100, 100_000.0, mm2_profile="tuned"),
        _run("mm2", 1024, 50_000.0),
        _run("strait", 100, 999_999.0, copy="batch", parallelism=2),  # not one worker: left out
    ]
    lines = ceiling_md(runs)
    header = next(line for line in lines if line.startswith("| payload | record"))
    assert header.endswith("| MM2 / ceiling | MM2 (tuned) / ceiling | Strait (batch) / ceiling |")
    # Runs written before payload kinds carried filler.
    row_100 = next(line for line in lines if line.startswith("| filler | 100 B"))
    # Strait (batch): (300,000 + 100,000) / 2 against 400,000; MM2 default has no 100 B run.
    assert row_100.endswith("| 400,000 | 900,000 | 400,000 | — | — | 0.25 | 0.50 |"), row_100
    row_1024 = next(line for line in lines if line.startswith("| filler | 1024 B"))
    assert row_1024.endswith("| 0.50 | — | — |"), row_1024


def test_without_ceiling_runs_the_throughput_tables_are_unchanged() -> None:
    runs = [_run("strait", 100, 300_000.0, copy="batch", records=10, verify={})]
    assert ceiling_md(runs) == []
    doc = {"runs": [*runs, _run("ceiling", 100, 1.0, error="write tool gave no result")], "ratios": []}
    rows = [line for line in throughput_md(doc) if line.startswith("| filler | 100 B")]
    # One row in the runs table (Strait's: the ceiling has its own table), one in the ceiling's.
    assert len(rows) == 2 and "Strait (batch)" in rows[0], rows
    assert "failed: write tool gave no result" in rows[1]


def test_the_tools_properties_are_escaped_and_private(tmp_path: Path) -> None:
    # They carry the clusters' Java security settings: a password, a private key.
    path = write_properties(tmp_path / "producer.properties", {"sasl.jaas.config": " x\nx", "acks": "all"})
    assert path.read_text() == "sasl.jaas.config=\\ x\\nx\nacks=all\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert PRODUCER_SETTINGS["acks"] == "all" and PRODUCER_SETTINGS["linger.ms"] == "25"
    assert CONSUMER_SETTINGS["max.poll.records"] == "5000"


def test_a_ceiling_is_compared_with_the_runs_of_its_payload_kind() -> None:
    runs = [
        _run("ceiling", 100, 400_000.0, payload="json", write={"records_per_s": 400_000.0}),
        _run("ceiling", 100, 800_000.0, payload="filler", write={"records_per_s": 800_000.0}),
        _run("strait", 100, 200_000.0, copy="batch", payload="json"),
        _run("strait", 100, 600_000.0, copy="batch", payload="filler"),
    ]
    lines = ceiling_md(runs)
    assert next(line for line in lines if line.startswith("| json | 100 B")).endswith("| 0.50 |")
    assert next(line for line in lines if line.startswith("| filler | 100 B")).endswith("| 0.75 |")
