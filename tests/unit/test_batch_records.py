"""Record batch v2 parsing and rewriting (strait.worker.batch.records), checked against
kafka-python's own reader as an independent implementation."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from strait.worker.batch import records as rb
from strait.worker.batch.records import Codec, CorruptBatch, TimestampType, split_batches


def build(
    base_offset: int = 0,
    count: int = 3,
    *,
    codec: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
    deltas: list[int] | None = None,
    leader_epoch: int = 7,
    ts: int = 1_700_000_000_000,
) -> bytes:
    """A real v2 batch (kafka-python's builder), placed at ``base_offset`` like a broker would."""
    pid, epoch, seq = producer
    builder = DefaultRecordBatchBuilder(2, codec, transactional, pid, epoch, seq, 1 << 20)
    for i, delta in enumerate(deltas if deltas is not None else range(count)):
        builder.append(delta, ts + i, f"k{base_offset + i}".encode(), b"v" * (i + 1), [("h", b"x%d" % i)])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)
    struct.pack_into(">i", raw, 12, leader_epoch)  # not covered by the CRC, as on a broker
    return bytes(raw)


def patch_attributes(raw: bytes, set_bits: int) -> bytes:
    out = bytearray(raw)
    attrs = struct.unpack_from(">h", out, 21)[0] | set_bits
    struct.pack_into(">h", out, 21, attrs)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def control_batch(base_offset: int, producer_id: int, kind: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, 0, -1, 1 << 10)
    builder.append(0, 1, struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0), [])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)
    return patch_attributes(bytes(raw), rb.CONTROL_FLAG)


def decoded(raw: bytes | bytearray) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    batch = DefaultRecordBatch(bytes(raw))
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def test_header_fields_match_kafka_python() -> None:
    raw = build(100, 4, producer=(42, 3, 17), transactional=True, codec=1)
    [batch] = split_batches(raw).batches
    other = DefaultRecordBatch(raw)
    assert batch.base_offset == other.base_offset == 100
    assert batch.size == len(raw)
    assert batch.partition_leader_epoch == 7
    assert batch.magic == 2
    assert batch.crc == other.crc and batch.crc_ok()
    assert batch.codec is Codec.GZIP
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert batch.last_offset_delta == 3 and batch.last_offset == 103 and batch.next_offset == 104
    assert (batch.base_timestamp, batch.max_timestamp) == (other.first_timestamp, other.max_timestamp)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 17)
    assert batch.record_count == 4 and not batch.has_inner_gaps
    assert bytes(batch.data) == raw


def test_split_concatenated_batches_and_truncated_tail() -> None:
    blobs = [build(0, 3), build(3, 2, codec=1), build(5, 5)]
    whole = b"".join(blobs)
    result = split_batches(whole)
    assert [b.base_offset for b in result.batches] == [0, 3, 5]
    assert not result.truncated and result.legacy_offset is None
    for cut in (1, 11, 12, 16, 17, 60, len(blobs[2]) - 1):
        partial = split_batches(whole[: len(whole) - cut])
        assert [b.base_offset for b in partial.batches] == [0, 3]
        assert partial.truncated
    assert split_batches(b"") == rb.SplitResult([], truncated=False)


def test_split_is_zero_copy() -> None:
    whole = bytearray(build(0, 3) + build(3, 1))
    batches = split_batches(whole).batches
    whole[len(whole) - 1] ^= 0xFF
    assert batches[1].data[-1] == whole[-1]  # a view, not a copy


def test_legacy_message_stops_split() -> None:
    legacy = struct.pack(">qiIbb", 9, 14, 0, 1, 0) + b"\x00" * 9  # offset 9, magic 1
    result = split_batches(build(0, 3) + legacy + build(10, 1))
    assert [b.base_offset for b in result.batches] == [0]
    assert result.legacy_offset == 9 and result.legacy_magic == 1


def test_corrupt_lengths_are_refused() -> None:
    raw = bytearray(build(0, 3))
    struct.pack_into(">i", raw, 8, 20)
    with pytest.raises(CorruptBatch):
        split_batches(raw)
    raw = bytearray(build(0, 3))
    raw[16] = 3
    with pytest.raises(CorruptBatch):
        split_batches(raw)


