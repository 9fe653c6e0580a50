"""Where a copied record came from, written into the record itself (exactly-once routes).

Every record an exactly-once pipeline writes carries the header ``strait.offset``: its source
offset, in ASCII digits. The checkpoint committed with a transaction says where copying
resumes; the header lets a new owner check that claim against the data the destination
actually committed. If the last committed copy of a partition already holds source offset S,
resuming at or below S would copy records twice, whatever the checkpoint says: the 30-minute
chaos run found 22,752 such duplicates without a known cause, and this check turns any such
cause into a logged, counted correction instead of duplicates.

Only the header decides nothing: the destination record is compared with the source record at
S (key and value) before it is believed, so a header written by someone else (another route
into the same topic, a source topic deleted and created again) never moves a start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

log = logging.getLogger(__name__)

HEADER = "strait.offset"
_FIRST_WINDOW = 64
_MAX_WINDOW = 1 << 20
Key = tuple[str, int]


def stamp(headers: Sequence[tuple[str, Any]] | None, offset: int) -> list[tuple[str, Any]]:
    """The record's headers with ``strait.offset`` set to ``offset`` (an upstream one replaced).

    ``headers`` as a consumed message gives them: a list of (name, value) pairs, or None.
    """
    kept = [h for h in headers or () if h[0] != HEADER]
    kept.append((HEADER, b"%d" % offset))
    return kept


def source_offset(message: Message) -> int | None:
    """The source offset a copied record carries, or None."""
    headers: Any = message.headers() or ()  # a list of pairs for a consumed message
    for name, value in headers:
        if name == HEADER and value:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def last_copies(consumer: Consumer, partitions: Iterable[Key], timeout_s: float) -> dict[Key, Message]:
    """The last committed record carrying ``strait.offset`` of each destination partition.

    ``consumer`` must read ``read_committed`` with ``enable.partition.eof``; it is assigned and
    unassigned here. Reads backwards in growing windows from the end; partitions with no such
    record (or not found within ``timeout_s``) are left out.
    """
    deadline = time.monotonic() + timeout_s
    found: dict[Key, Message] = {}
    windows: dict[Key, tuple[int, int]] = {}  # partition -> (low, end of the unread part)
    for topic, partition in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        if high > low >= 0:
            windows[(topic, partition)] = (low, high)
    size = _FIRST_WINDOW
    while windows and time.monotonic() < deadline:
        starts = {key: max(low, end - size) for key, (low, end) in windows.items()}
        batch = _read(consumer, starts, {k: end for k, (_, end) in windows.items()}, deadline)
        following: dict[Key, tuple[int, int]] = {}
        for key, (low, _end) in windows.items():
            message = batch.get(key)
            if message is not None:
                found[key] = message
            elif starts[key] > low and size < _MAX_WINDOW:
                following[key] = (low, starts[key])
        windows, size = following, size * 8
    return found


def records_at(consumer: Consumer, wanted: Mapping[Key, int], timeout_s: float) -> dict[Key, Message]:
    """The source records at the given offsets (absent ones, e.g. compacted away, left out)."""
    deadline = time.monotonic() + timeout_s
    got: dict[Key, Message] = {}
    ends = {key: offset + 1 for key, offset in wanted.items()}
    for key, message in _read(consumer, dict(wanted), ends, deadline, first_only=True).items():
        if message.offset() == wanted[key]:
            got[key] = message
    return got


def same_record(copy: Message, original: Message) -> bool:
    """Whether a destination record is a copy of a source record (key and value)."""
    return bool(copy.key() == original.key() and copy.value() == original.value())


def _read(
    consumer: Consumer,
    starts: Mapping[Key, int],
    ends: Mapping[Key, int],
    deadline: float,
    *,
    first_only: bool = False,
) -> dict[Key, Any]:
    """Read each partition from its start to its end (or EOF); keep the last stamped record
    before the end, or with ``first_only`` the first record read."""
    result: dict[Key, Any] = {}
    open_keys = set(starts)
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
    try:
        while open_keys and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=min(0.5, max(0.01, deadline - time.monotonic()))):
                key = (message.topic(), message.partition())
                if key not in open_keys:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_keys.discard(key)
                    continue
                offset = message.offset()
                if offset is None or offset >= ends[key]:
                    open_keys.discard(key)
                    continue
                if first_only:
                    result[key] = message
                    open_keys.discard(key)
                elif source_offset(message) is not None:
                    result[key] = message
                if offset + 1 >= ends[key]:
                    open_keys.discard(key)
    finally:
        consumer.unassign()
    return result
