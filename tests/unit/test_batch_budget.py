"""The batch pipeline's optional fetch budget (``STRAIT_BATCH_MAX_MB_S``): off by default, and
when set the pipeline fetches no faster than asked, over simulated time."""

from __future__ import annotations

import pytest

from strait.worker.batch.budget import ENV, FetchBudget
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
    if pipeline._budget is not None:
        pipeline._budget = FetchBudget(pipeline._budget.rate, clock=clock.monotonic)  # the simulated clock
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
