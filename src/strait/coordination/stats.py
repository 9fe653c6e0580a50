"""Worker statistics kept mostly out of ZooKeeper.

A worker rewrites its stats report every `worker.stats_interval_s` (2 s). With per-partition
entries for thousands of partitions that node grew past ZooKeeper's 1 MB limit and made
ZooKeeper write megabytes every few seconds. Now a worker with more than
`INLINE_PARTITIONS` partitions writes only a small summary to ZooKeeper (totals, latency,
the time of the report, and `stats_url`), and serves the whole report over its metrics HTTP
server (`GET /stats`). A worker with few partitions still writes the whole report, as before
(nothing to fetch, and controllers of the previous version read it).

The controller's `StatsGatherer` fetches the whole reports in the background and merges them
into the snapshot, so the control loop, healing, the REST API and the dashboard read the same
shape as before without waiting on HTTP.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

# Above this many partitions a worker's per-partition stats stay out of ZooKeeper.
INLINE_PARTITIONS = 1000
# Per-partition sections of a report that the summary leaves out.
PER_PARTITION = ("partitions", "lag_seconds")
FETCH_TIMEOUT_S = 5.0

_token: str | None = None


def use_token(token: str | None) -> None:
    """The bearer token this process sends when it fetches workers' stats
    (`observability.metrics_token`, which guards the workers' HTTP endpoints)."""
    global _token
    _token = token or None


def stats_url(metrics_url: str | None) -> str | None:
    """The worker's `/stats` URL next to its `/metrics` URL."""
    if not metrics_url or not metrics_url.endswith("/metrics"):
        return None
    return metrics_url[: -len("/metrics")] + "/stats"


def for_zookeeper(report: Mapping[str, Any], interval_s: float) -> dict[str, Any]:
    """What a worker writes to ZooKeeper for `report`: the report itself while it is small (or
    cannot be served over HTTP), else a summary naming where the whole report is served."""
    partitions = dict(report.get("partitions") or {})
    url = stats_url(report.get("metrics_url"))
    if len(partitions) <= INLINE_PARTITIONS or url is None:
        return dict(report)
    summary = {k: v for k, v in report.items() if k not in PER_PARTITION}
    summary.update(
        {
            "stats_url": url,
            "interval_s": interval_s,
            "partition_count": len(partitions),
            "records": sum(int(p.get("records") or 0) for p in partitions.values()),
            "bytes": sum(int(p.get("bytes") or 0) for p in partitions.values()),
            "lag": sum(int(p.get("lag") or 0) for p in partitions.values()),
        }
    )
    return summary


class StatsGatherer:
    """Fetches the whole reports of workers that publish only a summary; never blocks a reader.

    `merge` returns, per worker, the whole report fetched last when it is recent (its
    `updated` within three stats intervals of the summary's), else the summary alone (the
    per-partition figures of that worker are missing until a fetch succeeds; a hung agent
    still shows, as its reports stop changing either way).
    """

    def __init__(self, *, token: str | None = None, timeout_s: float = FETCH_TIMEOUT_S) -> None:
        self._token = token or _token
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._reports: dict[str, dict[str, Any]] = {}
        self._pending: set[str] = set()
        self._failed_at: dict[str, float] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="strait-stats")
        self.fetches = 0
        self.failures = 0

    def merge(self, summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        merged: dict[str, Mapping[str, Any]] = {}
        now = time.monotonic()
        with self._lock:
            for gone in set(self._reports) - set(summaries):
                del self._reports[gone]
            for worker, summary in summaries.items():
                url = summary.get("stats_url")
                if not url:
                    merged[worker] = summary
                    continue
                updated = float(summary.get("updated") or 0)
                whole = self._reports.get(worker)
                fresh = whole is not None and float(whole.get("updated") or 0) >= updated
                if not fresh and worker not in self._pending and now - self._failed_at.get(worker, -1e9) > 1.0:
                    self._pending.add(worker)
                    self._pool.submit(self._fetch, worker, str(url))
                window = 3 * float(summary.get("interval_s") or 2.0)
                if whole is not None and float(whole.get("updated") or 0) >= updated - window:
                    merged[worker] = {**summary, **whole}
                else:
                    merged[worker] = summary
        return merged

    def _fetch(self, worker: str, url: str) -> None:
        try:
            request = urllib.request.Request(url)
            if self._token:
                request.add_header("Authorization", f"Bearer {self._token}")
            context = ssl.create_default_context() if url.startswith("https:") else None
            with urllib.request.urlopen(request, timeout=self._timeout_s, context=context) as answer:
                report = json.loads(answer.read())
        except Exception as exc:  # any failure: keep the summary, try again a second later
            with self._lock:
                self._pending.discard(worker)
                self._failed_at[worker] = time.monotonic()
                self.failures += 1
            log.warning("cannot fetch the stats of worker %s from %s: %s", worker, url, exc)
            return
        with self._lock:
            self._pending.discard(worker)
            self._failed_at.pop(worker, None)
            self.fetches += 1
            if isinstance(report, dict):
                self._reports[worker] = report

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
