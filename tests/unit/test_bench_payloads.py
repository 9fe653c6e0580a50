"""The benchmark's record bodies: json events compress like real event data (lz4 2-4x), filler far
more; the same seed writes the same bytes in every process; the stamp stays readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strait.bench.ceiling import PAYLOADS as CEILING_PAYLOADS
from strait.bench.ceiling import payload_file
from strait.bench.records import (
    BATCH_BYTES,
    STAMP_SIZE,
    Stamp,
    _json_pool,
    compression_ratios,
    decode,
    encode,
    payload_pool,
    pool_size,
)


@pytest.mark.parametrize("size", [100, 512, 1024])
def test_json_records_compress_like_real_events_and_filler_far_more(size: int) -> None:
    json_ratios = compression_ratios("json", size)
    filler_ratios = compression_ratios("filler", size)
    assert 2.0 <= json_ratios["lz4"] <= 4.0, json_ratios
    assert 2.0 <= json_ratios["gzip"] <= 6.0 and 2.0 <= json_ratios["zstd"] <= 6.0, json_ratios
    assert filler_ratios["lz4"] > 2 * json_ratios["lz4"], filler_ratios


def test_the_same_seed_builds_the_same_events_and_another_seed_others() -> None:
    first = _json_pool(76, 7)
    assert _json_pool(76, 7) == first
    other = _json_pool(76, 8)
    assert other != first and len(set(first) & set(other)) == 0
    # The default pool is the seeded one, whatever process builds it.
    assert payload_pool("json", 76) == _json_pool(76, 1)


@pytest.mark.parametrize("size", [24, 40, 100, 1024])
def test_every_record_keeps_its_stamp_and_size(size: int) -> None:
    for partition, seq in [(0, 0), (3, 1), (7, 123_456_789)]:
        value = encode(partition, seq, 1_733_300_000_123_456, size, "json")
        assert len(value) == size
        assert decode(value) == Stamp(partition, seq, 1_733_300_000_123_456)


@pytest.mark.parametrize("size", [40, 100, 1024])
def test_json_bodies_are_json_events_distinct_from_100_bytes(size: int) -> None:
    pool = payload_pool("json", size - STAMP_SIZE)
    events = [json.loads(body) for body in pool]
    assert all("q" in e for e in events)  # the field that pads an event to its size
    if size >= 100:
        assert len(set(pool)) == len(pool) == pool_size(size - STAMP_SIZE)
        assert len(pool) * (size - STAMP_SIZE) >= BATCH_BYTES  # no body twice in a producer batch
        assert len({e["type"] for e in events}) > 5 and len({e["user"] for e in events}) > len(pool) * 0.9
    if size >= 1024:
        assert all(e["items"] for e in events)  # larger events carry line items


def test_a_batch_of_one_partition_repeats_no_body() -> None:
    size = 100
    per_batch = BATCH_BYTES // size
    bodies = [encode(2, seq, 0, size, "json")[STAMP_SIZE:] for seq in range(1000, 1000 + per_batch)]
    assert len(set(bodies)) == per_batch


def test_filler_is_the_same_text_in_every_record_as_before() -> None:
    bodies = {encode(p, seq, 0, 100, "filler")[STAMP_SIZE:] for p in range(3) for seq in range(50)}
    assert len(bodies) == 1
    assert encode(0, 0, 0, 100) == encode(0, 0, 0, 100, "filler")
    assert next(iter(bodies)).startswith(b"order ")


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="json, filler"):
        encode(0, 0, 0, 100, "xml")


def test_the_ceiling_tools_payloads_are_of_the_runs_kind(tmp_path: Path) -> None:
    lines = payload_file(tmp_path / "p.txt", 100, "json").read_bytes().split(b"\n")
    assert len(lines) == CEILING_PAYLOADS and {len(line) for line in lines} == {100}
    assert all(line[STAMP_SIZE:].startswith(b"{") for line in lines)


def test_throughput_ratios_compare_runs_of_the_same_payload_kind() -> None:
    from strait.bench.scenarios.throughput import throughput_ratios

    def run(system: str, rate: float, payload: str | None) -> dict[str, object]:
        return {
            "system": system,
            "size": 100,
            "compression": "lz4",
            "parallelism": 1,
            "records_per_s": rate,
            **({"payload": payload} if payload else {}),
        }

    runs = [run("strait", 300.0, "json"), run("mm2", 100.0, "json"), run("strait", 900.0, "filler")]
    runs.append(run("mm2", 300.0, None))  # written before payload kinds: filler
    rows = throughput_ratios(runs, [100], ["lz4"], [1], payloads=["json", "filler"])
    assert [(r["payload"], r["records_per_s"]) for r in rows] == [("json", 3.0), ("filler", 3.0)]


def test_the_throughput_report_states_the_kinds_and_sums_up_the_headline_kind_only() -> None:
    from strait.bench.report import render_markdown
    from strait.bench.scenarios.throughput import payload_compression, throughput_ratios

    def run(system: str, rate: float, payload: str) -> dict[str, object]:
        return {
            "system": system,
            "size": 100,
            "compression": "lz4",
            "parallelism": 1,
            "records_per_s": rate,
            "payload": payload,
        }

    runs = [run("strait", 300.0, "json"), run("mm2", 100.0, "json")]
    runs += [run("strait", 900.0, "filler"), run("mm2", 100.0, "filler")]
    params = {"payloads": ["json", "filler"], "payload_compression": payload_compression(["json", "filler"], [100])}
    ratios = throughput_ratios(runs, [100], ["lz4"], [1], payloads=["json", "filler"])
    text = render_markdown({"throughput": {"scenario": "throughput", "params": params, "runs": runs, "ratios": ratios}})
    summary = next(line for line in text.splitlines() if line.startswith("- **Throughput**"))
    assert "json records): 3.00 over the 1 configurations" in summary
    stated = next(line for line in text.splitlines() if line.startswith("Payload"))
    assert "`json` (headline), generated JSON events" in stated and "`filler` (extra rows)" in stated
    assert f"lz4 {params['payload_compression']['json']['100']['lz4']:.1f}x" in stated
    assert "| filler | 100 B | lz4 | 1 | Strait |" in text and "| json | 100 B | lz4 | 1 | record |" in text
