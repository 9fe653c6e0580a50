"""Which broker leads each partition, for the batch pipeline's own fetches and produces.

A small cache over Metadata requests (:meth:`strait.worker.batch.link.ClusterLink.leaders`),
per (cluster, topic):

- a partition missing from the cached map (a topic that grew since, or a partition without a
  leader during a broker restart) asks again, at most once per ``refresh_s`` per topic;
- a failed lookup is not repeated for ``refresh_s`` either: every lookup is a blocking round
  trip on the pipeline's only thread;
- a topic the cluster says does not exist (UNKNOWN_TOPIC_OR_PARTITION) for ``missing_topic_s``
  in a row is *gone* (deleted under the copier): the pipeline fails its partitions, as record
  mode does once librdkafka stops finding it in the metadata.

A lookup may answer at once (a dict) or later (a kafka-python ``Future`` of the dict, see
:meth:`strait.worker.batch.link.ClusterLink.leaders_async`): while its answer is on the way the
topic's partitions have no leader (:meth:`LeaderCache.asking` says so), and the pipeline's only
thread goes on with every other partition instead of waiting a round trip (a blocking Metadata
request held the whole loop 50-90 ms in a 10,000 records/s run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_OR_PARTITION = 3

# (cluster, topic) -> partition -> leader node id, or a future of that
Lookup = Callable[[str, str], Any]


class LeaderCache:
    def __init__(
        self,
        lookup: Lookup,
        *,
        refresh_s: float = 0.2,
        missing_topic_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._refresh_s = refresh_s
        self._missing_topic_s = missing_topic_s
        self._clock = clock
        self._leaders: dict[tuple[str, str], dict[int, int]] = {}
        self._asked_at: dict[tuple[str, str], float] = {}
        self._missing_since: dict[tuple[str, str], float] = {}
        self._pending: dict[tuple[str, str], Any] = {}  # lookups whose answer is on the way

    def leader(self, cluster: str, topic: str, partition: int) -> int | None:
        """The leader of ``topic``/``partition`` on ``cluster``, or None while unknown."""
        key = (cluster, topic)
        leaders = self._leaders.get(key)
        if leaders is not None and partition in leaders:
            return leaders[partition]
        pending = self._pending.get(key)
        if pending is not None:
            if not pending.is_done:
                return None
            del self._pending[key]
            return self._answered(key, partition, pending, self._clock())
        now = self._clock()
        if now - self._asked_at.get(key, -float("inf")) < self._refresh_s:
            return None
        self._asked_at[key] = now
        try:
            answer = self._lookup(cluster, topic)
        except Exception as exc:
            self._failed(key, exc, now)
            return None
        if isinstance(answer, dict):
            return self._found(key, partition, answer)
        if not answer.is_done:
            self._pending[key] = answer
            return None
        return self._answered(key, partition, answer, now)

    def asking(self, cluster: str, topic: str) -> bool:
        """True while a lookup of ``topic`` on ``cluster`` waits for its answer."""
        return (cluster, topic) in self._pending

    def _answered(self, key: tuple[str, str], partition: int, future: Any, now: float) -> int | None:
        if future.failed():
            self._failed(key, future.exception, now)
            return None
        return self._found(key, partition, future.value)

    def _found(self, key: tuple[str, str], partition: int, leaders: dict[int, int]) -> int | None:
        self._missing_since.pop(key, None)
        self._leaders[key] = leaders
        return leaders.get(partition)

    def _failed(self, key: tuple[str, str], exc: BaseException, now: float) -> None:
        if getattr(exc, "code", None) == UNKNOWN_TOPIC_OR_PARTITION:
            self._missing_since.setdefault(key, now)
        log.info("leaders of %s on the %s cluster unknown (%s)", key[1], key[0], exc)

    def known(self, cluster: str) -> dict[tuple[str, int], int]:
        """Every (topic, partition) -> leader known on ``cluster`` now."""
        return {(t, p): leader for (c, t), ps in self._leaders.items() if c == cluster for p, leader in ps.items()}

    def forget(self, cluster: str, topics: Iterable[str]) -> None:
        """A leader moved (or a request failed): ask again on the next use."""
        for topic in topics:
            self._leaders.pop((cluster, topic), None)
            self._asked_at.pop((cluster, topic), None)
            self._pending.pop((cluster, topic), None)  # asked before the move: ask again

    def gone(self, cluster: str, topic: str) -> float | None:
        """Seconds ``topic`` has been reported missing on ``cluster``, once that is at least
        ``missing_topic_s``; None while it exists (or has not been missing that long)."""
        since = self._missing_since.get((cluster, topic))
        if since is None:
            return None
        missing = self._clock() - since
        return missing if missing >= self._missing_topic_s else None
