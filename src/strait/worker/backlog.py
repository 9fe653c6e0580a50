"""What the record copy loop fetched and has not produced yet: runs of one partition's messages.

A ``consume()`` call returns messages of several partitions, each partition's in a few long
stretches (librdkafka queues a fetch response's records together). The backlog keeps them as
:class:`Run` s in fetch order, so the produce pass looks a partition up once per run, not once
per record, and reads the offsets from one list taken when the messages arrived.

Each run remembers where the consumer's stream of its partition stood just before its first
message (``before``); for a later message of the run it is the offset after the previous one.
The copy loop accepts a gap after the last record sent only where the consumer's own stream
jumped (see :mod:`strait.worker.fetch`), and these positions are the consumer's account, taken
at fetch time: a record the loop itself dropped on the way still shows as a gap it made.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import groupby
from typing import Any

from confluent_kafka import Message

Key = tuple[str, int]

# The unbound C methods, mapped over a whole consume() result.
_error: Callable[[Any], Any] = Message.error
_offset: Callable[[Any], Any] = Message.offset
_topic: Callable[[Any], Any] = Message.topic
_partition: Callable[[Any], Any] = Message.partition


class Run:
    """Consecutive fetched messages of one partition (or one error message, ``key`` None).

    ``next`` is the index of the first message not produced or dropped yet; ``purged`` is set
    when the partition's position changed and the rest of the run must never be produced.
    """

    __slots__ = ("before", "key", "messages", "next", "offsets", "purged")

    def __init__(self, key: Key | None, before: int | None, messages: list[Any], offsets: list[Any]) -> None:
        self.key = key
        self.before = before
        self.messages = messages
        self.offsets = offsets
        self.next = 0
        self.purged = False

    def before_index(self, index: int) -> int | None:
        """Where the consumer's stream stood just before message ``index``."""
        if index == 0:
            return self.before
        previous = self.offsets[index - 1]
        return None if previous is None else previous + 1


def runs_of(messages: list[Any], stream: dict[Key, int]) -> list[Run]:
    """Split one ``consume()`` result into runs; ``stream`` (each partition's position in the
    consumer's stream) moves past every message handed over."""
    offsets = list(map(_offset, messages))
    if any(map(_error, messages)) or None in offsets:
        return _runs_with_errors(messages, offsets, stream)
    runs: list[Run] = []
    start = 0
    topics = list(map(_topic, messages))
    topic: str = topics[0] if topics else ""
    if topics.count(topic) == len(topics):
        # One topic (the usual case): grouped by partition alone, no key tuple per record.
        keys: Any = groupby(map(_partition, messages))
    else:
        keys = groupby(zip(topics, map(_partition, messages), strict=True))
    for group_key, group in keys:
        end = start + len(list(group))
        key: Key = (topic, group_key) if isinstance(group_key, int) else group_key
        runs.append(Run(key, stream.get(key), messages[start:end], offsets[start:end]))
        stream[key] = offsets[end - 1] + 1
        start = end
    return runs


def _runs_with_errors(messages: list[Any], offsets: list[Any], stream: dict[Key, int]) -> list[Run]:
    runs: list[Run] = []
    for message, offset in zip(messages, offsets, strict=True):
        if message.error() is not None or offset is None:
            runs.append(Run(None, None, [message], [offset]))
            continue
        key = (message.topic(), message.partition())
        last = runs[-1] if runs else None
        if last is not None and last.key == key:
            last.messages.append(message)
            last.offsets.append(offset)
        else:
            runs.append(Run(key, stream.get(key), [message], [offset]))
        stream[key] = offset + 1
    return runs


def purge(backlog: deque[Run], key: Key) -> None:
    """Drop every run of ``key`` (in place: a produce pass holding the deque sees it)."""
    if not any(run.key == key for run in backlog):
        return
    kept = []
    for run in backlog:
        if run.key == key:
            run.purged = True
        else:
            kept.append(run)
    backlog.clear()
    backlog.extend(kept)
