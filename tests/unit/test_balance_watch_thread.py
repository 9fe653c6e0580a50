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
from strait.balancer.traffic import Rate, Traffic

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


def test_with_traffic_sampled_a_traffic_skew_alone_alerts_and_is_proposed(
    fake: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Disks within a loose threshold; written partitions led by broker 1 only.
    model = generate(Shape(brokers=4, dirs_per_broker=2, partitions=120, skew=0.0), 5)
    led = {k: Rate(2_000_000.0, 2_000.0) for k, p in model.partitions.items() if p.replicas[0] == 1}
    measured: list[Traffic | None] = [None, Traffic(led, 30.0)]  # no rates from the first sample
    monkeypatch.setattr(watcher.BalanceWatcher, "_sample", lambda self, name, props, capacities: (model, measured[0]))
    now, leading = [0.0], [True]
    w = make(leading, now, after_s=60, threshold=0.9, traffic=True, traffic_spread=0.2, traffic_floor="1MB")
    w.check("big")
    row = w.view()["big"]
    assert row["phase"] == watch.BALANCED and row["assessment"]["traffic_spread"] is None
    measured.pop(0)
    for t in (30.0, 90.0):
        now[0] = t
        w.check("big")
    row = w.view()["big"]
    assert row["reasons"] == ["traffic_spread"] and row["alert"], row
    assert row["assessment"]["traffic_spread"] > 0.2 and row["assessment"]["net_in_spread"] > 1_000_000
    proposal = w.proposal("big")
    assert proposal is not None and proposal["moves"] > 0
    before, after = proposal["traffic_spread_before"], proposal["traffic_spread_after"]
    assert after["leader_in"] < before["leader_in"]


def test_a_traffic_skew_below_the_floor_is_no_reason(fake: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    model = generate(Shape(brokers=4, dirs_per_broker=2, partitions=120, skew=0.0), 5)
    # An idle cluster's trickle, all led by broker 1: skewed, but by a few KB/s.
    led = {k: Rate(1_000.0, 10.0) for k, p in model.partitions.items() if p.replicas[0] == 1}
    monkeypatch.setattr(
        watcher.BalanceWatcher, "_sample", lambda self, name, props, capacities: (model, Traffic(led, 30.0))
    )
    w = make([True], [0.0], after_s=0, threshold=0.9, traffic=True)
    w.check("big")
    row = w.view()["big"]
    assert row["phase"] == watch.BALANCED and row["assessment"]["traffic_spread"] > 0.25, row


def test_a_plan_that_did_not_narrow_the_traffic_skew_is_not_rerun_every_after_s(
    fake: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Executions "run" but the cluster stays as it was: every plan promises a gain it never shows.
    model = generate(Shape(brokers=4, dirs_per_broker=2, partitions=120, skew=0.0), 5)
    led = {k: Rate(2_000_000.0, 2_000.0) for k, p in model.partitions.items() if p.replicas[0] == 1}
    rates = Traffic(led, 30.0)
    monkeypatch.setattr(watcher.BalanceWatcher, "_sample", lambda self, name, props, capacities: (model, rates))
    now, leading = [0.0], [True]
    w = make(leading, now, after_s=60, interval_s=30, execute=True, threshold=0.9, traffic=True, traffic_spread=0.2)
    submitted_at = []
    for t in range(0, 1200, 10):
        now[0] = float(t)
        if fake.execution is not None and not fake.execution.finished:
            fake.execution = watch.ExecutionSeen(fake.execution.id, finished=True, cancelled=False, by_watch=True)
        count = len(fake.submitted)
        w.check("big")
        if len(fake.submitted) > count:
            submitted_at.append(t)
        if t == 180:
            row = w.view()["big"]
            assert row["phase"] == watch.BACKING_OFF and row["ineffective_plans"] == 1, row
            assert "ineffective plan #1" in row["backoff"] and row["backoff_until"] == 130 + 120
            assert row["promise"] and row["promise"][0]["reason"] == "traffic_spread"
    # Without the rule: a run every after_s (60 s) plus a round, 17 in 1,200 s. With it each run
    # ends (seen 10 s later), outlives after_s, is found ineffective and holds the watch off
    # 120, 240, 480 s from there.
    assert submitted_at == [60, 250, 560, 1110]
    assert "not executing proposal" in caplog.text and "ineffective plan #1" in caplog.text
