"""The worker's watchdog: notices, without the controller, a copy loop that stopped turning or a
lagging partition that stopped moving, and acts in escalating steps.

It runs on a thread of its own, so a loop that hangs cannot hide itself. Every ``interval_s``:

- **loop overdue**: a copy loop's turn has run longer than ``Bounds.turn_s``. A turn's longest
  legitimate wait is one transaction call under its deadline (``HUNG_AFTER_S``), so the bound
  is that plus a margin. At the bound: every thread's stack is dumped to the log
  (``faulthandler``) and the event counted; at twice the bound the same turn still runs and the
  worker exits (crash-only: its session ends, the leader fences it and moves its partitions,
  which resume from their checkpoints).
- **partition stalled**: a partition copying normally whose checkpoint has not moved for
  ``Bounds.progress_s`` while a fresh end offset (read from the source now, not the consumer's
  cached watermark, which stops moving with the partition) is ahead of it. A checkpoint may
  legitimately stay put while the producer retries a record for its delivery timeout and the
  partition then rewinds, so the bound is that plus a margin. At the bound: stacks dumped,
  counted, and the partition restarted (released and taken again from its checkpoint, with new
  consumer state); at twice the bound without progress the worker exits.

Each action is logged with its cause and counted (``strait_watchdog_actions``, labels cause
and action), so dashboards and alerts see it. Controller healing remains the second line.

:class:`Judge` decides and does no I/O; :class:`Watchdog` samples, asks it, and acts.
"""

from __future__ import annotations

import faulthandler
import logging
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-export not in __all__

from strait import clients
from strait.worker.pipeline import REWIND_BACKOFF_S
from strait.worker.source_checkpoints import list_offsets
from strait.worker.stalls import running_loops
from strait.worker.task import PartitionTask
from strait.worker.transactional import HUNG_AFTER_S

log = logging.getLogger(__name__)

Cause = Literal["loop_overdue", "partition_stalled"]
Action = Literal["stack_dump", "restart_partition", "exit"]

# Added to each derived bound: scheduling on a loaded machine, a commit interval, a fetch wait.
MARGIN_S = 30.0


@dataclass(frozen=True)
class Bounds:
    turn_s: float
    progress_s: float
    interval_s: float = 5.0

    @classmethod
    def derived(cls, *, delivery_timeout_s: float) -> Bounds:
        """From the timeouts in force: the transaction calls' deadline and the producer's
        delivery timeout (the longest a record is retried before its partition rewinds)."""
        return cls(turn_s=HUNG_AFTER_S + MARGIN_S, progress_s=delivery_timeout_s + REWIND_BACKOFF_S + MARGIN_S)


@dataclass(frozen=True)
class Finding:
    cause: Cause
    subject: str  # a loop's name, or route/topic/partition
    action: Action
    detail: str
    task: PartitionTask | None = None


@dataclass(frozen=True)
class PartitionSample:
    """What the watchdog reads of one assigned partition."""

    checkpoint: int | None
    copying: bool  # state ok: not starting, moving, draining, failed or waiting


class Judge:
    """Decides which loops and partitions need action; pure, time passed in."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self._dumped_turns: set[tuple[str, float]] = set()
        # Per partition: the checkpoint last seen, since when it has not moved, and the actions
        # already taken for that stretch.
        self._still: dict[PartitionTask, tuple[int | None, float]] = {}
        self._acted: dict[PartitionTask, set[Action]] = {}

    def loops(self, running: Mapping[str, tuple[float, float]], now: float) -> list[Finding]:
        """``running``: loop name -> (its turn's start, on the loop's clock; that clock now)."""
        findings: list[Finding] = []
        for name, (started, clock_now) in running.items():
            took = clock_now - started
            if took >= 2 * self.bounds.turn_s:
                findings.append(Finding("loop_overdue", name, "exit", f"one turn has run {took:.0f}s"))
            elif took >= self.bounds.turn_s and (name, started) not in self._dumped_turns:
                self._dumped_turns.add((name, started))
                findings.append(Finding("loop_overdue", name, "stack_dump", f"one turn has run {took:.0f}s"))
        self._dumped_turns = {(n, s) for n, s in self._dumped_turns if n in running and running[n][0] == s}
        return findings

    def still(self, partitions: Mapping[PartitionTask, PartitionSample], now: float) -> list[PartitionTask]:
        """Partitions copying whose checkpoint has not moved for ``progress_s``: the ones whose
        fresh end offsets the watchdog reads (a stall needs one ahead of the checkpoint)."""
        for task in set(self._still) - set(partitions):
            self._still.pop(task, None)
            self._acted.pop(task, None)
        candidates = []
        for task, sample in partitions.items():
            seen = self._still.get(task)
            if not sample.copying or seen is None or seen[0] != sample.checkpoint:
                self._still[task] = (sample.checkpoint, now)
                self._acted.pop(task, None)
                continue
            if now - seen[1] >= self.bounds.progress_s:
                candidates.append(task)
        return candidates

    def stalled(self, ends: Mapping[PartitionTask, int], now: float) -> list[Finding]:
        """Given fresh end offsets of ``still``'s candidates, the actions due."""
        findings: list[Finding] = []
        for task, end in ends.items():
            seen = self._still.get(task)
            if seen is None:
                continue
            checkpoint, since = seen
            if checkpoint is not None and end <= checkpoint:
                continue  # caught up: nothing to copy, nothing stalled
            stuck_s = now - since
            acted = self._acted.setdefault(task, set())
            subject = f"{task.route}/{task.topic}/{task.partition}"
            detail = f"checkpoint {checkpoint} unmoved for {stuck_s:.0f}s, source end {end}"
            if stuck_s >= 2 * self.bounds.progress_s and "restart_partition" in acted:
                findings.append(Finding("partition_stalled", subject, "exit", detail, task))
            elif "restart_partition" not in acted:
                acted.update(("stack_dump", "restart_partition"))
                findings.append(Finding("partition_stalled", subject, "stack_dump", detail, task))
                findings.append(Finding("partition_stalled", subject, "restart_partition", detail, task))
        return findings


