"""Batch mode or record mode for a partition: a pure decision, with the reason.

Batches pass unchanged only where the destination broker keeps them as they are and the
copy stays bit for bit what a source consumer reads:

- message format v2 (magic 2) only: older formats have no batch header to rewrite;
- no offset gaps inside a batch: a broker refuses a produced batch whose records' offset
  deltas are not 0, 1, 2, ... (compaction leaves such holes);
- on a compacted source, no gaps between batches either (the conservative reading of the
  issue: the copy's offsets would not line up batch for batch; see ``allow_compacted_gaps``);
- the destination's ``compression.type`` is ``producer`` or the batch's own codec: otherwise
  the destination broker decompresses and recompresses every batch;
- CreateTime batches only: a LogAppendTime batch's records carry the producer's times while
  consumers see the broker's; a destination broker would expose the former;
- no delete-horizon batches (compacted tombstones, KIP-534): that bit is the cleaner's own;
- every batch fits the destination's ``max.message.bytes``.

The decision is for the batches seen (one fetch, or a sample at start); the copier decides
again when a later fetch brings a batch that breaks a rule.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from strait.worker.batch.records import Codec, RecordBatch, SplitResult, TimestampType


class Mode(enum.Enum):
    BATCH = "batch"
    RECORD = "record"


class Reason(enum.Enum):
    """Why a partition runs in the mode it runs in (a stable label for metrics and status)."""

    COMPATIBLE = "compatible"
    LEGACY_FORMAT = "legacy_format"
    INNER_GAP = "inner_gap"
    COMPACTED_GAP = "compacted_gap"
    CODEC_MISMATCH = "codec_mismatch"
    LOG_APPEND_TIME = "log_append_time"
    DELETE_HORIZON = "delete_horizon"
    TOO_LARGE = "too_large"
    MID_BATCH = "fetch_offset_inside_batch"  # a start inside a batch: its first records are copied already
    REFUSED = "refused_by_destination"  # a produce answer (e.g. INVALID_RECORD), not a prediction
    # Two-way routes: a batch holding copies and originals, or one whose origin cannot be read.
    ORIGIN_UNDECIDED = "origin_undecided"


@dataclass(frozen=True, slots=True)
class DestinationTopic:
    """The destination topic configs that matter to batch mode."""

    compression_type: str = "producer"
    max_message_bytes: int | None = None

    @classmethod
    def from_configs(cls, configs: Mapping[str, str | None]) -> DestinationTopic:
        """From a DescribeConfigs answer (name to value)."""
        raw_max = configs.get("max.message.bytes")
        return cls(
            compression_type=(configs.get("compression.type") or "producer").strip().lower(),
            max_message_bytes=int(raw_max) if raw_max else None,
        )

    def keeps(self, codec: Codec) -> bool:
        """True when this topic stores a batch of ``codec`` as it is."""
        return self.compression_type == "producer" or self.compression_type == codec.config_name


@dataclass(frozen=True, slots=True)
class ModeDecision:
    mode: Mode
    reason: Reason
    detail: str
    offset: int | None = None  # the source offset the reason was found at

    @property
    def text(self) -> str:
        """For ``strait status``: ``batch`` or ``record (<detail>)``."""
        return self.mode.value if self.mode is Mode.BATCH else f"record ({self.detail})"


def _record(reason: Reason, detail: str, offset: int | None) -> ModeDecision:
    return ModeDecision(Mode.RECORD, reason, detail, offset)


def decide_mode(
    split: SplitResult | Sequence[RecordBatch],
    destination: DestinationTopic,
    *,
    source_compacted: bool,
    fetch_offset: int | None = None,
    allow_compacted_gaps: bool = False,
    skipped: AbstractSet[int] = frozenset(),
) -> ModeDecision:
    """Batch or record mode for the partition whose fetched batches are ``split``.

    ``split`` holds every complete batch of the fetch, control batches included (they occupy
    offsets). ``fetch_offset``, when given, counts a jump from it to the first batch as a gap
    between batches too. Batches whose base offsets are in ``skipped`` (a two-way route's copies,
    never produced) occupy offsets and nothing else.
    """
    if isinstance(split, SplitResult):
        batches: Sequence[RecordBatch] = split.batches
        legacy = split.legacy_offset
    else:
        batches, legacy = split, None
    expected = fetch_offset
    for batch in batches:
        gap = expected is not None and batch.base_offset > expected
        if gap and source_compacted and not allow_compacted_gaps:
            return _record(
                Reason.COMPACTED_GAP,
                f"offsets {expected}..{batch.base_offset - 1} missing between batches of a compacted topic",
                expected,
            )
        expected = batch.next_offset
        if batch.is_control or batch.record_count == 0 or batch.base_offset in skipped:
            continue  # never produced: nothing else about it matters
        if batch.has_inner_gaps:
            return _record(
                Reason.INNER_GAP,
                f"batch at {batch.base_offset} holds {batch.record_count} records over "
                f"{batch.last_offset_delta + 1} offsets",
                batch.base_offset,
            )
        if not destination.keeps(batch.codec):
            return _record(
                Reason.CODEC_MISMATCH,
                f"source batches are {batch.codec.config_name}, destination compression.type is "
                f"{destination.compression_type}",
                batch.base_offset,
            )
        if batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
            return _record(Reason.LOG_APPEND_TIME, "source batches carry LogAppendTime", batch.base_offset)
        if batch.has_delete_horizon:
            return _record(Reason.DELETE_HORIZON, "compacted batch with a delete horizon", batch.base_offset)
        if destination.max_message_bytes is not None and batch.size > destination.max_message_bytes:
            return _record(
                Reason.TOO_LARGE,
                f"batch at {batch.base_offset} is {batch.size} bytes, destination max.message.bytes is "
                f"{destination.max_message_bytes}",
                batch.base_offset,
            )
    if legacy is not None:
        return _record(Reason.LEGACY_FORMAT, "message format older than v2", legacy)
    return ModeDecision(Mode.BATCH, Reason.COMPATIBLE, "")
