"""How runs are stored: one small record per run in ``__strait_offsets.<route>``.

The key is the source topic and partition (``orders/3``), so a partition's runs stay in order.
The value is binary, version 1 (:data:`VERSION`):

====================  ========================================================================
byte 0                the version, 1
byte 1                flags: bit 0 set when the destination topic is the source topic's name
varint, bytes         the source topic (length, then UTF-8)
varint, bytes         the destination topic, only when flag bit 0 is clear
varint                the source partition
varint                the run's first source offset
zigzag varint         its first destination offset minus its first source offset
varint                the run's record count
====================  ========================================================================

Varints are unsigned LEB128 (7 bits a byte, low bits first), as Kafka's own record format
writes them. Entries written before version 1 are JSON objects (their first byte is ``{``) and
are still read. A reader meeting a version it does not know skips that record with a warning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from strait.offsetmap.runs import Run

TOPIC_PREFIX = "__strait_offsets."
VERSION = 1
_SAME_TOPIC = 0x01
_JSON = ord("{")


def map_topic(route: str) -> str:
    """The destination topic holding a route's offset map."""
    return f"{TOPIC_PREFIX}{route}"


@dataclass(frozen=True)
class MapEntry:
    """One run of one partition of a route."""

    topic: str  # source topic
    partition: int
    destination_topic: str
    run: Run


def encode(entry: MapEntry) -> tuple[bytes, bytes]:
    """Key (source topic and partition, so a partition's runs stay in order) and value."""
    key = f"{entry.topic}/{entry.partition}".encode()
    run = entry.run
    topic = entry.topic.encode()
    same = entry.destination_topic == entry.topic
    out = bytearray((VERSION, _SAME_TOPIC if same else 0))
    _varint(out, len(topic))
    out += topic
    if not same:
        destination = entry.destination_topic.encode()
        _varint(out, len(destination))
        out += destination
    _varint(out, entry.partition)
    _varint(out, run.source)
    delta = run.destination - run.source
    _varint(out, (delta << 1) if delta >= 0 else ((-delta << 1) - 1))  # zigzag
    _varint(out, run.count)
    return key, bytes(out)


def encode_json(entry: MapEntry) -> tuple[bytes, bytes]:
    """The encoding written before version 1 (still read; kept for tests and size comparisons)."""
    key = f"{entry.topic}/{entry.partition}".encode()
    value = json.dumps(
        {
            "t": entry.topic,
            "p": entry.partition,
            "dt": entry.destination_topic,
            "s": entry.run.source,
            "d": entry.run.destination,
            "n": entry.run.count,
        },
        separators=(",", ":"),
    ).encode()
    return key, value


def decode(value: bytes) -> MapEntry:
    """Raises ValueError for a record that is not an entry (or of an unknown version)."""
    if not value:
        raise ValueError("not an offset map entry: empty")
    if value[0] == _JSON:
        return _decode_json(value)
    if value[0] != VERSION:
        raise ValueError(f"offset map entry of unknown version {value[0]}")
    try:
        flags = value[1]
        topic, at = _read_text(value, 2)
        destination_topic = topic
        if not flags & _SAME_TOPIC:
            destination_topic, at = _read_text(value, at)
        partition, at = _read_varint(value, at)
        source, at = _read_varint(value, at)
        zigzag, at = _read_varint(value, at)
        count, at = _read_varint(value, at)
    except (IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"not an offset map entry: {value[:80]!r}") from exc
    if at != len(value) or flags & ~_SAME_TOPIC:
        raise ValueError(f"not an offset map entry: {value[:80]!r}")
    delta = (zigzag >> 1) if not zigzag & 1 else -((zigzag + 1) >> 1)
    return MapEntry(topic, partition, destination_topic, Run(source, source + delta, count))


def _decode_json(value: bytes) -> MapEntry:
    try:
        doc = json.loads(value)
        return MapEntry(doc["t"], int(doc["p"]), doc["dt"], Run(int(doc["s"]), int(doc["d"]), int(doc["n"])))
    except (KeyError, TypeError) as exc:  # json's own errors are ValueErrors
        raise ValueError(f"not an offset map entry: {value[:80]!r}") from exc


def _varint(out: bytearray, number: int) -> None:
    if number < 0:
        raise ValueError(f"offset map fields are not negative: {number}")
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)


def _read_text(data: bytes, at: int) -> tuple[str, int]:
    size, at = _read_varint(data, at)
    if at + size > len(data):
        raise IndexError("truncated")
    return data[at : at + size].decode(), at + size


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    number = shift = 0
    while True:
        byte = data[at]
        at += 1
        number |= (byte & 0x7F) << shift
        if byte < 0x80:
            return number, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
