"""How runs are stored: one small JSON record per run in ``__strait_offsets.<route>``."""

from __future__ import annotations

import json
from dataclasses import dataclass

from strait.offsetmap.runs import Run

TOPIC_PREFIX = "__strait_offsets."


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
    """Raises ValueError (or KeyError/TypeError inside it) for a record that is not an entry."""
    try:
        doc = json.loads(value)
        return MapEntry(doc["t"], int(doc["p"]), doc["dt"], Run(int(doc["s"]), int(doc["d"]), int(doc["n"])))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not an offset map entry: {value[:80]!r}") from exc
