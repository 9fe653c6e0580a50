"""How long a batch pipeline's next fetch lets the source broker gather records (no I/O).

A fetch that answers at the first record costs a fetch and a produce round trip per record or
two once records flow; one that always gathers for a fixed window delays every record by up to
that window. Records fetched while the destination still works on the last produce request
would wait for it anyway (a partition's next batch goes out behind it), so the window lasts as
long as the destination is expected to stay busy, capped by ``PipelineSettings.fetch_gather_ms``,
and closes at once when nothing is in flight: at a low rate each record goes out alone, at a
high rate the requests grow with the destination's round trip, as a Nagle window would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# What a gathering fetch asks the broker to collect before it answers early: more than a
# caught-up partition set brings within the window, so the window (not the size) ends it; a
# backlog's answers fill it at once.
GATHER_MIN_BYTES = 1024 * 1024
# The produce round trip assumed before the first answer is timed.
INITIAL_ROUND_TRIP_S = 0.002
# Weight of the newest round trip in the running estimate.
ROUND_TRIP_WEIGHT = 0.2


@dataclass(frozen=True)
class FetchWait:
    """A fetch request's ``max_wait_ms`` and ``min_bytes``."""

    wait_ms: int
    min_bytes: int


class DestinationClock:
    """When the pipeline's produce requests in flight are expected to be answered: the last one
    sent plus a running estimate of the produce round trip."""

    def __init__(self, *, round_trip_s: float = INITIAL_ROUND_TRIP_S) -> None:
        self.round_trip_s = round_trip_s
        self._last_sent: float | None = None

    def sent(self, now: float) -> None:
        self._last_sent = now

    def answered(self, round_trip_s: float) -> None:
        if round_trip_s >= 0:
            self.round_trip_s += ROUND_TRIP_WEIGHT * (round_trip_s - self.round_trip_s)

    def busy_for(self, now: float, *, in_flight: bool) -> float:
        """Seconds the destination is expected to stay busy; 0 when nothing is in flight or
        about to be sent. An answer later than expected is taken to need another round trip,
        as is a first request about to be sent."""
        if not in_flight:
            return 0.0
        if self._last_sent is None:
            return self.round_trip_s
        remaining = self._last_sent + self.round_trip_s - now
        return remaining if remaining > 0 else self.round_trip_s


def fetch_wait(*, wait_max_ms: int, gather_max_ms: int, flowing: bool, busy_for_s: float | None) -> FetchWait:
    """The next fetch's wait for one source leader.

    ``wait_max_ms`` 0: answer at once (a partition of the leader waits outside the request).
    ``flowing``: the leader's last answer brought records. ``busy_for_s``: how long the
    destination is expected to stay busy (``None``: unknown, gather for the whole window).
    """
    if not wait_max_ms:
        return FetchWait(0, 1)
    if not flowing or not gather_max_ms:
        return FetchWait(wait_max_ms, 1)  # long-poll: the broker answers at the first record
    if busy_for_s is None:
        return FetchWait(min(wait_max_ms, gather_max_ms), GATHER_MIN_BYTES)
    if busy_for_s <= 0:
        return FetchWait(wait_max_ms, 1)
    window_ms = min(wait_max_ms, gather_max_ms, max(1, math.ceil(busy_for_s * 1000)))
    return FetchWait(window_ms, GATHER_MIN_BYTES)
