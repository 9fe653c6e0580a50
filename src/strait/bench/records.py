"""The benchmark record format: a fixed stamp at the head of each value, a payload after it.

The stamp lives in the value rather than in headers so that it survives any replicator that
copies values faithfully, and so that a replicator that drops headers still gets measured
(its header loss is a separate finding).

Two payload kinds fill the rest of the value (:data:`PAYLOADS`). ``json``: generated JSON
events (event type, ids, timestamps, amounts, short strings, line items), seeded and drawn
from a precomputed pool larger than a batch, so a batch compresses about as much as real event
data does (lz4 2-4x; :func:`compression_ratios` measures it). ``filler``: the same text in every record,
from a small vocabulary, which compresses far more than real data and flatters a copy of
compressed batches; kept to compare with earlier runs.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

MAGIC = b"STRB"
_STAMP = struct.Struct(">4sIQQ")
STAMP_SIZE = _STAMP.size  # 24 bytes: magic, source partition, sequence, send time (µs since the epoch)

PAYLOADS = ("json", "filler")
# The seed of the json pool: every run, and every process of a run, writes the same events.
PAYLOAD_SEED = 1
# Distinct events per record size: at least this many, and at least a producer batch's worth
# (the benchmark producers' batch.size, 1 MB), so that no codec finds a whole record repeated in
# a batch (zstd's window spans a batch; lz4's is 64 KB), up to MAX_POOL: bodies shorter than
# 64 bytes cannot differ that much anyway. Powers of two: see pool_index.
POOL = 4096
MAX_POOL = 16384
BATCH_BYTES = 1_000_000


def pool_size(length: int) -> int:
    """How many distinct json bodies of ``length`` bytes records rotate through (one empty body
    for records no longer than the stamp)."""
    if length <= 0:
        return 1
    need = max(POOL, -(-BATCH_BYTES // length))
    return min(MAX_POOL, 1 << (need - 1).bit_length())


def pool_index(partition: int, seq: int, size: int) -> int:
    """Which body of a pool of ``size`` a record carries: consecutive sequences of a partition walk
    the whole pool (an odd stride is coprime with a power of two)."""
    return (seq * ((2654435761 % size) | 1) + partition) % size


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


_EVENT_TYPES = ("page_view", "click", "add_to_cart", "checkout", "payment", "refund", "login", "search", "signup")
_CURRENCIES = ("EUR", "USD", "GBP", "JPY", "CNY", "BRL")
_COUNTRIES = ("DE", "US", "GB", "FR", "JP", "CN", "BR", "IN", "NL", "ES", "IT", "SE")
_DEVICES = ("ios", "android", "web", "desktop")
_TERMS = (
    "red shoes", "usb-c cable", "coffee beans", "running jacket", "desk lamp", "phone case", "green tea",
    "wool socks", "yoga mat", "backpack", "headphones", "water bottle", "notebook", "sunglasses",
)  # fmt: skip
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _event(rng: random.Random, ts_ms: int, length: int) -> bytes:
    """One compact JSON event of exactly ``length`` bytes (cut short only below 8 bytes): as many
    fields as fit, in order; line items while they fit (an order or cart event's); a search term
    field pads it to the length."""
    fields = [
        f'"type":"{rng.choice(_EVENT_TYPES)}"',
        f'"user":{rng.randrange(1, 5_000_000)}',
        f'"ts":{ts_ms}',
        f'"id":"{rng.getrandbits(64):016x}"',
        f'"amount":{round(rng.lognormvariate(3, 1), 2)}',
        f'"cur":"{rng.choice(_CURRENCIES)}"',
        f'"country":"{rng.choice(_COUNTRIES)}"',
        f'"device":"{rng.choice(_DEVICES)}"',
        f'"session":"{"".join(rng.choices(_ALPHABET, k=12))}"',
    ]
    pad = len('"q":""')
    kept: list[str] = []
    used = 2  # the braces; each kept field adds its length and a comma
    for field in fields:
        if used + len(field) + 1 + pad > length:
            break
        kept.append(field)
        used += len(field) + 1
    items: list[str] = []
    while len(kept) == len(fields):
        item = (
            f'{{"sku":"{rng.choice("ABCDEFGH")}{rng.randrange(100000):05d}",'
            f'"qty":{rng.randrange(1, 5)},"price":{round(rng.lognormvariate(2.5, 0.8), 2)}}}'
        )
        extra = len(item) + (1 if items else len('"items":[],'))
        if used + extra + pad > length:
            break
        items.append(item)
        used += extra
    if items:
        kept.append(f'"items":[{",".join(items)}]')
    room = length - used - pad
    query = ""
    while len(query) < room:
        query += rng.choice(_TERMS) + " "
    kept.append(f'"q":"{query[: max(0, room)]}"')
    return ("{" + ",".join(kept) + "}").encode()[:length]


def _json_pool(length: int, seed: int) -> tuple[bytes, ...]:
    rng = random.Random(f"{seed}:{length}")
    ts_ms = 1_700_000_000_000
    pool = []
    for _ in range(pool_size(length)):
        ts_ms += rng.randrange(0, 50)  # events of one stream: close, increasing timestamps
        pool.append(_event(rng, ts_ms, length))
    return tuple(pool)


_FILLER_CACHE: dict[int, bytes] = {}
_POOL_CACHE: dict[tuple[int, int], tuple[bytes, ...]] = {}


def payload_pool(kind: str, length: int, *, seed: int = PAYLOAD_SEED) -> tuple[bytes, ...]:
    """The bodies of ``kind`` and ``length`` bytes that records rotate through (one for ``filler``)."""
    if kind == "filler":
        filler = _FILLER_CACHE.get(length)
        if filler is None:
            filler = _FILLER_CACHE.setdefault(length, _filler(length))
        return (filler,)
    if kind == "json":
        pool = _POOL_CACHE.get((length, seed))
        if pool is None:
            pool = _POOL_CACHE.setdefault((length, seed), _json_pool(length, seed))
        return pool
    raise ValueError(f"unknown payload kind {kind!r}: use {', '.join(PAYLOADS)}")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a benchmark record says about itself."""

    partition: int
    seq: int
    sent_us: int


def encode(partition: int, seq: int, sent_us: int, size: int, payload: str = "filler") -> bytes:
    """A value of ``size`` bytes (at least the stamp) identifying the record, with a body of ``payload``'s kind."""
    pool = payload_pool(payload, max(0, size - STAMP_SIZE))
    body = pool[pool_index(partition, seq, len(pool))]
    return _STAMP.pack(MAGIC, partition, seq, sent_us) + body


def decode(value: bytes | None) -> Stamp | None:
    """The stamp of a benchmark record, or None for a value that is not one."""
    if value is None or len(value) < STAMP_SIZE:
        return None
    magic, partition, seq, sent_us = _STAMP.unpack_from(value)
    if magic != MAGIC:
        return None
    return Stamp(partition, seq, sent_us)


# Bytes of records per measured batch: what a producer's batch (and so a compressed batch on the
# broker) holds when records are sent faster than they are acknowledged.
RATIO_BATCH_BYTES = 64 * 1024


def compression_ratios(payload: str, size: int, *, records: int = 4096) -> dict[str, float]:
    """Uncompressed / compressed bytes of ``records`` consecutive records of one partition, in
    batches of :data:`RATIO_BATCH_BYTES`, per codec Kafka's clients offer here (kafka-python's
    codecs: what a batch on the broker is compressed with; a codec without its library is left out)."""
    from kafka import codec

    codecs = {
        "gzip": (codec.has_gzip, codec.gzip_encode),
        "lz4": (codec.has_lz4, codec.lz4_encode),
        "snappy": (codec.has_snappy, codec.snappy_encode),
        "zstd": (codec.has_zstd, codec.zstd_encode),
    }
    per_batch = max(1, RATIO_BATCH_BYTES // max(1, size))
    values = [encode(0, seq, 1_700_000_000_000_000 + seq * 100, size, payload) for seq in range(records)]
    batches = [b"".join(values[i : i + per_batch]) for i in range(0, len(values), per_batch)]
    raw = sum(len(b) for b in batches)
    return {
        name: round(raw / sum(len(encode_batch(b)) for b in batches), 2)
        for name, (available, encode_batch) in codecs.items()
        if available()
    }
