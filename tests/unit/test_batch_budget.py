"""The batch pipeline's optional fetch budget (``STRAIT_BATCH_MAX_MB_S``): off by default, and
when set the pipeline fetches no faster than asked, over simulated time."""

from __future__ import annotations

import sys
import threading

import pytest

from strait.worker.batch import budget
from strait.worker.batch.budget import (
    ENV,
    SHARED_ENV,
    SHARED_FETCH_BYTES,
    SHARED_SWITCH_INTERVAL_S,
    SHARING_ENV,
    FetchBudget,
    Sharing,
)
from tests.unit.test_batch_pipeline import setup, source_log, start


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_refills_at_its_rate_and_holds_a_tenth_of_a_second_at_most() -> None:
    clock = Clock()
    budget = FetchBudget(1_000_000, clock=clock)
    assert budget.available() == 100_000
    budget.spend(250_000)  # an answer larger than what was left: the next fetch waits longer
    assert budget.available() == 0
    clock.now += 0.1
    assert budget.available() == 0  # -150,000 + 100,000
    clock.now += 0.1
    assert budget.available() == 50_000
    clock.now += 10
    assert budget.available() == 100_000


def test_off_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert FetchBudget.from_env() is None
    monkeypatch.setenv(ENV, "0")
    assert FetchBudget.from_env() is None
    monkeypatch.setenv(ENV, "2.5")
    budget = FetchBudget.from_env()
    assert budget is not None and budget.rate == 2_500_000
    monkeypatch.setenv(ENV, "fast")
    with pytest.raises(ValueError, match=ENV):
        FetchBudget.from_env()


@pytest.mark.parametrize("limited", [False, True])
def test_a_capped_pipeline_fetches_no_faster_than_its_budget(limited: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = {("t", 0): source_log(400)}
    size = sum(len(raw) for raw in logs[("t", 0)])
    rate = size / 2  # the whole log in about two seconds when capped
    if limited:
        monkeypatch.setenv(ENV, str(rate / 1_000_000))
    else:
        monkeypatch.delenv(ENV, raising=False)
    pipeline, src, _ = setup(logs)
    clock = pipeline._links.clock  # type: ignore[union-attr]
    fixed = pipeline._sharing.fixed
    if fixed is not None:
        pipeline._sharing.fixed = FetchBudget(fixed.rate, clock=clock.monotonic)  # the simulated clock
    state = start(pipeline, "t", 0)
    began = clock.now
    for _ in range(2000):
        pipeline._step()
        if state.checkpoint == src.end(("t", 0)):
            break
    assert state.checkpoint == src.end(("t", 0))
    elapsed = clock.now - began
    # The fake source answers each fetch with the whole rest of the log: a capped pipeline takes
    # at least as long as the rate allows for what it fetched beyond the first burst.
    if limited:
        assert src.fetched_bytes - rate * 0.1 <= rate * elapsed + 1
        assert elapsed >= 1.0
    else:
        assert elapsed < 1.0


def test_sharing_paces_and_shortens_gil_switches_only_while_realtime_partitions_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(SHARED_ENV, "1")  # 1 MB/s: 100,000 bytes per burst
    clock = Clock()
    before = sys.getswitchinterval()
    sharing = Sharing(clock=clock)
    assert sharing.max_bytes(8_000_000) == 8_000_000  # alone: unpaced
    sharing.share(True)
    try:
        assert sys.getswitchinterval() == SHARED_SWITCH_INTERVAL_S
        assert sharing.max_bytes(8_000_000) == 100_000
        sharing.spend(100_000)
        assert sharing.max_bytes(8_000_000) == 0
        clock.now += 0.05
        assert sharing.max_bytes(8_000_000) == pytest.approx(50_000, abs=1)
        other = Sharing(clock=clock)  # a second batch pipeline in the worker
        other.share(True)
        sharing.share(False)
        assert sys.getswitchinterval() == SHARED_SWITCH_INTERVAL_S  # the other still shares
        other.close()
        assert sys.getswitchinterval() == before
        other.share(True)  # told after its pipeline stopped: nothing changes
        assert sys.getswitchinterval() == before
        assert sharing.max_bytes(8_000_000) == 8_000_000
    finally:
        sharing.close()
        sys.setswitchinterval(before)


def test_shared_answers_are_capped_even_when_pacing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(SHARED_ENV, "0")
    sharing = Sharing(clock=Clock())
    sharing.share(True)
    try:
        assert sharing.max_bytes(8_000_000) == SHARED_FETCH_BYTES
        sharing.spend(10**9)  # no bucket to take it from
        assert sharing.max_bytes(8_000_000) == SHARED_FETCH_BYTES
    finally:
        sharing.close()


def test_a_pipeline_told_to_share_fetches_no_more_than_the_shared_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    logs = {("t", 0): source_log(400)}
    size = sum(len(raw) for raw in logs[("t", 0)])
    rate = size / 2
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(SHARED_ENV, str(rate / 1_000_000))
    pipeline, src, _ = setup(logs)
    pipeline.share(True)
    try:
        state = start(pipeline, "t", 0)
        clock = pipeline._links.clock  # type: ignore[union-attr]
        began = clock.now
        for _ in range(2000):
            pipeline._step()
            if state.checkpoint == src.end(("t", 0)):
                break
        assert state.checkpoint == src.end(("t", 0))
        assert src.fetched_bytes - rate * 0.1 <= rate * (clock.now - began) + 1
        assert clock.now - began >= 1.0
    finally:
        pipeline._sharing.close()


def test_a_close_racing_a_share_leaves_the_switch_interval_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copier's share(True) reads the realtime latency while the pipeline stops: the close
    must not find nothing to undo and let that share turn the short switches on for good."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(SHARING_ENV, raising=False)
    before = sys.getswitchinterval()
    assert before != SHARED_SWITCH_INTERVAL_S  # else the test could not see the short switches stay
    users = budget._switch_users
    inside, go = threading.Event(), threading.Event()
    blocking = []  # the next probe call blocks once (not the constructor's)

    def probe() -> None:
        if blocking:
            blocking.clear()
            inside.set()
            go.wait(10)

    sharing = Sharing(latency=probe, environ={})  # the latency pace: share() reads the probe
    blocking.append(True)
    sharer = threading.Thread(target=sharing.share, args=(True,))
    sharer.start()
    try:
        assert inside.wait(10)  # share(True) is past its check of a close
        closer = threading.Thread(target=sharing.close)
        closer.start()
        closer.join(0.2)  # (unlocked, the close ran to its end here, before the share did)
        go.set()
        sharer.join(10)
        closer.join(10)
        assert sys.getswitchinterval() == before
        assert not sharing.shared
        sharing.share(True)  # told after its pipeline stopped: nothing changes
        assert sys.getswitchinterval() == before
    finally:
        go.set()
        sys.setswitchinterval(before)
        budget._switch_users = users


def test_a_pipeline_stopped_before_it_ran_leaves_the_switch_interval_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SHARING_ENV, raising=False)
    before = sys.getswitchinterval()
    assert before != SHARED_SWITCH_INTERVAL_S
    users = budget._switch_users
    pipeline, _, _ = setup({("t", 0): source_log(3)})
    try:
        pipeline.share(True)
        assert sys.getswitchinterval() == SHARED_SWITCH_INTERVAL_S
        pipeline.stop(1.0)
        assert sys.getswitchinterval() == before
    finally:
        sys.setswitchinterval(before)
        budget._switch_users = users
