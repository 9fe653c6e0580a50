"""The watch mode's I/O thread (`strait.balancer.watcher`) with its cluster I/O replaced by fakes:
what it does with the state machine's decisions, leadership, and failures."""

from __future__ import annotations

from typing import Any

import pytest

from strait.balancer import service, watch, watcher
from strait.balancer.errors import ClusterError, ExecutionConflict
from strait.balancer.model import ClusterModel
from strait.balancer.settings import BalanceConfig
from strait.balancer.synthetic import Shape, generate

SKEWED = generate(Shape(brokers=4, dirs_per_broker=2, partitions=120, skew=0.8), 3)


class Cluster:
    """The fake cluster: a model, the latest execution, and what was submitted."""

    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.execution: watch.ExecutionSeen | None = None
        self.submitted: list[Any] = []
        self.refuse: Exception | None = None
        self.unreachable = False

    def load(self, props: Any, capacities: Any) -> ClusterModel:
        if self.unreachable:
            raise ClusterError("cannot reach cluster big")
        return self.model

    def submit(self, props: Any, plan: Any, options: Any, capacities: Any) -> str:
        if self.refuse is not None:
            raise self.refuse
        self.submitted.append((plan, options))
        self.execution = watch.ExecutionSeen(f"e{len(self.submitted)}", finished=False, cancelled=False, by_watch=True)
        return self.execution.id


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    cluster = Cluster(SKEWED)
    monkeypatch.setattr(watcher.BalanceWatcher, "_load", staticmethod(cluster.load))
    monkeypatch.setattr(watcher, "_latest_execution", lambda props: cluster.execution)
    monkeypatch.setattr(service, "submit", cluster.submit)
    return cluster


def make(leading: list[bool], now: list[float], **options: Any) -> watcher.BalanceWatcher:
    settings = BalanceConfig(clusters=["big"], watch=True, **options)
    return watcher.BalanceWatcher(
        {"big": {"bootstrap.servers": "x:1"}}, settings, leading=lambda: leading[0], clock=lambda: now[0]
    )


def test_proposes_after_after_s_and_executes_with_the_throttle(fake: Cluster) -> None:
    now, leading = [100.0], [True]
    w = make(leading, now, after_s=60, execute=True, throttle="5MB")
    w.check("big")
    assert w.view()["big"]["phase"] == watch.OUT_OF_BALANCE and w.proposal("big") is None
    now[0] = 160.0
    w.check("big")
    proposal = w.proposal("big")
    assert proposal is not None and proposal["moves"] > 0 and proposal["executed"]
    ((plan, options),) = fake.submitted
    assert plan.stats["proposed_by"] == "watch" and options.throttle == 5_000_000
    assert w.view()["big"]["execution"] == "e1" and w.view()["big"]["alert"]
    now[0] = 170.0
    w.check("big")  # still running: nothing new
    assert len(fake.submitted) == 1 and w.view()["big"]["phase"] == watch.EXECUTING


def test_watch_only_never_submits(fake: Cluster) -> None:
    now, leading = [0.0], [True]
    w = make(leading, now, after_s=0)
    for t in (0.0, 10.0, 2000.0):
        now[0] = t
        w.check("big")
    assert fake.submitted == [] and w.proposal("big") is not None and not w.proposal("big")["executed"]  # type: ignore[index]


def test_a_standby_does_no_io(fake: Cluster) -> None:
    now, leading = [0.0], [False]
    fake.unreachable = True  # a standby that sampled would record an error
    w = make(leading, now, after_s=0, execute=True)
    w.check("big")
    row = w.view()["big"]
    assert row["phase"] == watch.STANDBY and row["errors"] == 0 and fake.submitted == []


def test_failures_are_counted_and_the_thread_goes_on(fake: Cluster) -> None:
    now, leading = [0.0], [True]
    w = make(leading, now, after_s=0, execute=True)
    fake.unreachable = True
    w.check("big")
    assert w.view()["big"]["errors"] == 1 and "cannot reach" in w.view()["big"]["error"]
    fake.unreachable = False
    fake.refuse = ExecutionConflict("execution h1 is running on this cluster")
    w.check("big")
    assert w.view()["big"]["errors"] == 2 and fake.submitted == []
    fake.refuse = None
    now[0] = 5.0
    w.check("big")  # the conflict is over: the same proposal runs
    assert len(fake.submitted) == 1 and w.view()["big"]["error"] is None


def test_a_cancelled_watch_execution_holds_the_next_one(fake: Cluster) -> None:
    now, leading = [0.0], [True]
    w = make(leading, now, after_s=0, execute=True, interval_s=1)
    w.check("big")
    assert len(fake.submitted) == 1
    fake.execution = watch.ExecutionSeen("e1", finished=True, cancelled=True, by_watch=True)
    for t in (10.0, 700.0, 1400.0):  # replans, never re-executes
        now[0] = t
        w.check("big")
        assert w.view()["big"]["held"] and len(fake.submitted) == 1
