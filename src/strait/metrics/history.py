"""Short time series kept in memory for the dashboard's charts. Pure bookkeeping."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

Point = tuple[float, float]


class History:
    """Named series of (unix time, value), each bounded to the last `points` samples."""

    def __init__(self, points: int = 300) -> None:
        self._points = points
        self._series: dict[str, dict[str, deque[Point]]] = {}

    def add(self, chart: str, at: float, values: Mapping[str, float]) -> None:
        """One sample per series of `chart`; a series missing from `values` gets no point."""
        series = self._series.setdefault(chart, {})
        for name, value in values.items():
            series.setdefault(name, deque(maxlen=self._points)).append((round(at, 3), value))
        oldest = at - self._points * 60.0
        for name in [n for n, points in series.items() if points and points[-1][0] < oldest]:
            del series[name]  # a series that stopped long ago (a removed worker or topic)

    def charts(self) -> dict[str, dict[str, list[Point]]]:
        return {chart: {name: list(pts) for name, pts in series.items()} for chart, series in self._series.items()}


class CounterRates:
    """bytes/s from cumulative counters that may restart (a partition changing worker)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def rate(self, name: str, value: float, at: float) -> float | None:
        last = self._last.get(name)
        self._last[name] = (value, at)
        if last is None or at <= last[1] or value < last[0]:
            return None
        return (value - last[0]) / (at - last[1])
