"""The batch pipeline's fetch pace: a token bucket at the rate the worker sets (unpaced until
set), and the worker-side decision of when the backlog is paced, over simulated time."""

from __future__ import annotations

import pytest

from strait.config import BatchSharingConfig
from strait.worker.batch.budget import FetchBudget, PacedFetches, Sharing
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


def test_paced_fetches_count_every_byte_and_cap_only_while_a_rate_is_set() -> None:
    clock = Clock()
    paced = PacedFetches(clock=clock)
    assert paced.max_bytes(8_000_000) == 8_000_000 and paced.rate is None
    paced.spend(10**9)  # no bucket to take it from
    paced.set_rate(1_000_000)
    assert paced.max_bytes(8_000_000) == 100_000
    paced.spend(100_000)
    assert paced.max_bytes(8_000_000) == 0
    clock.now += 0.05
    assert paced.max_bytes(8_000_000) == pytest.approx(50_000, abs=1)
    paced.set_rate(2_000_000)  # the same bucket, refilled faster
    clock.now += 0.05
    assert paced.max_bytes(8_000_000) == pytest.approx(150_000, abs=1)
    paced.set_rate(None)
    assert paced.max_bytes(8_000_000) == 8_000_000
    assert paced.fetched == 10**9 + 100_000


@pytest.mark.parametrize("limited", [False, True])
def test_a_paced_pipeline_fetches_no_faster_than_its_rate(limited: bool) -> None:
    logs = {("t", 0): source_log(400)}
    size = sum(len(raw) for raw in logs[("t", 0)])
    rate = size / 2  # the whole log in about two seconds when paced
    pipeline, src, _ = setup(logs)
    if limited:
        pipeline.set_pace(rate)
    clock = pipeline._links.clock  # type: ignore[union-attr]
    state = start(pipeline, "t", 0)
    began = clock.now
    for _ in range(2000):
        pipeline._step()
        if state.checkpoint == src.end(("t", 0)):
            break
    assert state.checkpoint == src.end(("t", 0))
    assert pipeline.fetched_bytes >= size
    elapsed = clock.now - began
    # The fake source answers each fetch with the whole rest of the log: a paced pipeline takes
    # at least as long as the rate allows for what it fetched beyond the first burst.
    if limited:
        assert src.fetched_bytes - rate * 0.1 <= rate * elapsed + 1
        assert elapsed >= 1.0
    else:
        assert elapsed < 1.0


def test_the_backlog_is_paced_only_while_realtime_partitions_share_the_worker() -> None:
    sharing = Sharing(BatchSharingConfig(pace="fixed", fixed_mb_s=4), clock=Clock())
    assert sharing.rate is None  # alone: unpaced
    sharing.share(True)
    assert sharing.rate == 4_000_000
    sharing.share(False)
    assert sharing.rate is None
    off = Sharing(BatchSharingConfig(enabled=False, pace="fixed"), clock=Clock())
    off.share(True)
    assert off.rate is None
