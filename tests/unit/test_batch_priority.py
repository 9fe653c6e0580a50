"""The batch loop's thread yields the CPU while it shares the worker (strait.worker.batch.priority)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from strait.config import BatchSharingConfig
from strait.worker.batch.priority import ThreadPriority


class FakeNice:
    """A thread's nice value; raising the priority again can be refused."""

    def __init__(self, base: int = 0, *, may_raise: bool = True) -> None:
        self.value = base
        self.may_raise = may_raise
        self.calls: list[int] = []

    def get(self, _which: int, _who: int) -> int:
        return self.value

    def set(self, _which: int, _who: int, value: int) -> None:
        self.calls.append(value)
        if value < self.value and not self.may_raise:
            raise PermissionError("raising a priority needs CAP_SYS_NICE")
        self.value = value


def bound(nice: int, fake: FakeNice) -> ThreadPriority:
    priority = ThreadPriority(nice, setter=fake.set, getter=fake.get)
    priority.bind()
    return priority


def test_lowered_while_shared_and_restored_after() -> None:
    fake = FakeNice(base=2)
    priority = bound(10, fake)
    priority.follow(False)
    assert fake.calls == []  # not shared yet: nothing to change
    priority.follow(True)
    priority.follow(True)  # once per change, not per loop turn
    assert (fake.value, fake.calls) == (12, [12])
    priority.follow(False)
    assert (fake.value, fake.calls) == (2, [12, 2])
    assert not priority.lowered


def test_never_past_the_lowest_priority() -> None:
    fake = FakeNice(base=15)
    bound(10, fake).follow(True)
    assert fake.value == 19


def test_without_the_privilege_to_go_back_it_stays_lowered_and_stops_asking() -> None:
    fake = FakeNice(base=0, may_raise=False)
    priority = bound(10, fake)
    priority.follow(True)
    priority.follow(False)
    priority.follow(False)
    assert fake.value == 10
    assert fake.calls == [10, 0]  # refused once, never asked again
    priority.follow(True)  # still lowered: nothing to do
    assert fake.calls == [10, 0]


def test_nice_zero_changes_nothing() -> None:
    fake = FakeNice()
    priority = bound(0, fake)
    priority.follow(True)
    assert fake.calls == []


def test_a_system_that_refuses_the_change_leaves_the_thread_alone() -> None:
    def broken(_which: int, _who: int, _value: int) -> None:
        raise OSError(22, "Invalid argument")

    fake = FakeNice()
    priority = ThreadPriority(10, setter=broken, getter=fake.get)
    priority.bind()
    priority.follow(True)
    priority.follow(False)
    priority.follow(True)
    assert not priority.lowered


def test_unbound_it_does_nothing() -> None:
    fake = FakeNice()
    ThreadPriority(10, setter=fake.set, getter=fake.get).follow(True)
    assert fake.calls == []


def test_the_default_is_ten_and_bounded_by_the_kernel_range() -> None:
    assert BatchSharingConfig().nice == 10
    with pytest.raises(ValueError):
        BatchSharingConfig(nice=20)
    with pytest.raises(ValueError):
        BatchSharingConfig(nice=-1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_real_thread_is_lowered_alone() -> None:
    """The kernel's own view: the bound thread's nice value moves, the caller's does not."""
    seen: dict[str, int] = {}

    def loop() -> None:
        me = threading.get_native_id()
        priority = ThreadPriority(5)
        priority.bind()
        base = os.getpriority(os.PRIO_PROCESS, me)
        priority.follow(True)
        seen["lowered"] = os.getpriority(os.PRIO_PROCESS, me) - base
        priority.follow(False)
        seen["after"] = os.getpriority(os.PRIO_PROCESS, me) - base

    caller_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    assert seen["lowered"] == min(5, 19 - (caller_before))
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller_before
    if os.geteuid() == 0:
        assert seen["after"] == 0
    else:
        assert seen["after"] in (0, seen["lowered"])  # going back may be refused


def test_the_batch_loop_follows_its_sharing_each_turn() -> None:
    """The pipeline's loop lowers its thread while the worker's realtime partitions run beside it
    and restores it once they are gone."""
    from tests.unit.test_batch_pipeline import setup, source_log, start

    fake = FakeNice(base=0)
    pipeline, _, _ = setup({("t", 0): source_log(3)})
    pipeline._priority = bound(10, fake)
    try:
        start(pipeline, "t", 0)
        pipeline._step()
        assert fake.value == 0
        pipeline.share(True)
        pipeline._step()
        assert fake.value == 10
        pipeline.share(False)
        pipeline._step()
        assert fake.value == 0
    finally:
        pipeline._sharing.close()
