"""Where a newly assigned partition's time goes before its first record is copied (debug logs).

A partition's :class:`StartTrace` is made when the copier is given the partition and marked at
each step on the way to its first acknowledged record: destination ready, checkpoint and
offsets read, handed to a pipeline, assigned to the pipeline's consumer (or its batch producer
id granted), first records fetched, first record produced, first acknowledged. The first
acknowledgement logs one line with every step's time since the assignment, at debug level, and
drops the trace, so a partition that runs costs nothing more.

A line reads ``first record of r/t/0 acknowledged 1.234s after its assignment: destination
ready +0.612, offsets read +0.700, ...; produce to ack 0.040s; at 1733071234.567`` (the last
figure is the Unix time of the acknowledgement, to set beside a reader's arrival times).
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

# The steps in the order they normally happen (a retried start can mark some of them again:
# only the first time counts).
DESTINATION_READY = "destination ready"
OFFSETS_READ = "offsets read"
HANDED = "handed to the pipeline"
ASSIGNED = "assigned in the pipeline"
IDENTITY = "producer id granted"
FETCHED = "first records fetched"
PRODUCED = "first record produced"


class StartTrace:
    """The times of one partition's steps from its assignment to its first copied record."""

    __slots__ = ("assigned_at", "marks")

    def __init__(self, now: float | None = None) -> None:
        self.assigned_at = time.monotonic() if now is None else now
        self.marks: dict[str, float] = {}

    def mark(self, step: str, now: float | None = None) -> None:
        """``step`` happened now (only its first time is kept)."""
        if step not in self.marks:
            self.marks[step] = time.monotonic() if now is None else now

    def line(self, task: Any, now: float, ack_latency_s: float | None) -> str:
        """The log line for the first acknowledgement at ``now``."""
        steps = ", ".join(f"{step} +{at - self.assigned_at:.3f}" for step, at in self.marks.items())
        latency = "" if ack_latency_s is None else f"; produce to ack {ack_latency_s:.3f}s"
        return (
            f"first record of {task} acknowledged {now - self.assigned_at:.3f}s after its assignment: "
            f"{steps}{latency}; at {time.time():.3f}"
        )


def mark(state: Any, step: str) -> None:
    """Mark ``step`` on ``state``'s trace, if it still has one."""
    trace: StartTrace | None = getattr(state, "trace", None)  # test doubles may have none
    if trace is not None:
        trace.mark(step)


def finish(state: Any, ack_latency_s: float | None = None) -> None:
    """``state``'s first record was acknowledged: log the trace (debug) and drop it."""
    trace: StartTrace | None = getattr(state, "trace", None)
    if trace is None:
        return
    state.trace = None
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", trace.line(state.task, time.monotonic(), ack_latency_s))
