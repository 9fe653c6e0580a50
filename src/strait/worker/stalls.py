"""What holds a copy loop back: slow loop turns and garbage collections, in the debug log.

A copy loop's turn normally takes well under a millisecond of work besides its wait for
records (``with watch.idle():``); a turn whose work takes longer than :data:`STALL_S` delays
every record that arrives meanwhile, and shows as the end-to-end tail (p99) of a steady stream.
:class:`LoopWatch` times each turn's work and, for a slow one, logs at debug level how long it
took and how much of that the garbage collector held the GIL (the collector stops every thread
of the process).

``STRAIT_STALL_SAMPLE_MS`` (a diagnostic, off by default) also starts a sampler thread that
wakes that often and, while a watched turn runs longer than :data:`STALL_S`, notes where the
loop's thread is (file:line of its innermost frames), and how late the sampler itself woke: a
late sampler means the process had no CPU or another thread held the GIL. Slow turns then log
at warning level with those samples, so a benchmark run at its usual log level shows them.

:func:`freeze_heap` (called once a worker has started) keeps full collections short.
``STRAIT_GC_CENSUS`` (a diagnostic, off by default; slow: it lists every object) logs, after
each long full collection, how many objects generation 2 held and of which types: what the
collection had to walk.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

STALL_S = 0.02
# Every loop that called run_here(), for the worker's watchdog (strait.worker.watchdog).
_RUNNING: weakref.WeakSet[LoopWatch] = weakref.WeakSet()
# Garbage collections at least this long are logged (debug) with their generation.
GC_LOG_S = 0.005


class GcClock:
    """Time spent in garbage collections (gc.callbacks), in total and per generation."""

    def __init__(
        self, clock: Callable[[], float] = time.perf_counter, cpu_clock: Callable[[], float] = time.thread_time
    ) -> None:
        self._clock = clock
        # The collecting thread's CPU time: on a busy machine a collection's wall time also
        # holds the time the thread waited for a core (the GIL held meanwhile), its CPU time not.
        self._cpu_clock = cpu_clock
        self._started: float | None = None
        self._cpu_started = 0.0
        self.total_s = 0.0
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest_s = [0.0, 0.0, 0.0]
        self.cpu_s = [0.0, 0.0, 0.0]
        # Long collections not logged yet: (generation, seconds, CPU seconds, objects collected).
        # Logged by report(), never from inside the collection (a handler's lock may be held then).
        self.long: deque[tuple[int, float, float, int]] = deque(maxlen=100)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._cpu_started = self._cpu_clock()
            self._started = self._clock()
            return
        if self._started is None:
            return
        took = self._clock() - self._started
        cpu = self._cpu_clock() - self._cpu_started
        self._started = None
        generation = int(info.get("generation", 2))
        self.total_s += took
        self.count[generation] += 1
        self.seconds[generation] += took
        self.cpu_s[generation] += cpu
        self.longest_s[generation] = max(self.longest_s[generation], took)
        if took >= GC_LOG_S:
            self.long.append((generation, took, cpu, int(info.get("collected", 0))))

    def report(self) -> None:
        """Log the long collections since the last call."""
        level = logging.WARNING if _sampling() else logging.DEBUG
        while True:
            try:
                generation, took, cpu, collected = self.long.popleft()  # several loops may report
            except IndexError:
                return
            log.log(
                level,
                "gc generation %d took %.1f ms (%.1f ms CPU, %d collected)",
                generation,
                took * 1000,
                cpu * 1000,
                collected,
            )
            if generation == 2 and os.environ.get("STRAIT_GC_CENSUS"):
                census = Counter(type(o).__qualname__ for o in gc.get_objects(2))
                log.warning(
                    "gc census: %d objects in generation 2: %s",
                    sum(census.values()),
                    ", ".join(f"{k} {v}" for k, v in census.most_common(12)),
                )


_gc_clock: GcClock | None = None
_gc_lock = threading.Lock()


def freeze_heap() -> None:
    """Leave what exists now (modules, classes, configuration: most of a started worker's
    objects) out of every later garbage collection.

    A full (generation 2) collection walks every tracked object of the process while it holds
    the GIL, so every copy loop stops for it. A started worker holds ~65,000 objects; copying
    10,000 records/s, enough of its records lived through younger collections to set off a full
    one every ~5 s, 106-403 ms each on a loaded machine (load ~25), collecting nothing: the
    end-to-end tail of a steady stream. Frozen objects are never collected (the collection run
    here first frees what is garbage already); only objects made later are walked, so a full
    collection costs what the copy loops' own objects cost.
    """
    gc.collect()
    gc.freeze()
    log.log(
        logging.WARNING if _sampling() else logging.DEBUG, "garbage collector: %d objects frozen", gc.get_freeze_count()
    )


def gc_clock() -> GcClock:
    """The process's one :class:`GcClock`, registered in ``gc.callbacks`` on first use."""
    global _gc_clock
    with _gc_lock:
        if _gc_clock is None:
            _gc_clock = GcClock()
            gc.callbacks.append(_gc_clock)
        return _gc_clock


