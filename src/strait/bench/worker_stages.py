"""Where a Strait worker's end-to-end time goes during a latency run, from its own stats reports.

Each worker publishes a report to ZooKeeper every few seconds (``workers/stats/<id>``) with the
p50 and p99 of what it observed since its previous report: ``e2e`` (source record timestamp to
the destination's acknowledgement, as the worker sees it) and the copy path's stages
(``fetch_wait``: how long a consume call waited for records; ``queued``: from fetch to
``produce()``; ``produce_ack``: librdkafka's own ``produce()``-to-report time;
``checkpoint_commit``). :class:`WorkerStages` collects those windows during a run, and
:func:`summarize` condenses the ones inside the measured interval, so a latency row says
whether its tail is in the worker (and in which stage) or outside it (the source broker
before the fetch, the destination broker and the reader after the acknowledgement).

Window percentiles cannot be merged exactly: a row gives the count-weighted median of the
windows' p50s, and the median and the largest of their p99s.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

log = logging.getLogger(__name__)

Window = tuple[float, str, dict[str, Any]]  # (report time, worker, {name: {count, p50_s, p99_s}})


def windows_of(worker: str, report: dict[str, Any]) -> list[Window]:
    """The per-window figures of one stats report (every route's, by name)."""
    updated = float(report.get("updated") or 0.0)
    figures: dict[str, Any] = {}
    for route_figures in (report.get("latency") or {}).values():
        figures["e2e"] = route_figures
    for stages in (report.get("stages") or {}).values():
        figures.update(stages)
    return [(updated, worker, figures)] if figures else []


def _weighted_median(pairs: Sequence[tuple[float, int]]) -> float | None:
    pairs = sorted(p for p in pairs if p[1] > 0)
    total = sum(n for _, n in pairs)
    if not total:
        return None
    seen = 0
    for value, n in pairs:
        seen += n
        if seen * 2 >= total:
            return value
    return pairs[-1][0]


def summarize(windows: Iterable[Window], *, after: float, before: float) -> dict[str, dict[str, Any]]:
    """Per figure, over the windows reported in ``[after, before]``: windows, records, p50 (ms, the
    count-weighted median of window p50s), p99 (ms, the median of window p99s) and p99_max (ms)."""
    by_name: dict[str, list[tuple[int, float, float]]] = {}
    for updated, _worker, figures in windows:
        if not after <= updated <= before:
            continue
        for name, f in figures.items():
            count, p50, p99 = int(f.get("count") or 0), f.get("p50_s"), f.get("p99_s")
            if count and p50 is not None and p99 is not None:
                by_name.setdefault(name, []).append((count, float(p50), float(p99)))
    out: dict[str, dict[str, Any]] = {}
    for name, rows in sorted(by_name.items()):
        p50 = _weighted_median([(p, n) for n, p, _ in rows])
        p99s = sorted(p for _, _, p in rows)
        out[name] = {
            "windows": len(rows),
            "count": sum(n for n, _, _ in rows),
            "p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "p99_ms": round(p99s[len(p99s) // 2] * 1000, 2),
            "p99_max_ms": round(p99s[-1] * 1000, 2),
        }
    return out


class WorkerStages:
    """Reads the workers' stats reports from ZooKeeper every ``period_s`` on a thread, keeping each
    new report's windows. A failure to read only loses windows (the row then says less)."""

    def __init__(self, zookeeper: str, root: str, workers: Sequence[str], *, period_s: float = 1.0) -> None:
        self._zookeeper, self._root, self._workers = zookeeper, root, list(workers)
        self._period_s = period_s
        self.windows: list[Window] = []
        self._seen: set[tuple[str, float]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-worker-stages", daemon=True)

    def start(self) -> WorkerStages:
        self._thread.start()
        return self

    def stop(self) -> list[Window]:
        self._stop.set()
        self._thread.join(10)
        return list(self.windows)

    def _run(self) -> None:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self._zookeeper)
        try:
            zk.start(timeout=15)
            while True:
                for worker in self._workers:
                    self._read(zk, worker)
                if self._stop.wait(self._period_s):
                    break
            for worker in self._workers:  # the last report before the stop
                self._read(zk, worker)
        except Exception:
            log.warning("reading the workers' stats reports failed", exc_info=True)
        finally:
            zk.stop()
            zk.close()

    def _read(self, zk: Any, worker: str) -> None:
        try:
            data, _ = zk.get(f"{self._root}/workers/stats/{worker}")
            report = json.loads(data)
        except Exception:  # not published yet, or the worker went
            return
        key = (worker, float(report.get("updated") or 0.0))
        if key in self._seen:
            return
        self._seen.add(key)
        self.windows.extend(windows_of(worker, report))
