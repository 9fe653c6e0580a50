"""Batch mode or record mode (strait.worker.batch.compat)."""

from __future__ import annotations

from strait.worker.batch import records as rb
from strait.worker.batch.compat import DestinationTopic, Mode, Reason, decide_mode
from strait.worker.batch.records import Codec, split_batches
from tests.unit.test_batch_records import build, control_batch, patch_attributes


def lz4(raw: bytes) -> bytes:
    """The same batch marked lz4 (the codec bits are all this module reads)."""
    return patch_attributes(raw, int(Codec.LZ4))


PRODUCER = DestinationTopic()


def test_plain_batches_run_in_batch_mode() -> None:
    decision = decide_mode(split_batches(build(0, 3) + build(3, 2)), PRODUCER, source_compacted=False, fetch_offset=0)
    assert decision.mode is Mode.BATCH and decision.reason is Reason.COMPATIBLE and decision.text == "batch"


def test_destination_compression() -> None:
    blob = lz4(build(0, 3))
    for compression, mode in [
        ("producer", Mode.BATCH),
        ("lz4", Mode.BATCH),
        ("zstd", Mode.RECORD),
        ("uncompressed", Mode.RECORD),
    ]:
        decision = decide_mode(split_batches(blob), DestinationTopic(compression), source_compacted=False)
        assert decision.mode is mode, compression
    decision = decide_mode(split_batches(build(0, 3)), DestinationTopic("uncompressed"), source_compacted=False)
    assert decision.mode is Mode.BATCH
    decision = decide_mode(split_batches(build(0, 3)), DestinationTopic("gzip"), source_compacted=False)
    assert decision.reason is Reason.CODEC_MISMATCH
    assert decision.text == "record (source batches are uncompressed, destination compression.type is gzip)"


def test_destination_from_describe_configs() -> None:
    topic = DestinationTopic.from_configs({"compression.type": "LZ4", "max.message.bytes": "1048588", "x": None})
    assert topic == DestinationTopic("lz4", 1048588)
    assert DestinationTopic.from_configs({}) == DestinationTopic("producer", None)


def test_inner_gap_falls_back_on_any_topic() -> None:
    blob = build(0, 3) + build(3, deltas=[0, 2])
    for compacted in (False, True):
        decision = decide_mode(split_batches(blob), PRODUCER, source_compacted=compacted)
        assert decision.mode is Mode.RECORD and decision.reason is Reason.INNER_GAP and decision.offset == 3


def test_gap_between_batches_on_compacted_topic() -> None:
    blob = build(0, 3) + build(10, 2)
    decision = decide_mode(split_batches(blob), PRODUCER, source_compacted=True)
    assert decision.reason is Reason.COMPACTED_GAP and decision.offset == 3
    assert (
        decide_mode(split_batches(blob), PRODUCER, source_compacted=True, allow_compacted_gaps=True).mode is Mode.BATCH
    )
    # Not compacted: a gap is retention or markers the fetch skipped; batches still pass.
    assert decide_mode(split_batches(blob), PRODUCER, source_compacted=False).mode is Mode.BATCH
    # A jump from the fetch offset to the first batch counts too.
    decision = decide_mode(split_batches(build(5, 2)), PRODUCER, source_compacted=True, fetch_offset=2)
    assert decision.reason is Reason.COMPACTED_GAP


def test_control_batches_fill_offsets_and_are_not_judged() -> None:
    blob = build(0, 2, producer=(7, 0, 0), transactional=True) + control_batch(2, 7, 1) + build(3, 1)
    decision = decide_mode(split_batches(blob), DestinationTopic("uncompressed"), source_compacted=True, fetch_offset=0)
    assert decision.mode is Mode.BATCH


def test_legacy_format() -> None:
    import struct

    legacy = struct.pack(">qiIbb", 3, 14, 0, 1, 0) + b"\x00" * 9
    decision = decide_mode(split_batches(build(0, 3) + legacy), PRODUCER, source_compacted=False)
    assert decision.reason is Reason.LEGACY_FORMAT and decision.offset == 3


def test_log_append_time_delete_horizon_and_size() -> None:
    lat = patch_attributes(build(0, 2), rb.TIMESTAMP_TYPE_FLAG)
    assert decide_mode(split_batches(lat), PRODUCER, source_compacted=False).reason is Reason.LOG_APPEND_TIME
    dh = patch_attributes(build(0, 2), rb.DELETE_HORIZON_FLAG)
    assert decide_mode(split_batches(dh), PRODUCER, source_compacted=True).reason is Reason.DELETE_HORIZON
    raw = build(0, 50)
    small = DestinationTopic("producer", max_message_bytes=len(raw) - 1)
    assert decide_mode(split_batches(raw), small, source_compacted=False).reason is Reason.TOO_LARGE
    assert (
        decide_mode(split_batches(raw), DestinationTopic("producer", len(raw)), source_compacted=False).mode
        is Mode.BATCH
    )