def running_loops() -> list[LoopWatch]:
    """The watches of loops that run in this process (their pipelines not yet collected)."""
    return list(_RUNNING)


class LoopWatch:
    """Times the turns of one copy loop; ``wrap(step)`` gives the step to call instead."""

    def __init__(
        self,
        name: str,
        *,
        stall_s: float = STALL_S,
        clock: Callable[[], float] = time.perf_counter,
        gc: GcClock | None = None,
    ) -> None:
        self.name = name
        self.stall_s = stall_s
        self._clock = clock
        self._gc = gc if gc is not None else gc_clock()
        self.turns = 0
        self.stalls = 0
        self.stalled_s = 0.0
        self.longest_s = 0.0
        # Set by the sampler thread while a turn runs (see Sampler).
        self.thread_id: int | None = None
        self.turn_started: float | None = None
        self.idle_since: float | None = None
        self._idle_s = 0.0  # of the current turn
        self.where: Counter[str] = Counter()
        self.elsewhere: Counter[str] = Counter()  # the process's other threads meanwhile
        self.late_s = 0.0
        self.sampled = False

    def run_here(self) -> None:
        """The loop runs on the calling thread from now on (sampled when asked, see above)."""
        self.thread_id = threading.get_ident()
        _RUNNING.add(self)
        sampler = _shared_sampler()
        if sampler is not None:
            sampler.watch(self)

    def wrap(self, step: Callable[[], None]) -> Callable[[], None]:
        """``step`` timed: turns whose work (all but their idle waits) is slow are counted and logged."""

        def timed() -> None:
            gc_before = self._gc.total_s
            started = self._clock()
            self.turn_started = started
            self._idle_s = 0.0
            try:
                step()
            finally:
                self.turn_started = None
                self.ended(self._clock() - started - self._idle_s, self._gc.total_s - gc_before)

        return timed

    def turn(self) -> tuple[float, float] | None:
        """While a turn runs: when it started and the time now, both on this watch's clock."""
        started = self.turn_started
        return None if started is None else (started, self._clock())

    @contextmanager
    def idle(self) -> Iterator[None]:
        """The loop waits for records or answers inside: not work, not a stall."""
        started = self._clock()
        self.idle_since = started
        try:
            yield
        finally:
            self.idle_since = None
            self._idle_s += self._clock() - started

    def ended(self, took_s: float, gc_s: float) -> None:
        """Count a turn whose work took ``took_s`` (``gc_s`` of it in garbage collections)."""
        if self._gc.long:
            self._gc.report()
        self.turns += 1
        self.longest_s = max(self.longest_s, took_s)
        if took_s < self.stall_s:
            if self.where:
                self.where.clear()
                self.elsewhere.clear()
            self.late_s = 0.0
            return
        self.stalls += 1
        self.stalled_s += took_s
        if self.sampled:
            where = ", ".join(f"{place} x{n}" for place, n in self.where.most_common(4))
            elsewhere = ", ".join(f"{place} x{n}" for place, n in self.elsewhere.most_common(6))
            log.warning(
                "pipeline %s: turn's work took %.1f ms (gc %.1f ms, sampler late up to %.1f ms); at: %s; others: %s",
                self.name,
                took_s * 1000,
                gc_s * 1000,
                self.late_s * 1000,
                where or "-",
                elsewhere or "-",
            )
            self.where.clear()
            self.elsewhere.clear()
            self.late_s = 0.0
        else:
            log.debug("pipeline %s: turn's work took %.1f ms (gc %.1f ms)", self.name, took_s * 1000, gc_s * 1000)

    def summary(self) -> dict[str, float]:
        """Turns, slow turns and their total time, the longest turn."""
        return {
            "turns": self.turns,
            "stalls": self.stalls,
            "stalled_s": round(self.stalled_s, 3),
            "longest_ms": round(self.longest_s * 1000, 1),
        }


