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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_OR_PARTITION = 3

Lookup = Callable[[str, str], dict[int, int]]  # (cluster, topic) -> partition -> leader node id


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

    def leader(self, cluster: str, topic: str, partition: int) -> int | None:
        """The leader of ``topic``/``partition`` on ``cluster``, or None while unknown."""
        key = (cluster, topic)
        leaders = self._leaders.get(key)
        if leaders is not None and partition in leaders:
            return leaders[partition]
        now = self._clock()
        if now - self._asked_at.get(key, -float("inf")) < self._refresh_s:
            return None
        self._asked_at[key] = now
        try:
            leaders = self._lookup(cluster, topic)
        except Exception as exc:
            if getattr(exc, "code", None) == UNKNOWN_TOPIC_OR_PARTITION:
                self._missing_since.setdefault(key, now)
            log.info("leaders of %s on the %s cluster unknown (%s)", topic, cluster, exc)
            return None
        self._missing_since.pop(key, None)
        self._leaders[key] = leaders
        return leaders.get(partition)

    def known(self, cluster: str) -> dict[tuple[str, int], int]:
        """Every (topic, partition) -> leader known on ``cluster`` now."""
        return {(t, p): leader for (c, t), ps in self._leaders.items() if c == cluster for p, leader in ps.items()}

    def forget(self, cluster: str, topics: Iterable[str]) -> None:
        """A leader moved (or a request failed): ask again on the next use."""
        for topic in topics:
            self._leaders.pop((cluster, topic), None)
            self._asked_at.pop((cluster, topic), None)

    def gone(self, cluster: str, topic: str) -> float | None:
        """Seconds ``topic`` has been reported missing on ``cluster``, once that is at least
        ``missing_topic_s``; None while it exists (or has not been missing that long)."""
        since = self._missing_since.get((cluster, topic))
        if since is None:
            return None
        missing = self._clock() - since
        return missing if missing >= self._missing_topic_s else None
