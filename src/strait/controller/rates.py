"""Bytes/s per partition, estimated from the copy counters workers publish. Pure bookkeeping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strait.coordination.model import PartitionKey

# Weight of the newest sample: smooths bursts so a short spike does not reshuffle the fleet.
_SMOOTHING = 0.5


class RateTracker:
    """Follows each partition's cumulative copied bytes and derives a smoothed bytes/s."""

    def __init__(self) -> None:
        self._last: dict[PartitionKey, tuple[float, float]] = {}  # key -> (bytes, at)
        self._rates: dict[PartitionKey, float] = {}

    def observe(self, stats: Mapping[str, Mapping[str, Any]]) -> None:
        """Take in every worker's published stats (`{"updated": t, "partitions": {key: {"bytes": n}}}`)."""
        for report in stats.values():
            at = float(report.get("updated", 0.0))
            for name, entry in dict(report.get("partitions", {})).items():
                try:
                    key = PartitionKey.parse(name)
                    copied = float(entry.get("bytes", 0))
                except (ValueError, AttributeError):
                    continue
                self._sample(key, copied, at)

    def _sample(self, key: PartitionKey, copied: float, at: float) -> None:
        last = self._last.get(key)
        if last is not None and at > last[1] and copied >= last[0]:
            rate = (copied - last[0]) / (at - last[1])
            previous = self._rates.get(key)
            self._rates[key] = rate if previous is None else _SMOOTHING * rate + (1 - _SMOOTHING) * previous
        if last is None or at > last[1] or copied < last[0]:
            # A smaller counter means the partition changed worker: start counting again.
            self._last[key] = (copied, at)

    def rates(self, keys: set[PartitionKey]) -> dict[PartitionKey, float]:
        """bytes/s for each of `keys`; 0 for partitions not measured yet."""
        return {key: self._rates.get(key, 0.0) for key in keys}
