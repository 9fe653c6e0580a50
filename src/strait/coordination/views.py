"""Compacted topics folded into key -> value views, and liveness judged by the reader's clock.

Pure: the Kafka store's reader thread feeds records in; nothing here does I/O, so folding and
the liveness rules are tested without a broker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from strait.coordination.model import SessionState

log = logging.getLogger(__name__)


def decode(value: bytes | None) -> dict[str, Any] | None:
    """A record's JSON object; None for a tombstone or a value that is not a JSON object."""
    if value is None:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        log.warning("ignoring a coordination record that is not JSON: %r", value[:80])
        return None
    return data if isinstance(data, dict) else None


def encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Entry:
    """The latest value of a key and when, on the reader's monotonic clock, it arrived."""

    value: dict[str, Any]
    arrived: float


def arrival(now_mono: float, now_wall: float, record_ts_s: float | None, caught_up: bool) -> float:
    """When a record counts as having arrived, on the reader's monotonic clock.

    Once the reader has caught up with the log, a record arrives when it is read: freshness is
    then judged by the reader's clock alone, immune to the writer's clock. While a newly started
    reader replays the log, every record would look fresh that way (a worker dead for an hour
    would look live for a session), so a replayed record is dated by its timestamp, never later
    than now."""
    if caught_up or record_ts_s is None:
        return now_mono
    return now_mono - max(0.0, now_wall - record_ts_s)


class View:
    """Key -> latest value of a compacted topic; a tombstone removes the key."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def apply(self, key: str, value: bytes | None, arrived: float) -> bool:
        """Fold one record in; True when it changed the value (a rewrite of the same value only
        refreshes its arrival)."""
        data = decode(value)
        old = self._entries.get(key)
        if data is None:
            if old is None:
                return False
            del self._entries[key]
            return True
        self._entries[key] = Entry(data, arrived)
        return old is None or old.value != data

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def entry(self, key: str) -> Entry | None:
        return self._entries.get(key)

    def under(self, prefix: str) -> Iterator[tuple[str, Entry]]:
        """Entries whose key starts with `prefix`, as (rest of the key, entry)."""
        for key, entry in list(self._entries.items()):
            if key.startswith(prefix):
                yield key[len(prefix) :], entry


def fresh(entry: Entry | None, now: float, timeout_s: float) -> bool:
    """Whether a heartbeat entry is recent enough that its writer counts as live."""
    return entry is not None and now - entry.arrived < timeout_s


@dataclass(frozen=True)
class SessionClock:
    """The store's own session judged from its last successful round trip to the cluster, as
    ZooKeeper clients judge theirs: in doubt (suspended) after half the session timeout, lost
    after the whole of it (by then every reader has judged this store's heartbeats stale)."""

    timeout_s: float

    def state(self, last_ok: float, now: float) -> SessionState:
        silent = now - last_ok
        if silent >= self.timeout_s:
            return SessionState.LOST
        if silent >= self.timeout_s / 2:
            return SessionState.SUSPENDED
        return SessionState.CONNECTED
