"""Kafka record batch v2 (magic 2): split a fetched blob, read headers, rewrite for producing.

Layout of a v2 batch (big-endian; the first 12 bytes are the "log overhead"):

    offset  size  field
    0       8     baseOffset
    8       4     batchLength            (bytes after this field)
    12      4     partitionLeaderEpoch
    16      1     magic                  (2)
    17      4     crc                    (CRC-32C of bytes 21..end, unsigned)
    21      2     attributes             (bits 0-2 codec, 3 timestampType, 4 transactional,
                                          5 control, 6 deleteHorizonMs)
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordCount
    61      ...   records (compressed as a whole when codec != none)

Everything here is pure and works on ``bytes``/``memoryview`` without copying the payload;
:func:`rewrite` makes the one copy a produce request needs. The CRC is computed by the
C-backed ``crc32c`` package (hardware CRC32 instructions where available).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

LOG_OVERHEAD = 12  # baseOffset + batchLength
HEADER_SIZE = 61  # a v2 batch header, records start here
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
PRODUCER_ID_OFFSET = 43

CODEC_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
# What a rewrite changes at the front: baseOffset, batchLength (unchanged), partitionLeaderEpoch.
_FRONT = struct.Struct(">qii")
# attributes .. recordCount, rewritten after the CRC field.
_TAIL = struct.Struct(">hiqqqhii")
_CRC = struct.Struct(">I")
_LENGTH = struct.Struct(">qi")


class Codec(enum.IntEnum):
    """Compression codec of a batch (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def config_name(self) -> str:
        """The topic ``compression.type`` value that keeps this codec unchanged on a broker."""
        return "uncompressed" if self is Codec.NONE else self.name.lower()


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CorruptBatch(ValueError):
    """A batch whose header cannot be right (bad length, bad CRC, unknown codec)."""


class RecordBatch(NamedTuple):
    """One v2 batch: its parsed header and a zero-copy view of its bytes (header included).

    A named tuple, not a dataclass: built once per fetched batch, it must be cheap to make.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    data: memoryview

    @property
    def size(self) -> int:
        """Bytes of the whole batch (log overhead included)."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset right after this batch (where the next fetch starts)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> Codec:
        try:
            return Codec(self.attributes & CODEC_MASK)
        except ValueError as exc:
            raise CorruptBatch(f"batch at {self.base_offset}: unknown codec {self.attributes & CODEC_MASK}") from exc

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_FLAG else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def has_inner_gaps(self) -> bool:
        """True when records were removed from inside the batch (compaction): offsets are not
        contiguous, which a broker refuses in a produced batch."""
        return self.last_offset_delta + 1 != self.record_count

    def payload(self) -> memoryview:
        """The records section (compressed as a whole unless the codec is none)."""
        return self.data[HEADER_SIZE:]

    def crc_ok(self) -> bool:
        """True when the stored CRC matches the bytes (what ``check.crcs`` checks on a consumer)."""
        return crc32c(self.data[ATTRIBUTES_OFFSET:]) == self.crc


@dataclass(frozen=True, slots=True)
class SplitResult:
    """What :func:`split_batches` found in a fetched blob.

    ``batches`` are the complete v2 batches in order. ``truncated`` is True when the blob ended
    inside a batch (brokers cut the last one at the fetch size; it is fetched again next time).
    ``legacy_offset`` is the offset of the first message of format v0/v1 (magic < 2), where
    splitting stopped, or None.
    """

    batches: list[RecordBatch]
    truncated: bool
    legacy_offset: int | None = None
    legacy_magic: int | None = None


def parse_batch(data: memoryview) -> RecordBatch:
    """The header of the v2 batch that ``data`` holds exactly (no trailing bytes)."""
    if len(data) < HEADER_SIZE:
        raise CorruptBatch(f"a v2 batch needs {HEADER_SIZE} bytes, got {len(data)}")
    fields = _HEADER.unpack_from(data, 0)
    if fields[3] != 2:
        raise CorruptBatch(f"batch at {fields[0]}: magic {fields[3]}, expected 2")
    if LOG_OVERHEAD + fields[1] != len(data):
        raise CorruptBatch(f"batch at {fields[0]}: batchLength {fields[1]} does not match {len(data)} bytes")
    return RecordBatch._make((*fields, data))


def split_batches(blob: bytes | bytearray | memoryview) -> SplitResult:
    """Split the records of one fetched partition into batches, without copying.

    Stops at a truncated last batch (normal: the broker fills the fetch size) and at the first
    message of an older format (magic 0 or 1), which batch mode does not handle.
    """
    view = memoryview(blob)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    end = len(view)
    pos = 0
    batches: list[RecordBatch] = []
    unpack = _HEADER.unpack_from
    make = RecordBatch._make
    while pos < end:
        if end - pos < LOG_OVERHEAD + 5:  # up to and including magic
            return SplitResult(batches, truncated=True)
        base_offset, length = _LENGTH.unpack_from(view, pos)
        magic = view[pos + MAGIC_OFFSET]
        if magic < 2:
            return SplitResult(batches, truncated=False, legacy_offset=base_offset, legacy_magic=magic)
        if magic != 2:
            raise CorruptBatch(f"batch at {base_offset}: unknown magic {magic}")
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptBatch(f"batch at {base_offset}: batchLength {length} shorter than a v2 header")
        stop = pos + LOG_OVERHEAD + length
        if stop > end:
            return SplitResult(batches, truncated=True)
        batches.append(make((*unpack(view, pos), view[pos:stop])))
        pos = stop
    return SplitResult(batches, truncated=False)


def rewrite(
    batch: RecordBatch,
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool = False,
    base_offset: int = 0,
) -> bytearray:
    """A copy of ``batch`` ready to produce: base offset 0, partition leader epoch -1, our
    producer id, epoch and base sequence, the transactional bit as asked, and a new CRC.

    Everything else (codec and timestamp type bits, timestamps, record count, the records,
    compressed or not) is kept byte for byte. Control batches are never produced: refused here.
    """
    if batch.is_control:
        raise ValueError(f"batch at {batch.base_offset} is a control batch: it is never produced")
    out = bytearray(batch.data)
    attributes = batch.attributes | TRANSACTIONAL_FLAG if transactional else batch.attributes & ~TRANSACTIONAL_FLAG
    _FRONT.pack_into(out, 0, base_offset, batch.batch_length, NO_PARTITION_LEADER_EPOCH)
    _TAIL.pack_into(
        out,
        ATTRIBUTES_OFFSET,
        attributes,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        batch.record_count,
    )
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def tail_batch(batch: RecordBatch, from_offset: int) -> RecordBatch:
    """A batch of ``batch``'s records from ``from_offset`` on, placed at that offset: for a copy
    that starts inside a batch (a checkpoint record mode left there), once.

    The only place batch mode decodes records: they are decompressed and encoded again with the
    same codec, keys, values, headers and timestamps (the compressed bytes differ, the records do
    not). Raises ``ValueError`` when the batch cannot be re-encoded (its codec's library missing).
    """
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    if batch.timestamp_type is not TimestampType.CREATE_TIME or batch.has_inner_gaps:
        raise ValueError(f"batch at {batch.base_offset}: only whole CreateTime batches are cut")
    try:
        records = [r for r in DefaultRecordBatch(bytes(batch.data)) if r.offset >= from_offset]
        builder = DefaultRecordBatchBuilder(2, int(batch.codec), False, -1, -1, -1, 2**31 - 1)
        for record in records:
            builder.append(record.offset - from_offset, record.timestamp, record.key, record.value, record.headers)
        out = bytearray(builder.build())
    except Exception as exc:  # kafka-python raises its own errors for a missing codec library
        raise ValueError(f"batch at {batch.base_offset}: cannot re-encode ({exc})") from exc
    if not records:
        raise ValueError(f"batch at {batch.base_offset} holds nothing from {from_offset} on")
    struct.pack_into(">q", out, 0, from_offset)
    return parse_batch(memoryview(out))


def new_batch(records: Sequence[tuple[bytes, bytes]], timestamp_ms: int) -> RecordBatch:
    """An uncompressed CreateTime batch at offset 0 of ``(key, value)`` records without headers,
    for records Strait writes itself (the offset map's runs in a transaction); the producer
    fields are set by :func:`rewrite` when it is produced."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    if not records:
        raise ValueError("a batch needs at least one record")
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp_ms, key, value, [])
    return parse_batch(memoryview(bytearray(builder.build())))


def header_bytes(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    payload: bytes,
) -> bytes:
    """A whole v2 batch from header fields and an already encoded records section (tests and
    tools; the copier never builds batches, it rewrites fetched ones)."""
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    body = (
        _TAIL.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
        + payload
    )
    return _FRONT.pack(base_offset, length, partition_leader_epoch) + bytes([2]) + _CRC.pack(crc32c(body)) + body


def read_varint(data: memoryview | bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (as in v2 records) at ``pos``: (value, position after it)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(data):
            raise CorruptBatch("varint runs past the end of the data")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptBatch("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


def control_type(batch: RecordBatch) -> ControlType | None:
    """The marker type of a control batch (from its first record's key), or None when unknown.

    Control batches are never compressed; the key is ``int16 version, int16 type``.
    """
    if not batch.is_control or batch.record_count < 1 or batch.codec is not Codec.NONE:
        return None
    data = batch.data
    pos = HEADER_SIZE
    _length, pos = read_varint(data, pos)
    pos += 1  # record attributes
    _ts_delta, pos = read_varint(data, pos)
    _offset_delta, pos = read_varint(data, pos)
    key_length, pos = read_varint(data, pos)
    if key_length < 4 or pos + 4 > len(data):
        return None
    kind = int.from_bytes(data[pos + 2 : pos + 4], "big", signed=True)
    try:
        return ControlType(kind)
    except ValueError:
        return None
