"""Delivery reports settled in bulk: the record copy loop's acknowledgement accounting.

librdkafka reports each record's delivery by calling the ``on_delivery`` callable given to
``produce()``. A Python function there costs a Python call per record, plus the stage metrics
and checkpoint bookkeeping it did for that one record. Here each record's ``on_delivery`` is the
``__setitem__`` of its own empty dict instead: the client fills it in C with ``{None: message}``
(acknowledged) or ``{error: message}`` (failed), and once per loop turn, right after ``poll()``
or ``flush()``, :meth:`DeliveryBook.settle` takes what was reported, one stretch of a
partition's consecutive records at a time:

- the tracker takes the stretch's acknowledgements in one call (a few set operations), the
  offset map's run is extended once, records and bytes are counted once;
- a failed record is handed to the pipeline's failure handler, alone and in order;
- latency figures come from a systematic sample: every ``SAMPLE_EVERY``-th record of the
  stretch (always its last), each observed with the weight of the records it stands for, so
  histogram counts still add up to records. The produce acknowledgement time is librdkafka's
  own measurement (``Message.latency()``: from ``produce()`` to the report); end-to-end latency
  runs from the copied record's timestamp, which is the source record's timestamp when the
  destination topic keeps CreateTime (a LogAppendTime destination reports the broker's append
  time instead: no end-to-end figure then).

A partition's records are settled in send order, so a report that arrives before an earlier
record's report waits until that one is in (librdkafka reports a partition's records in order;
a wait only delays the accounting, it never changes it). The checkpoint semantics are those of
:class:`~strait.worker.checkpoint.AckTracker`: the contiguous acknowledged prefix.

Every record keeps a report of its own, though the reports cost about a fifth of record mode's
loop. Reporting only some records (a stretch's last) and settling the stretch from that one
would be sound only if a later record's acknowledgement proved every earlier record of its
partition written, and librdkafka does not promise that: a record that times out in the queue
(``message.timeout.ms``) is skipped by the idempotent producer (epoch bump, sequence reset) while
later records are still written, and ``enable.gapless.guarantee`` expressly leaves such timeouts
out (librdkafka's INTRODUCTION.md, "Message timeout considerations"). An unreported record that
timed out would then be passed by the checkpoint: a loss. (confluent-kafka 2.16 would skip the
Python message and call for a record without a report, but still takes the GIL for it.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from itertools import islice, repeat, takewhile
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, Message

from strait.metrics.stages import CopyObserver
from strait.worker.checkpoint import AckTracker
from strait.worker.pipeline import PartitionState
from strait.worker.startup import PRODUCED, finish, mark

# One record in this many is observed for the latency histograms (with this weight).
SAMPLE_EVERY = 16
# Settled reports are cut off a stretch once this many piled up at its front.
_COMPACT_AFTER = 1024

_message_offset = Message.offset
_message_value = Message.value
_message_key = Message.key
_NONE = repeat(None)  # dict.get's default, for every report

Report = dict[Any, Any]
# (state, tracker, source offset, key and value bytes, error, message): the pipeline's handler of
# a failed record.
FailureHandler = Callable[[PartitionState, AckTracker, int, int, KafkaError, Any], None]


class Stretch:
    """Records of one partition sent one after the other: source offsets ``first`` onwards, each
    record's report dict (empty until the client fills it), the first ``settled`` of them done."""

    __slots__ = ("first", "reports", "settled", "state", "tracker")

    def __init__(self, state: PartitionState, tracker: AckTracker, first: int, reports: list[Report]) -> None:
        self.state = state
        self.tracker = tracker
        self.first = first
        self.reports = reports
        self.settled = 0