def _place(frame: Any) -> str:
    """``file:line function`` of the innermost frame and of the Strait frame that led there."""
    inner = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"
    own = frame
    while own is not None and "strait" not in own.f_code.co_filename:
        own = own.f_back
    if own is None or own is frame:
        return inner
    return f"{inner} < {os.path.basename(own.f_code.co_filename)}:{own.f_lineno}"


# Innermost functions of a thread that only waits (it holds no GIL and takes no CPU there).
_WAITS = frozenset({"wait", "sleep", "select", "poll", "_wait_for_tstate_lock", "get", "consume", "accept", "recv"})


def _waiting(frame: Any) -> bool:
    return bool(frame.f_code.co_name in _WAITS)


class Sampler:
    """One daemon thread noting where the watched loops are during their slow turns."""

    def __init__(self, period_s: float) -> None:
        self._period_s = period_s
        self._watches: list[LoopWatch] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="strait-stall-sampler", daemon=True)
        self._thread.start()

    def watch(self, loop: LoopWatch) -> None:
        loop.sampled = True
        with self._lock:
            self._watches.append(loop)

    def _run(self) -> None:
        clock = time.perf_counter
        while True:
            asked = clock()
            time.sleep(self._period_s)
            now = clock()
            late = now - asked - self._period_s
            with self._lock:
                watches = list(self._watches)
            frames = None
            if late >= STALL_S:
                # The whole process was held back: no CPU for it, or one thread kept the GIL.
                frames = sys._current_frames()
                busy = [_place(f) for i, f in frames.items() if i != self._thread.ident and not _waiting(f)]
                log.warning("stall sampler woke %.1f ms late; threads not waiting: %s", late * 1000, busy)
            for loop in watches:
                started = loop.turn_started
                if (
                    started is None
                    or loop.idle_since is not None
                    or now - started < loop.stall_s / 2
                    or loop.thread_id is None
                ):
                    continue
                if frames is None:
                    frames = sys._current_frames()
                frame = frames.get(loop.thread_id)
                if frame is not None:
                    loop.where[_place(frame)] += 1
                for ident, other in frames.items():
                    if ident not in (loop.thread_id, self._thread.ident) and not _waiting(other):
                        loop.elsewhere[_place(other)] += 1
                loop.late_s = max(loop.late_s, late)


_sampler: Sampler | None = None


def _sampling() -> bool:
    return bool(os.environ.get("STRAIT_STALL_SAMPLE_MS"))


def _shared_sampler() -> Sampler | None:
    global _sampler
    period_ms = os.environ.get("STRAIT_STALL_SAMPLE_MS")
    if not period_ms:
        return None
    with _gc_lock:
        if _sampler is None:
            _sampler = Sampler(float(period_ms) / 1000)
        return _sampler
