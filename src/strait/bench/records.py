"""The benchmark record format: a fixed stamp at the head of each value, filler after it.

The stamp lives in the value rather than in headers so that it survives any replicator that
copies values faithfully, and so that a replicator that drops headers still gets measured
(its header loss is a separate finding). Filler is drawn from a small vocabulary so that lz4
has something to compress, as real text-like payloads do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"STRB"
_STAMP = struct.Struct(">4sIQQ")
STAMP_SIZE = _STAMP.size  # 24 bytes: magic, source partition, sequence, send time (µs since the epoch)

_WORDS = (
    b"order ",
    b"payment ",
    b"user=",
    b"42 ",
    b"region=eu ",
    b"status=ok ",
    b"latency_ms=",
    b"7 ",
    b"cart ",
    b"item ",
    b"sku=",
    b"ab12 ",
    b"price=",
    b"19.99 ",
    b"currency=EUR ",
    b"session ",
)


def _filler(length: int) -> bytes:
    chunks = bytearray()
    i = 0
    while len(chunks) < length:
        # A stride coprime with the vocabulary size keeps the text varied yet compressible.
        chunks += _WORDS[(i * 7) % len(_WORDS)]
        i += 1
    return bytes(chunks[:length])


_FILLER_CACHE: dict[int, bytes] = {}


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a benchmark record says about itself."""

    partition: int
    seq: int
    sent_us: int


def encode(partition: int, seq: int, sent_us: int, size: int) -> bytes:
    """A value of ``size`` bytes (at least the stamp) identifying the record."""
    filler_len = max(0, size - STAMP_SIZE)
    filler = _FILLER_CACHE.get(filler_len)
    if filler is None:
        filler = _FILLER_CACHE.setdefault(filler_len, _filler(filler_len))
    return _STAMP.pack(MAGIC, partition, seq, sent_us) + filler


def decode(value: bytes | None) -> Stamp | None:
    """The stamp of a benchmark record, or None for a value that is not one."""
    if value is None or len(value) < STAMP_SIZE:
        return None
    magic, partition, seq, sent_us = _STAMP.unpack_from(value)
    if magic != MAGIC:
        return None
    return Stamp(partition, seq, sent_us)