class DeliveryBook:
    """The reports not yet settled, per partition tracker, in send order. One pipeline thread
    adds and settles; nothing here is thread-safe."""

    def __init__(self, pipeline: str, observer: CopyObserver | None, on_failure: FailureHandler) -> None:
        self._pipeline = pipeline
        self._observer = observer
        self._on_failure = on_failure
        self._open: dict[AckTracker, deque[Stretch]] = {}

    def __len__(self) -> int:
        """Records whose reports are not settled yet."""
        return sum(len(s.reports) - s.settled for stretches in self._open.values() for s in stretches)

    def add(self, state: PartitionState, tracker: AckTracker, first: int, reports: list[Report]) -> None:
        """Records ``first`` to ``first + len(reports) - 1`` were handed to the producer, each
        with ``on_delivery=report.__setitem__``."""
        if not reports:
            return
        if state.trace is not None:
            mark(state, PRODUCED)
        stretches = self._open.get(tracker)
        if stretches is None:
            self._open[tracker] = deque((Stretch(state, tracker, first, reports),))
            return
        last = stretches[-1]
        if last.first + len(last.reports) == first and last.state is state:
            last.reports.extend(reports)
        else:
            stretches.append(Stretch(state, tracker, first, reports))

    def settle(self) -> None:
        """Account for every report that arrived, in each partition's send order."""
        if not self._open:
            return
        now = time.time()
        for tracker, stretches in list(self._open.items()):
            while stretches and self._settle_stretch(stretches[0], now):
                stretches.popleft()
            if not stretches:
                del self._open[tracker]

    def _settle_stretch(self, stretch: Stretch, now: float) -> bool:
        """Settle the reported front of one stretch; True once all of it is settled."""
        reports = stretch.reports
        while True:
            start = stretch.settled
            # The messages of the reports in so far (a filled dict has one entry): None where
            # the record failed.
            messages = list(map(dict.get, takewhile(len, islice(reports, start, None) if start else reports), _NONE))
            if not messages:
                break
            try:
                acked = messages.index(None)
            except ValueError:
                acked = len(messages)
            if acked:
                self._acked(
                    stretch, stretch.first + start, messages[:acked] if acked < len(messages) else messages, now
                )
            stretch.settled = start + acked
            if acked == len(messages):
                break
            ((error, message),) = reports[start + acked].items()
            stretch.settled += 1
            self._on_failure(
                stretch.state, stretch.tracker, stretch.first + start + acked, _size(message), error, message
            )
        if stretch.settled == len(reports):
            return True
        if stretch.settled >= _COMPACT_AFTER:
            del reports[: stretch.settled]
            stretch.first += stretch.settled
            stretch.settled = 0
        return False

    def _acked(self, stretch: Stretch, first: int, messages: list[Any], now: float) -> None:
        state = stretch.state
        count = len(messages)
        stretch.tracker.acked_range(first, count)
        written = list(map(_message_offset, messages))
        start = written[0]
        if start is not None and start >= 0 and written == list(range(start, start + count)):
            state.runs.note_many(first, start, count)
        else:
            note = state.runs.note
            for index, destination in enumerate(written):
                note(first + index, -1 if destination is None else destination)
        state.records += count
        state.bytes += sum(map(len, filter(None, map(_message_value, messages)))) + sum(
            map(len, filter(None, map(_message_key, messages)))
        )
        state.last_progress = now
        if state.trace is not None:
            finish(state, _latency(messages[0]))
        if state.waiting is not None:
            state.waiting = None
        if self._observer is not None:
            self._observe(state, messages)

    def _observe(self, state: PartitionState, messages: list[Any]) -> None:
        observer = self._observer
        assert observer is not None
        task = state.task
        count = len(messages)
        # Records count-1, count-1-SAMPLE_EVERY, ...: the first sample stands for the records
        # before it too, so the weights add up to count.
        first = (count - 1) % SAMPLE_EVERY
        weight = first + 1
        for index in range(first, count, SAMPLE_EVERY):
            message = messages[index]
            kind, timestamp = message.timestamp()
            observer.acked(
                self._pipeline,
                task.destination_topic,
                task.partition,
                message.latency(),
                timestamp if kind == TIMESTAMP_CREATE_TIME else 0,
                weight,
            )
            weight = SAMPLE_EVERY


def _latency(message: Any) -> float | None:
    """librdkafka's produce-to-report time of ``message`` (test doubles may have none)."""
    latency = getattr(message, "latency", None)
    value = latency() if callable(latency) else None
    return value if isinstance(value, float) else None


def _size(message: Any) -> int:
    key, value = message.key(), message.value()
    return (len(key) if key else 0) + (len(value) if value else 0)
