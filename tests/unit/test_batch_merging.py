"""Small uncompressed batches merged into one (strait.worker.batch.merging), checked against
kafka-python's reader as an independent decoder over many generated cases."""

from __future__ import annotations

import random
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from strait.worker.batch import merging
from strait.worker.batch.records import (
    TIMESTAMP_TYPE_FLAG,
    CorruptBatch,
    parse_batch,
    rewrite,
    split_batches,
)


def build(base_offset: int, stamps: list[int], *, codec: int = 0, rng: random.Random | None = None) -> bytes:
    rng = rng or random.Random(0)
    builder = DefaultRecordBatchBuilder(2, codec, False, 1000 + base_offset, 3, 17, 1 << 22)
    for i, ts in enumerate(stamps):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 40))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 400))
        headers = [(f"h{j}", rng.randbytes(rng.randrange(0, 9))) for j in range(rng.randrange(0, 3))]
        builder.append(i, ts, key, value, headers)
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)
    return bytes(raw)


def records(raw: bytes | bytearray) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    batch = DefaultRecordBatch(bytes(raw))
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def run_of_batches(rng: random.Random, start: int) -> tuple[list[bytes], list[tuple]]:
    """Consecutive batches as a broker stores them, and every record they hold."""
    out, expected, offset = [], [], start
    clock = rng.randrange(1_600_000_000_000, 1_800_000_000_000)
    for _ in range(rng.randrange(1, 12)):
        count = rng.randrange(1, 9)
        # Out-of-order and far-apart timestamps too: deltas may be negative or large.
        stamps = [clock + rng.randrange(-5_000, 5_000) for _ in range(count)]
        clock += rng.choice([0, 1, 3, 1_000, 10**9])
        raw = build(offset, stamps, rng=rng)
        out.append(raw)
        expected += records(raw)
        offset += count
    return out, expected


def test_merged_batches_hold_the_same_records_at_the_same_offsets() -> None:
    rng = random.Random(7)
    for case in range(300):
        raws, expected = run_of_batches(rng, rng.randrange(0, 1 << 40))
        split = split_batches(b"".join(raws))
        assert all(merging.mergeable(b) for b in split.batches)
        merged = merging.merge(split.batches)
        assert merged.base_offset == split.batches[0].base_offset
        assert merged.last_offset == split.batches[-1].last_offset, case
        assert merged.record_count == len(expected)
        assert merged.max_timestamp == max(b.max_timestamp for b in split.batches)
        assert merged.crc_ok()
        assert records(merged.data) == expected, case
        # What is produced: our producer fields over the merged batch, still the same records.
        produced = rewrite(merged, producer_id=5, producer_epoch=1, base_sequence=40)
        assert records(produced) == [(o - merged.base_offset, *rest) for o, *rest in expected]
        header = parse_batch(memoryview(produced))
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 40)


def test_one_batch_is_returned_as_it_is_and_none_is_refused() -> None:
    batch = split_batches(build(10, [1, 2])).batches[0]
    assert merging.merge([batch]) is batch
    with pytest.raises(ValueError):
        merging.merge([])


def test_batches_with_offsets_between_them_are_not_merged() -> None:
    a, b = split_batches(build(0, [1, 2]) + build(5, [3])).batches
    assert not merging.follows(a, b)
    with pytest.raises(ValueError, match="does not follow"):
        merging.merge([a, b])


@pytest.mark.parametrize("codec", [1, 3])
def test_compressed_batches_are_not_mergeable(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for i in range(20):
        builder.append(i, i, None, b"compressible " * 20, [])
    batch = split_batches(bytes(builder.build())).batches[0]
    assert batch.attributes & 0x07 == codec
    assert not merging.mergeable(batch)


def test_large_log_append_time_and_compacted_batches_are_not_mergeable() -> None:
    big = split_batches(build(0, [1] * 60, rng=random.Random(3))).batches[0]
    assert big.size > merging.SMALL_BATCH_BYTES or merging.mergeable(big)
    large = split_batches(build(0, list(range(200)), rng=random.Random(4))).batches[0]
    assert large.size > merging.SMALL_BATCH_BYTES and not merging.mergeable(large)
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(merging.SMALL_BATCH_RECORDS):
        builder.append(i, i, None, b"x", [])
    many = split_batches(bytes(builder.build())).batches[0]
    assert many.size < merging.SMALL_BATCH_BYTES and not merging.mergeable(many)  # enough records already
    raw = bytearray(build(0, [1, 2]))
    raw[22] |= TIMESTAMP_TYPE_FLAG
    assert not merging.mergeable(parse_batch(memoryview(raw)))
    gapped = bytearray(build(0, [1, 2, 3]))
    struct.pack_into(">i", gapped, 23, 5)  # lastOffsetDelta 5 for 3 records: compacted
    assert not merging.mergeable(parse_batch(memoryview(gapped)))


def test_a_record_running_past_its_batch_is_refused() -> None:
    a, b = split_batches(build(0, [1]) + build(1, [2, 3])).batches
    broken = bytearray(b.data)
    struct.pack_into(">i", broken, 57, 3)  # claims a record more than it holds
    with pytest.raises(CorruptBatch):
        merging.merge([a, parse_batch(memoryview(broken))])


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31, -(2**31), 2**62, -(2**63)])
def test_varints_round_trip(value: int) -> None:
    from strait.worker.batch.records import read_varint

    out = bytearray()
    merging.write_varint(value, out)
    assert read_varint(bytes(out), 0) == (value, len(out))