class FreshEnds:
    """Reads end offsets (read_committed: the last stable offset) from the source clusters now,
    one admin client per cluster, made when first needed."""

    def __init__(self, sources: Mapping[str, Mapping[str, Any]]) -> None:
        self._sources = sources  # route -> its source cluster's client properties
        self._admins: dict[str, Any] = {}

    def __call__(self, tasks: Iterable[PartitionTask]) -> dict[PartitionTask, int]:
        by_route: dict[str, list[PartitionTask]] = {}
        for task in tasks:
            by_route.setdefault(task.route, []).append(task)
        ends: dict[PartitionTask, int] = {}
        for route, batch in by_route.items():
            admin = self._admins.get(route)
            if admin is None:
                admin = self._admins[route] = clients.admin(self._sources[route])
            offsets = list_offsets(
                admin,
                [TopicPartition(t.topic, t.partition) for t in batch],
                OffsetSpec.latest(),  # type: ignore[no-untyped-call]
            )
            ends.update({t: offsets[(t.topic, t.partition)] for t in batch})
        return ends


def stacks() -> str:
    """Every thread's stack, as faulthandler writes it (it needs a real file)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        return out.read()


class Watchdog:
    """Samples the loops and partitions of one worker on its own thread and acts on the judge's findings.

    ``partitions()`` gives every assigned partition's sample; ``fresh_ends(tasks)`` reads end
    offsets from the source now (may raise: the watchdog tries again next round);
    ``restart(tasks)`` asks the agent to release and take the partitions again; ``exit(reason)``
    ends the worker.
    """

    def __init__(
        self,
        bounds: Bounds,
        *,
        partitions: Callable[[], Mapping[PartitionTask, PartitionSample]],
        fresh_ends: Callable[[Iterable[PartitionTask]], Mapping[PartitionTask, int]],
        restart: Callable[[set[PartitionTask]], None],
        exit: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.judge = Judge(bounds)
        self._partitions = partitions
        self._fresh_ends = fresh_ends
        self._restart = restart
        self._exit = exit
        self._clock = clock
        self.actions: Counter[tuple[str, str]] = Counter()  # (cause, action) -> count
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="strait-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stopping.wait(self.judge.bounds.interval_s):
            try:
                self.check()
            except Exception:
                log.exception("watchdog: a check failed; trying again next round")

    def check(self) -> list[Finding]:
        """One round: sample, judge, act; the findings acted on."""
        now = self._clock()
        running = {loop.name: turn for loop in running_loops() if (turn := loop.turn()) is not None}
        findings = self.judge.loops(running, now)
        candidates = self.judge.still(self._partitions(), now)
        if candidates:
            try:
                ends = self._fresh_ends(candidates)
            except Exception as exc:
                log.warning("watchdog: reading fresh end offsets failed (%s); trying again next round", exc)
                ends = {}
            findings += self.judge.stalled(ends, now)
        self._act(findings)
        return findings

    def _act(self, findings: list[Finding]) -> None:
        restarts: set[PartitionTask] = set()
        for finding in findings:
            self.actions[(finding.cause, finding.action)] += 1
            log.error("watchdog: %s %s (%s): %s", finding.cause, finding.subject, finding.detail, finding.action)
            if finding.action == "stack_dump":
                log.error("watchdog: stacks of every thread:\n%s", stacks())
            elif finding.action == "restart_partition" and finding.task is not None:
                restarts.add(finding.task)
        if restarts:
            self._restart(restarts)
        exits = [f for f in findings if f.action == "exit"]
        if exits:
            self._exit("; ".join(f"{f.cause} {f.subject}: {f.detail}" for f in exits))