@pytest.mark.parametrize("codec", [0, 1])
@pytest.mark.parametrize("transactional", [False, True])
def test_rewrite_keeps_records_bit_for_bit(codec: int, transactional: bool) -> None:
    raw = build(5000, 20, codec=codec, producer=(9, 1, 300), transactional=not transactional)
    [batch] = split_batches(raw).batches
    out = rb.rewrite(batch, producer_id=77, producer_epoch=4, base_sequence=123, transactional=transactional)
    assert len(out) == len(raw)
    [again] = split_batches(out).batches
    assert again.crc_ok()
    assert again.base_offset == 0 and again.partition_leader_epoch == -1
    assert (again.producer_id, again.producer_epoch, again.base_sequence) == (77, 4, 123)
    assert again.is_transactional is transactional
    assert again.codec == batch.codec and again.record_count == 20
    # Only the header moved: the records section is the same bytes.
    assert bytes(again.payload()) == bytes(batch.payload())
    before = [(o - 5000, t, k, v, h) for o, t, k, v, h in decoded(raw)]
    assert decoded(out) == before
    # The source batch is untouched.
    assert bytes(batch.data) == raw


def test_rewrite_refuses_control_batches() -> None:
    [batch] = split_batches(control_batch(10, 5, 1)).batches
    assert batch.is_control and rb.control_type(batch) is rb.ControlType.COMMIT
    with pytest.raises(ValueError):
        rb.rewrite(batch, producer_id=1, producer_epoch=0, base_sequence=0)


def test_control_type_of_abort_marker() -> None:
    [batch] = split_batches(control_batch(10, 5, 0)).batches
    assert rb.control_type(batch) is rb.ControlType.ABORT
    [data] = split_batches(build(0, 2)).batches
    assert rb.control_type(data) is None


def test_attribute_bits() -> None:
    [batch] = split_batches(patch_attributes(build(0, 2), rb.TIMESTAMP_TYPE_FLAG | rb.DELETE_HORIZON_FLAG)).batches
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.has_delete_horizon and batch.crc_ok()
    [bad] = split_batches(patch_attributes(build(0, 2), 0x07)).batches
    with pytest.raises(CorruptBatch):
        _ = bad.codec


def test_inner_gaps_seen() -> None:
    [batch] = split_batches(build(0, deltas=[0, 2, 5])).batches
    assert batch.record_count == 3 and batch.last_offset_delta == 5 and batch.has_inner_gaps


def test_crc_detects_corruption() -> None:
    raw = bytearray(build(0, 3))
    raw[-1] ^= 1
    [batch] = split_batches(raw).batches
    assert not batch.crc_ok()


def test_header_bytes_builds_a_valid_batch() -> None:
    [src] = split_batches(build(0, 3, codec=1)).batches
    raw = rb.header_bytes(
        base_offset=0,
        partition_leader_epoch=-1,
        attributes=src.attributes,
        last_offset_delta=2,
        base_timestamp=src.base_timestamp,
        max_timestamp=src.max_timestamp,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=3,
        payload=bytes(src.payload()),
    )
    assert decoded(raw) == decoded(bytes(src.data))


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -301, 2**31 - 1, -(2**31), 2**40])
def test_varint_round_trip(value: int) -> None:
    from kafka.record.util import encode_varint

    buf = bytearray()
    encode_varint(value, buf.append)
    assert rb.read_varint(bytes(buf) + b"\xff", 0) == (value, len(buf))


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_tail_of_a_batch_is_encoded_again_with_its_codec(codec: Codec) -> None:
    # A copy that starts inside a batch (a checkpoint record mode left there) re-encodes the
    # batch's tail once; lz4 and zstd need their libraries (the lz4 and zstandard packages),
    # without which such a partition stayed in record mode.
    raw = build(1000, 10, codec=int(codec))
    [batch] = split_batches(raw).batches
    tail = rb.tail_batch(batch, 1004)
    assert tail.codec is codec and tail.base_offset == 1004 and tail.record_count == 6
    assert tail.crc_ok()
    assert decoded(tail.data) == decoded(raw)[4:]
