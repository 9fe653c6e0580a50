"""Stuck-partition detection: pure functions over what the controller observes.

The controller reads each partition's checkpoint and the source end offset from the source
cluster itself (not from the worker's report: a hung worker reports nothing). A partition is
*stuck* when it lags (end > checkpoint) and its checkpoint has not moved for `stuck_after_s`
while the same worker owned it. A new owner, a moving checkpoint or a lag of 0 restart the clock.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Observation:
    """One partition at one moment; `None` where it is unknown."""

    checkpoint: int | None
    end: int | None
    owner: str | None

    @property
    def lag(self) -> int | None:
        if self.end is None:
            return None
        return max(0, self.end - (self.checkpoint or 0))


@dataclass(frozen=True)
class Progress:
    """What the detector remembers of a partition: the last observation and since when its
    checkpoint has stood still (controller clock)."""

    observation: Observation
    still_since: float

    def stalled_for(self, now: float) -> float:
        """Seconds the partition has lagged without its checkpoint moving (0 if it is not lagging)."""
        if not self.observation.lag or self.observation.owner is None:
            return 0.0
        return max(0.0, now - self.still_since)


def advance(previous: Mapping[K, Progress], observed: Mapping[K, Observation], now: float) -> dict[K, Progress]:
    """The detector's memory after a new round of observations; forgotten partitions drop out."""
    out: dict[K, Progress] = {}
    for key, seen in observed.items():
        before = previous.get(key)
        if (
            before is None
            or seen.checkpoint != before.observation.checkpoint
            or seen.owner != before.observation.owner
            or not seen.lag
            or not before.observation.lag
        ):
            out[key] = Progress(seen, now)
        else:
            out[key] = Progress(seen, before.still_since)
    return out


def stuck(progress: Mapping[K, Progress], now: float, stuck_after_s: float) -> dict[K, Progress]:
    """Partitions stuck for at least `stuck_after_s`."""
    return {key: p for key, p in progress.items() if p.stalled_for(now) >= stuck_after_s}
