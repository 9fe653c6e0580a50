"""The copy loops' stall watch: slow turns counted, garbage-collection time attributed."""

from __future__ import annotations

import logging

import pytest

from strait.worker.stalls import GcClock, LoopWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_gc_clock_times_each_collection_by_generation() -> None:
    clock = Clock()
    gc = GcClock(clock)
    gc("start", {"generation": 0})
    clock.now += 0.001
    gc("stop", {"generation": 0, "collected": 3})
    gc("start", {"generation": 2})
    clock.now += 0.120
    gc("stop", {"generation": 2, "collected": 0})
    assert gc.count == [1, 0, 1]
    assert gc.total_s == pytest.approx(0.121)
    assert gc.longest_s[2] == pytest.approx(0.120)
    assert [(g, round(s, 3)) for g, s, _, _ in gc.long] == [(2, 0.12)]  # logged later, outside the collection
    # A stop without its start (the clock registered mid-collection) is not counted.
    gc("stop", {"generation": 1})
    assert gc.count == [1, 0, 1]


def test_slow_turns_are_counted_with_the_collections_inside_them(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    gc = GcClock(clock)
    watch = LoopWatch("realtime", clock=clock, gc=gc)

    def quick() -> None:
        clock.now += 0.001

    def collected() -> None:
        gc("start", {"generation": 2})
        clock.now += 0.150
        gc("stop", {"generation": 2})

    with caplog.at_level(logging.DEBUG, logger="strait.worker.stalls"):
        watch.wrap(quick)()
        watch.wrap(collected)()
    assert watch.summary() == {"turns": 2, "stalls": 1, "stalled_s": 0.15, "longest_ms": 150.0}
    assert "turn's work took 150.0 ms (gc 150.0 ms)" in caplog.text
    assert "gc generation 2 took 150.0 ms" in caplog.text


def test_a_turn_that_raises_is_still_timed() -> None:
    clock = Clock()
    watch = LoopWatch("catchup", clock=clock, gc=GcClock(clock))

    def crash() -> None:
        clock.now += 0.5
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        watch.wrap(crash)()
    assert watch.stalls == 1 and watch.turn_started is None


def test_idle_waits_are_not_stalls() -> None:
    clock = Clock()
    watch = LoopWatch("realtime", clock=clock, gc=GcClock(clock))

    def waits_then_works() -> None:
        with watch.idle():
            clock.now += 0.1  # no records for 100 ms
        clock.now += 0.002

    watch.wrap(waits_then_works)()
    assert watch.stalls == 0 and watch.longest_s == pytest.approx(0.002)


def test_a_collection_s_cpu_time_is_told_apart_from_its_wall_time(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a busy machine a collection waits for a core while it holds the GIL: its wall time then
    # says little about the work, its CPU time does. The census says what it walked.
    clock, cpu = Clock(), Clock()
    gc = GcClock(clock, cpu)
    gc("start", {"generation": 2})
    clock.now += 0.100
    cpu.now += 0.004
    gc("stop", {"generation": 2, "collected": 0})
    assert gc.cpu_s == [0.0, 0.0, pytest.approx(0.004)]
    monkeypatch.setenv("STRAIT_GC_CENSUS", "1")
    with caplog.at_level(logging.DEBUG, logger="strait.worker.stalls"):
        gc.report()
    assert "gc generation 2 took 100.0 ms (4.0 ms CPU, 0 collected)" in caplog.text
    assert "objects in generation 2: " in caplog.text
