"""Following a route's offset map as it grows, for repeated translations.

:func:`strait.offsetmap.store.read_map` reads the whole map once (a one-shot failover).
Continuous group sync translates every few seconds; :class:`MapFollower` keeps one consumer on
the map topic and reads only what was published since the last call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from strait import clients
from strait.offsetmap.codec import decode, map_topic
from strait.offsetmap.runs import Run
from strait.offsetmap.store import PartitionMap

log = logging.getLogger(__name__)


class MapFollower:
    """The merged map of one route, brought up to date by :meth:`refresh` (one thread only)."""

    def __init__(self, destination: Mapping[str, Any], route: str, *, timeout_s: float = 15.0) -> None:
        self.topic = map_topic(route)
        self._destination = destination
        self._route = route
        self._timeout_s = timeout_s
        self._consumer: Consumer | None = None
        self._partitions: list[int] = []
        self._position: dict[int, int] = {}
        # Per source (topic, partition): the largest count published for each run start.
        self._runs: dict[tuple[str, int], dict[tuple[int, int], int]] = {}
        self._topics: dict[tuple[str, int], str] = {}
        self._map: dict[tuple[str, int], PartitionMap] = {}

    def refresh(self) -> dict[tuple[str, int], PartitionMap]:
        """Read what was published since the last call; returns the whole merged map.

        An absent map topic is an empty map (nothing copied yet); Kafka errors raise
        KafkaException, and the next call starts over.
        """
        try:
            return self._refresh()
        except KafkaException:
            self.close()
            raise

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def _refresh(self) -> dict[tuple[str, int], PartitionMap]:
        if self._consumer is None and not self._open():
            return {}
        assert self._consumer is not None
        ends = {}
        for partition in self._partitions:
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=self._timeout_s, cached=False
            )
            ends[partition] = high
        changed = False
        deadline = time.monotonic() + self._timeout_s
        while any(self._position.get(p, 0) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                log.warning("offset map %s: not read to its end within %.0fs", self.topic, self._timeout_s)
                break
            messages = self._consumer.consume(1000, 0.5)
            if not messages:
                # Transaction markers at the end hold no record: the position says how far we are.
                for tp in self._consumer.position([TopicPartition(self.topic, p) for p in self._partitions]):
                    if tp.offset >= 0:
                        self._position[tp.partition] = max(self._position.get(tp.partition, 0), tp.offset)
                continue
            for message in messages:
                error = message.error()
                if error is not None:
                    raise KafkaException(error)
                self._position[message.partition() or 0] = (message.offset() or 0) + 1
                try:
                    entry = decode(message.value() or b"")
                except ValueError:
                    log.warning("offset map %s: skipping a record that is not an entry", self.topic)
                    continue
                key = (entry.topic, entry.partition)
                runs = self._runs.setdefault(key, {})
                start = (entry.run.source, entry.run.destination)
                if runs.get(start, 0) < entry.run.count:
                    runs[start] = entry.run.count
                    changed = True
                self._topics[key] = entry.destination_topic
        if changed:
            self._map = {
                key: PartitionMap(self._topics[key], sorted(Run(s, d, n) for (s, d), n in runs.items()))
                for key, runs in self._runs.items()
            }
        return self._map

    def _open(self) -> bool:
        consumer = clients.consumer(
            self._destination,
            **{
                "group.id": f"strait-offsetmap-reader-{self._route}",
                "enable.auto.commit": False,
                # Runs of an aborted transaction are not runs; the watermark read below is then
                # the last stable offset, the end of what this consumer may read.
                "isolation.level": "read_committed",
            },
        )
        metadata = consumer.list_topics(self.topic, timeout=self._timeout_s)
        described = metadata.topics.get(self.topic)
        if described is None or described.error is not None or not described.partitions:
            consumer.close()
            return False
        self._partitions = sorted(described.partitions)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self._partitions])
        self._consumer = consumer
        self._position = {}
        self._runs = {}
        self._topics = {}
        self._map = {}
        return True
