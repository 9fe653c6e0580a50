"""The one owner of a record pipeline's consumer-side effects: assign, unassign, pause, resume, seek.

librdkafka keeps an application ``pause()`` across ``incremental_unassign`` and a later
``incremental_assign`` of the same partition: a partition paused while it is released and then
assigned again is never fetched, and nothing reports an error. So every effect on the source
consumer's partitions goes through this class, which keeps two invariants:

- a paused partition is assigned (``paused <= assigned``);
- a partition leaves the assignment resumed: ``stop`` resumes before it unassigns.

The resume comes before the unassign rather than after the next assign, so the assign's
offset is never touched by a later call. All calls run on the pipeline's thread; after
``close`` (the consumer is closed) every call is a no-op.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

Key = tuple[str, int]


class SourcePartitions:
    """What the pipeline's source consumer is assigned and paused, and the calls that change it."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self._assigned: set[Key] = set()
        self._paused: set[Key] = set()
        self._closed = False

    # -- reads ---------------------------------------------------------------------------------

    def assigned(self, key: Key) -> bool:
        return key in self._assigned

    def paused(self, key: Key) -> bool:
        return key in self._paused

    @property
    def closed(self) -> bool:
        return self._closed

    # -- effects -------------------------------------------------------------------------------

    def start(self, key: Key, offset: int) -> None:
        """Fetch ``key`` from exactly ``offset``, whether or not it is assigned or paused now."""
        if self._closed:
            return
        if key in self._assigned:
            self.resume_at(key, offset)
            return
        self._consumer.incremental_assign([TopicPartition(key[0], key[1], offset)])
        self._assigned.add(key)

    def pause(self, key: Key) -> None:
        """Stop fetching ``key`` until ``resume_at`` or ``start``; nothing if it is not assigned."""
        if self._closed or key not in self._assigned or key in self._paused:
            return
        self._consumer.pause([TopicPartition(key[0], key[1])])
        self._paused.add(key)

    def resume_at(self, key: Key, offset: int) -> None:
        """Continue fetching ``key`` from ``offset`` (seek, then resume if paused)."""
        if self._closed or key not in self._assigned:
            return
        self._consumer.seek(TopicPartition(key[0], key[1], offset))
        if key in self._paused:
            self._consumer.resume([TopicPartition(key[0], key[1])])
            self._paused.discard(key)

    def stop(self, key: Key) -> None:
        """Unassign ``key``, resumed first so that a later assignment of it fetches."""
        if key not in self._assigned:
            return
        self._assigned.discard(key)
        paused = key in self._paused
        self._paused.discard(key)
        if self._closed:
            return
        tp = TopicPartition(key[0], key[1])
        if paused:
            self._consumer.resume([tp])
        self._consumer.incremental_unassign([tp])

    def close(self) -> None:
        """The consumer is closed: forget everything, call nothing more."""
        self._closed = True
        self._assigned.clear()
        self._paused.clear()
