"""Small source batches of one partition merged into one batch to produce.

Why: a produce request carries one batch per partition (the broker refuses more from v3 on),
so a partition whose source batches hold a few records each (a producer sending 10,000
records/s over 8 partitions writes ~4 records per batch) costs the batch pipeline one produce
round trip per source batch, and the destination broker one request per few records. Merged,
the batches a fetch brought for a partition go out in one batch and one request per leader.

Only uncompressed batches are merged: their records can be re-placed without decoding keys,
values or headers. Each record of a v2 batch is ``length, attributes, timestampDelta,
offsetDelta, key, value, headers`` with the deltas relative to the batch's base offset and base
timestamp. The first batch's records keep their bytes; each later batch's records get their two
deltas re-encoded relative to the merged base (the lengths follow), and everything after the
offset delta is copied as it is. Offsets stay contiguous (merging needs it), so the merged
batch's records land on the destination at the same relative places, and the checkpoint moves
over the merged batch as over its parts.

Pure: no I/O. The CRC and producer fields are set by :func:`~strait.worker.batch.records.rewrite`
when the merged batch is produced.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from strait.worker.batch.records import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CONTROL_FLAG,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_FLAG,
    CorruptBatch,
    RecordBatch,
    parse_batch,
    read_varint,
)

# A batch of fewer records and at most this many bytes is worth merging: larger ones already
# carry enough records per request (batch mode pays from 64 records per batch, see
# strait.worker.moves), and re-placing their records would cost ~4 us each for little. A merged
# batch grows to at most MERGED_MAX_BYTES (well under the 1 MiB default max.message.bytes of a
# topic; a destination topic's own lower limit is respected too).
SMALL_BATCH_RECORDS = 64
SMALL_BATCH_BYTES = 16 * 1024
MERGED_MAX_BYTES = 512 * 1024

_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_CRC = struct.Struct(">I")
# Bits that must agree between merged batches (codec none, CreateTime, not control, no delete
# horizon is checked separately; the transactional bit is set by rewrite for the copy).
_NOT_MERGEABLE = CODEC_MASK | TIMESTAMP_TYPE_FLAG | CONTROL_FLAG | DELETE_HORIZON_FLAG


def mergeable(batch: RecordBatch) -> bool:
    """True when ``batch`` may be part of a merged batch: few records in few bytes, uncompressed,
    CreateTime, a data batch without holes (compaction) or a delete horizon."""
    return (
        not batch.attributes & _NOT_MERGEABLE
        and batch.size <= SMALL_BATCH_BYTES
        and 0 < batch.record_count < SMALL_BATCH_RECORDS
        and batch.last_offset_delta + 1 == batch.record_count
    )


def follows(previous: RecordBatch, batch: RecordBatch) -> bool:
    """True when ``batch`` starts right after ``previous`` (no offsets between them)."""
    return batch.base_offset == previous.next_offset


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zig-zag varint (the encoding of v2 record fields)."""
    raw = (value << 1) ^ (value >> 63)
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def merge(batches: Sequence[RecordBatch]) -> RecordBatch:
    """One batch holding the records of ``batches`` (mergeable, each following the one before),
    placed at the first one's base offset and base timestamp. One batch is returned as it is."""
    if not batches:
        raise ValueError("nothing to merge")
    first = batches[0]
    if len(batches) == 1:
        return first
    base_offset, base_timestamp = first.base_offset, first.base_timestamp
    out = bytearray(first.data)  # header (fixed below) and the first batch's records unchanged
    previous = first
    max_timestamp = first.max_timestamp
    count = first.record_count
    for batch in batches[1:]:
        if not follows(previous, batch):
            raise ValueError(f"batch at {batch.base_offset} does not follow the one ending at {previous.last_offset}")
        _append_records(out, batch, base_offset, base_timestamp)
        max_timestamp = max(max_timestamp, batch.max_timestamp)
        count += batch.record_count
        previous = batch
    last_delta = previous.last_offset - base_offset
    _HEAD.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, first.partition_leader_epoch, 2, 0)
    _TAIL.pack_into(
        out,
        ATTRIBUTES_OFFSET,
        first.attributes,
        last_delta,
        base_timestamp,
        max_timestamp,
        first.producer_id,
        first.producer_epoch,
        first.base_sequence,
        count,
    )
    _CRC.pack_into(out, 17, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return parse_batch(memoryview(out))


def _append_records(out: bytearray, batch: RecordBatch, base_offset: int, base_timestamp: int) -> None:
    """Append ``batch``'s records to ``out`` with their deltas taken from the merged base."""
    data = batch.data
    end = len(data)
    pos = HEADER_SIZE
    offset_shift = batch.base_offset - base_offset
    timestamp_shift = batch.base_timestamp - base_timestamp
    body = bytearray()
    for _ in range(batch.record_count):
        length, pos = read_varint(data, pos)
        stop = pos + length
        if length < 3 or stop > end:
            raise CorruptBatch(f"batch at {batch.base_offset}: a record runs past the batch")
        attributes = data[pos]
        timestamp_delta, field = read_varint(data, pos + 1)
        offset_delta, field = read_varint(data, field)
        body.clear()
        body.append(attributes)
        write_varint(timestamp_delta + timestamp_shift, body)
        write_varint(offset_delta + offset_shift, body)
        body += data[field:stop]
        write_varint(len(body), out)
        out += body
        pos = stop
    if pos != end:
        raise CorruptBatch(f"batch at {batch.base_offset}: {end - pos} bytes after its {batch.record_count} records")
