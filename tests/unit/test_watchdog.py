"""The watchdog's judge over generated histories, and one round of the watchdog over a loop
frozen in the middle of a turn."""

from __future__ import annotations

import random
import threading

import pytest

from strait.worker.stalls import LoopWatch
from strait.worker.task import PartitionTask
from strait.worker.watchdog import Bounds, Judge, PartitionSample, Watchdog

TASK = PartitionTask("main", "t", 0, "t")


def test_a_turn_is_dumped_once_at_its_bound_and_the_worker_exits_at_twice_it() -> None:
    judge = Judge(Bounds(turn_s=10, progress_s=100))
    assert judge.loops({"realtime": (0.0, 9.9)}, 0) == []
    assert [f.action for f in judge.loops({"realtime": (0.0, 10.0)}, 0)] == ["stack_dump"]
    assert judge.loops({"realtime": (0.0, 15.0)}, 0) == []  # dumped once per turn
    assert [f.action for f in judge.loops({"realtime": (50.0, 61.0)}, 0)] == ["stack_dump"]  # a new turn
    assert [f.action for f in judge.loops({"realtime": (50.0, 70.0)}, 0)] == ["exit"]


@pytest.mark.parametrize("seed", range(100))
def test_generated_histories_act_only_on_a_lagging_partition_unmoved_past_its_bound(seed: int) -> None:
    """Invariants over random histories of checkpoints, end offsets and states: no action
    before the bound, none for a partition caught up or not copying; a restart at most once per
    unmoved stretch, before any exit; an exit only at twice the bound."""
    rng = random.Random(seed)
    bounds = Bounds(turn_s=1000, progress_s=rng.choice((5, 20)))
    judge = Judge(bounds)
    checkpoint, end, now = 0, 0, 0.0
    moved_at = 0.0
    copying_since = 0.0
    restarted_in_stretch = False
    for _ in range(300):
        now += rng.choice((0.5, 1, 3))
        if rng.random() < 0.2:
            end += rng.randrange(1, 50)
        if rng.random() < 0.1 and checkpoint < end:
            checkpoint = rng.randrange(checkpoint + 1, end + 1)
            moved_at, restarted_in_stretch = now, False
        copying = rng.random() > 0.05
        if not copying:
            copying_since, restarted_in_stretch = now, False
        sample = PartitionSample(checkpoint, copying)
        candidates = judge.still({TASK: sample}, now)
        since = max(moved_at, copying_since)
        if candidates:
            assert copying and now - since >= bounds.progress_s
        findings = judge.stalled({t: end for t in candidates}, now)
        for finding in findings:
            assert end > checkpoint, "acted on a partition with nothing to copy"
            assert now - since >= bounds.progress_s
            if finding.action == "restart_partition":
                assert not restarted_in_stretch, "restarted twice in one unmoved stretch"
                restarted_in_stretch = True
            if finding.action == "exit":
                assert restarted_in_stretch and now - since >= 2 * bounds.progress_s


def test_a_partition_that_moves_again_after_a_restart_is_left_alone() -> None:
    judge = Judge(Bounds(turn_s=1000, progress_s=10))
    judge.still({TASK: PartitionSample(5, True)}, 0)
    assert judge.still({TASK: PartitionSample(5, True)}, 10) == [TASK]
    assert [f.action for f in judge.stalled({TASK: 9}, 10)] == ["stack_dump", "restart_partition"]
    assert judge.still({TASK: PartitionSample(7, True)}, 12) == []  # moved: a new stretch
    assert judge.still({TASK: PartitionSample(7, True)}, 25) == [TASK]
    assert [f.action for f in judge.stalled({TASK: 9}, 25)] == ["stack_dump", "restart_partition"]


def test_one_round_over_a_loop_frozen_in_its_turn_dumps_the_stacks_then_exits() -> None:
    now = [100.0]
    watch = LoopWatch("realtime", clock=lambda: now[0])
    frozen, inside = threading.Event(), threading.Event()

    def turn() -> None:
        inside.set()
        frozen.wait(30)

    thread = threading.Thread(target=lambda: (watch.run_here(), watch.wrap(turn)()))
    thread.start()
    exits: list[str] = []
    restarts: list[set[PartitionTask]] = []
    dog = Watchdog(
        Bounds(turn_s=10, progress_s=100),
        partitions=dict,
        fresh_ends=lambda tasks: {},
        restart=restarts.append,
        exit=exits.append,
        clock=lambda: now[0],
    )
    try:
        assert inside.wait(10)
        assert dog.check() == []
        now[0] += 10
        assert [(f.cause, f.action) for f in dog.check()] == [("loop_overdue", "stack_dump")]
        now[0] += 10
        assert [(f.cause, f.action) for f in dog.check()] == [("loop_overdue", "exit")]
        assert exits and "realtime" in exits[0] and not restarts
        assert dog.actions[("loop_overdue", "stack_dump")] == 1
    finally:
        frozen.set()
        thread.join()
