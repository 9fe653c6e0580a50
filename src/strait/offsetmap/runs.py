"""Runs of consecutive copies: source offsets s..s+n-1 landed at destination d..d+n-1.

A copy loop notes every acknowledged record; consecutive ones extend the last run, anything
else (a source gap such as compaction or a transaction marker, a resend after a rewind, a
destination gap) starts a new one. Idle partitions therefore cost nothing, and a partition
copied without faults is one run however many records it has.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Run:
    """Source offsets ``source``..``source+count-1`` copied to ``destination``..``destination+count-1``."""

    source: int
    destination: int
    count: int

    @property
    def source_end(self) -> int:
        return self.source + self.count

    def destination_of(self, source_offset: int) -> int:
        return self.destination + (source_offset - self.source)


class RunRecorder:
    """The runs of one partition: the copy loop's thread notes, the copier's thread takes.

    ``note`` is on the per-record path: it only compares and adds. ``take`` returns the runs
    that changed since the last ``take`` (the open last run again whenever it grew).

    An exactly-once pipeline takes the runs into its open transaction; if that transaction
    aborts, its records were never copied: ``rollback`` forgets everything noted or taken since
    the last ``keep`` (called when a transaction committed), so no run ever maps them.
    """

    __slots__ = ("_closed", "_kept", "_last_taken", "_lock", "_open", "_taken")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed: list[Run] = []
        self._open: list[int] | None = None  # [source, destination, count]
        self._taken = 0  # the open run's count when last taken
        self._last_taken: Run | None = None  # the open run as last taken
        self._kept: Run | None = None  # ... as of the last keep(): where a rollback returns

    def note(self, source_offset: int, destination_offset: int) -> None:
        run = self._open
        if run is not None and source_offset == run[0] + run[2] and destination_offset == run[1] + run[2]:
            run[2] += 1
            return
        if destination_offset < 0:
            return  # no offset reported (an acknowledgement without one): nothing to map
        with self._lock:
            if run is not None:
                self._closed.append(Run(run[0], run[1], run[2]))
            self._open = [source_offset, destination_offset, 1]

    def note_many(self, source_offset: int, destination_offset: int, count: int) -> None:
        """``count`` consecutive records from ``source_offset`` landed from ``destination_offset``
        on (one whole record batch): the same as ``count`` calls of :meth:`note`."""
        run = self._open
        if run is not None and source_offset == run[0] + run[2] and destination_offset == run[1] + run[2]:
            run[2] += count
            return
        if destination_offset < 0 or count < 1:
            return
        with self._lock:
            if run is not None:
                self._closed.append(Run(run[0], run[1], run[2]))
            self._open = [source_offset, destination_offset, count]

    def take(self) -> list[Run]:
        """Runs to publish: every run closed since the last call, and the open one if it grew."""
        with self._lock:
            runs, self._closed = self._closed, []
            run = self._open
            if run is not None:
                current = Run(run[0], run[1], run[2])
                if runs or current.count != self._taken:
                    runs.append(current)
                self._taken = current.count
                self._last_taken = current
        return runs

    def keep(self) -> None:
        """What was taken is durable now (its transaction committed): a rollback returns here."""
        with self._lock:
            self._kept = self._last_taken

    def rollback(self) -> None:
        """Forget every run noted or taken since the last :meth:`keep` (their records were
        aborted): the next record starts a new run, or extends the kept one. The exactly-once
        pipeline takes every run before each commit, so nothing committed is forgotten."""
        with self._lock:
            kept = self._kept
            self._closed = []
            self._open = None if kept is None else [kept.source, kept.destination, kept.count]
            self._taken = 0 if kept is None else kept.count
            self._last_taken = kept
