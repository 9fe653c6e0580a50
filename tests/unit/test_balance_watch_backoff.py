"""The watch does not re-execute plans that cannot fix a spread (`strait.balancer.watch`, rules 6-7).

Generated worlds: a cluster whose measured spread (disk or traffic) stays out of balance, plans
that promise some gain, and a world that delivers a share of it (none, some, all) plus noise.
A checker replays the rules from the samples alone; companion tests run the machine without the
rules and require the checker to notice. Then `imbalance.promises` on generated clusters: what a
proposal promises is what its plan, applied, measures.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from strait.balancer import imbalance, watch
from strait.balancer.goals import Goals
from strait.balancer.plan import apply
from strait.balancer.synthetic import Shape, generate
from strait.balancer.synthetic import traffic as synthetic_traffic
from strait.balancer.watch import EXECUTE, PROPOSE, ExecutionSeen, Observation, Policy, Promise, State

Observe = Callable[[State, Observation, Policy], watch.Decision]
THRESHOLD = 0.10


@dataclass
class World:
    """One measured reason that stays out of balance; plans deliver `efficacy` of what they promise."""

    rng: random.Random
    policy: Policy
    reason: str
    efficacy: float  # share of the promised gain an executed plan really brings
    promised_share: float  # share of the excess over the threshold a proposal promises to remove
    drift: float  # how fast the spread grows back between executions, per second
    jump: float = 0.05  # chance per sample, while in balance, that a new skew appears
    noise: float = 0.002  # the spread wanders by up to this much per sample
    at: float = 0.0
    value: float = 0.5
    hard: bool = False  # a hard reason (rack) beside the measured one
    execution: ExecutionSeen | None = None
    remaining: int = 0
    proposals: int = 0
    executions: list[float] = field(default_factory=list)
    promises: dict[str, Promise] = field(default_factory=dict)
    phases: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    # The checker's own view: executions that did not keep their promise, in a row, and the time
    # the last one was found out.
    pending: Promise | None = None
    ended_at: float | None = None
    strikes: int = 0
    judged_at: float | None = None

    def tick(self) -> Observation:
        step = self.rng.choice((5.0, 10.0, 30.0))
        self.at += step
        self.value = min(1.0, self.value + self.drift * step + self.rng.uniform(-self.noise, self.noise))
        if self.value <= THRESHOLD and self.rng.random() < self.jump:
            self.value += self.rng.uniform(0.2, 0.4)
        if self.execution is not None and not self.execution.finished:
            self.remaining -= 1
            if self.remaining <= 0:
                self.execution = replace(self.execution, finished=True)
                promise = self.promises[self.execution.id]
                self.value = max(0.0, self.value - self.efficacy * promise.gain)
                self.pending, self.ended_at = promise, self.at
        reasons = {self.reason} if self.value > THRESHOLD else set()
        if self.hard:
            reasons.add("rack")
        return Observation(
            at=self.at,
            leading=True,
            reasons=frozenset(reasons),
            signature=tuple(sorted(reasons)),
            execution=self.execution,
            measures={self.reason: self.value},
        )

    def promise(self) -> Promise:
        gain = self.promised_share * max(self.value - THRESHOLD, 0.0)
        return Promise(self.reason, self.value, self.value - gain, THRESHOLD)

    def check(self, seen: Observation, decision: watch.Decision) -> None:
        state = decision.state
        self.phases.add(state.phase)
        where = f"at {seen.at}"
        if not seen.reasons:
            self.pending, self.strikes, self.judged_at = None, 0, None
        elif (
            self.pending is not None
            and self.ended_at is not None
            and seen.at - self.ended_at >= self.policy.after_s
            and self.execution is not None
            and self.execution.finished
        ):
            # The imbalance outlived after_s after the execution: judge it as the rules say.
            kept = self.pending.before - self.value >= self.policy.kept * self.pending.gain
            if self.reason not in seen.reasons:
                kept = True
            self.strikes = 0 if kept else self.strikes + 1
            self.judged_at = seen.at
            self.pending = None
        if decision.action != EXECUTE or seen.reasons - watch.MEASURED:
            return
        promise = self.promises.get(state.proposal or "")
        if promise is not None and not promise.meaningful(self.policy.min_gain):
            self.violations.append(f"{where}: executed a plan promising too little ({promise.text()})")
        if self.strikes and self.judged_at is not None:
            hold = self.policy.hold_s(self.strikes)
            if seen.at < self.judged_at + hold:
                self.violations.append(
                    f"{where}: executed {seen.at - self.judged_at:.0f} s after ineffective plan "
                    f"#{self.strikes} was found out (hold {hold:.0f} s)"
                )

    def act(self, state: State, action: str | None, seen: Observation) -> State:
        if action == PROPOSE:
            self.proposals += 1
            name = f"p{self.proposals}"
            self.promises[name] = promise = self.promise()
            return watch.proposed(state, name, 5, seen.at, (promise,))
        if action == EXECUTE:
            assert state.proposal is not None
            execution = f"e-{state.proposal}"
            self.promises[execution] = self.promises[state.proposal]
            self.execution = ExecutionSeen(execution, finished=False, cancelled=False, by_watch=True)
            self.remaining = self.rng.randint(1, 4)
            self.executions.append(seen.at)
            return watch.submitted(state, state.proposal, execution)
        return state


def run(world: World, observe: Observe = watch.observe, steps: int = 600) -> World:
    state = State()
    for _ in range(steps):
        seen = world.tick()
        decision = observe(state, seen, world.policy)
        world.check(seen, decision)
        state = world.act(decision.state, decision.action, seen)
        if decision.action == PROPOSE:
            again = observe(state, seen, world.policy)
            world.check(seen, again)
            state = world.act(again.state, again.action, seen)
    return world


POLICY = Policy(after_s=60, execute=True, replan_s=60, max_hold_s=3600)


def world(
    seed: int,
    efficacy: float,
    *,
    reason: str = "traffic_spread",
    share: float = 0.8,
    drift: float | None = None,
    noise: float = 0.002,
) -> World:
    rng = random.Random(seed)
    growth = rng.uniform(0.0, 0.0005) if drift is None else drift
    return World(rng, POLICY, reason, efficacy, share, growth, noise=noise)


@pytest.mark.parametrize("efficacy", [0.0, 0.2, 0.45, 0.7, 1.0])
@pytest.mark.parametrize("reason", sorted(watch.MEASURED))
@pytest.mark.parametrize("seed", range(8))
def test_generated_worlds_keep_the_promise_rules(seed: int, reason: str, efficacy: float) -> None:
    w = run(world(seed, efficacy, reason=reason))
    assert w.violations == []


@pytest.mark.parametrize("seed", range(8))
def test_plans_that_never_work_are_executed_ever_more_rarely(seed: int) -> None:
    w = run(world(seed, 0.0))
    span = w.at
    # Without the rules: one execution per after_s plus the execution's own time, about
    # span / 100 here. With them the holds double: about log2(span / after_s) + a few.
    assert len(w.executions) <= math.log2(span / POLICY.after_s) + 3, w.executions
    assert watch.BACKING_OFF in w.phases
    gaps = [b - a for a, b in zip(w.executions, w.executions[1:], strict=False)]
    assert gaps == sorted(gaps) or max(gaps) >= POLICY.max_hold_s


@pytest.mark.parametrize("seed", range(8))
def test_plans_that_work_are_executed_without_backing_off(seed: int) -> None:
    # Each plan removes the whole excess, as promised; new skews keep appearing once it is gone.
    w = run(world(seed, 1.0, share=1.0, drift=0.0, noise=0.0))
    assert len(w.executions) > 20
    assert watch.BACKING_OFF not in w.phases


def forgetful(state: State, seen: Observation, policy: Policy) -> watch.Decision:
    """The machine before rules 6-7: promises neither checked nor judged."""
    return watch.observe(replace(state, proposal_promise=(), promised=(), hold_until=None), seen, policy)


def test_the_checker_catches_a_machine_that_re_executes_ineffective_plans() -> None:
    found = [v for seed in range(8) for v in run(world(seed, 0.0), forgetful).violations]
    assert any("after ineffective plan" in v for v in found)
    counts = [len(run(world(seed, 0.0), forgetful).executions) for seed in range(4)]
    assert min(counts) > 3 * (math.log2(600 * 30 / POLICY.after_s) + 3) / 2


def test_the_checker_catches_a_machine_that_executes_a_plan_promising_too_little() -> None:
    found = [v for seed in range(4) for v in run(world(seed, 1.0, share=0.1), forgetful).violations]
    assert any("promising too little" in v for v in found)


# ---- scenarios, step by step -----------------------------------------------------------------


def seen(at: float, value: float, *hard: str, execution: ExecutionSeen | None = None) -> Observation:
    reasons = frozenset({"traffic_spread", *hard}) if value > THRESHOLD else frozenset(hard)
    return Observation(
        at=at,
        leading=True,
        reasons=reasons,
        signature=tuple(sorted(reasons)),
        execution=execution,
        measures={"traffic_spread": value},
    )


def execute_once(policy: Policy, value: float, promise: Promise, at: float = 0.0) -> State:
    d = watch.observe(State(since=at - policy.after_s), seen(at, value), policy)
    assert d.action == PROPOSE
    d = watch.observe(watch.proposed(d.state, "p1", 4, at, (promise,)), seen(at, value), policy)
    assert d.action == EXECUTE
    return watch.submitted(d.state, "p1", "e1")


def test_a_plan_promising_too_little_is_proposed_but_not_executed() -> None:
    policy = Policy(after_s=0, execute=True, replan_s=60, min_gain=0.25)
    d = watch.observe(State(), seen(0, 0.5), policy)
    small = Promise("traffic_spread", 0.5, 0.45, THRESHOLD)  # 0.05 of an excess of 0.4
    d = watch.observe(watch.proposed(d.state, "p1", 4, 0, (small,)), seen(0, 0.5), policy)
    assert d.action is None and d.state.phase == watch.BACKING_OFF
    assert d.state.backoff is not None and "predicted gain below 25%" in d.state.backoff
    enough = Promise("traffic_spread", 0.5, 0.35, THRESHOLD)
    d = watch.observe(watch.proposed(d.state, "p2", 4, 60, (enough,)), seen(60, 0.5), policy)
    assert d.action == EXECUTE and d.state.backoff is None


def step(state: State, policy: Policy, now: Observation, promise: Promise) -> watch.Decision:
    """One round as the I/O thread plays it: a PROPOSE is answered with a plan promising `promise`."""
    d = watch.observe(state, now, policy)
    if d.action == PROPOSE:
        made = watch.proposed(d.state, f"p{now.at:g}", 4, now.at, (promise,))
        d = watch.observe(made, now, policy)
    return d


def test_an_ineffective_plan_holds_the_watch_off_twice_as_long_each_time() -> None:
    policy = Policy(after_s=60, execute=True, replan_s=60, max_hold_s=1000)
    promise = Promise("traffic_spread", 0.5, 0.1, THRESHOLD)
    state = execute_once(policy, 0.5, promise)
    done = ExecutionSeen("e1", finished=True, cancelled=False, by_watch=True)
    d = step(state, policy, seen(100, 0.48, execution=done), promise)  # ended; the clock restarts
    assert d.action is None and d.state.phase == watch.OUT_OF_BALANCE
    d = step(d.state, policy, seen(160, 0.47, execution=done), promise)  # out of balance for after_s again
    assert d.action is None and d.state.phase == watch.BACKING_OFF
    assert d.state.strikes == 1 and d.state.hold_until == 160 + 120
    why = d.state.backoff or ""
    assert "ineffective plan #1" in why and "measured 0.470" in why
    for at in (200, 250, 279):  # replanned every 60 s, never executed
        d = step(d.state, policy, seen(at, 0.47, execution=done), promise)
        assert d.action is None and d.state.phase == watch.BACKING_OFF
    d = step(d.state, policy, seen(280, 0.47, execution=done), promise)
    assert d.action == EXECUTE
    state = watch.submitted(d.state, d.state.proposal or "", "e3")
    done3 = ExecutionSeen("e3", finished=True, cancelled=False, by_watch=True)
    d = step(state, policy, seen(300, 0.47, execution=done3), promise)
    d = step(d.state, policy, seen(360, 0.46, execution=done3), promise)
    assert d.state.strikes == 2 and d.state.hold_until == 360 + 240 and d.action is None
    assert policy.hold_s(10) == 1000  # capped


def test_a_plan_that_kept_its_promise_ends_the_series() -> None:
    policy = Policy(after_s=60, execute=True, replan_s=60)
    promise = Promise("traffic_spread", 0.5, 0.1, THRESHOLD)
    state = replace(execute_once(policy, 0.5, promise), strikes=3)
    done = ExecutionSeen("e1", finished=True, cancelled=False, by_watch=True)
    d = watch.observe(state, seen(100, 0.2, execution=done), policy)  # 0.3 of 0.4 promised: kept
    d = watch.observe(d.state, seen(160, 0.25, execution=done), policy)
    assert d.state.strikes == 0 and d.state.hold_until is None and d.action == PROPOSE


def test_balance_regained_ends_the_series_and_a_hard_reason_is_not_held() -> None:
    policy = Policy(after_s=0, execute=True, replan_s=60)
    held = State(strikes=2, hold_until=10_000.0, backoff="ineffective plan #2")
    d = watch.observe(held, seen(0, 0.05), policy)
    assert (d.state.strikes, d.state.hold_until, d.state.phase) == (0, None, watch.BALANCED)
    # Held off for the spread, but a partition breaks the rack rule: that fix runs.
    d = watch.observe(held, seen(0, 0.5, "rack"), policy)
    small = Promise("traffic_spread", 0.5, 0.49, THRESHOLD)
    d = watch.observe(watch.proposed(d.state, "p1", 4, 0, (small,)), seen(0, 0.5, "rack"), policy)
    assert d.action == EXECUTE


def test_a_cancelled_plan_is_not_judged() -> None:
    policy = Policy(after_s=0, execute=True, replan_s=60)
    promise = Promise("traffic_spread", 0.5, 0.1, THRESHOLD)
    state = execute_once(policy, 0.5, promise)
    cancelled = ExecutionSeen("e1", finished=True, cancelled=True, by_watch=True, signature=("traffic_spread",))
    d = watch.observe(state, seen(30, 0.5, execution=cancelled), policy)
    assert d.state.promised == () and d.state.strikes == 0 and d.state.phase == watch.HELD


def test_policy_refuses_shares_out_of_range() -> None:
    with pytest.raises(ValueError):
        Policy(min_gain=1.5)
    with pytest.raises(ValueError):
        Policy(kept=-0.1)


# ---- what a proposal promises ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_a_traffic_proposal_promises_what_its_plan_measures_once_applied(seed: int) -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.0), seed)
    rates = synthetic_traffic(model, seed, active=0.5, skew=1.0)
    goals = Goals(threshold=0.9)
    found = imbalance.assess(model, goals, traffic=rates, traffic_spread=0.1, traffic_floor=0)
    plan = imbalance.propose(model, goals, found, rates)
    (promise,) = imbalance.promises(found, plan)
    assert promise.reason == "traffic_spread" and promise.before == found.traffic_spread
    after = imbalance.assess(apply(model, plan.moves), goals, traffic=rates, traffic_spread=0.1, traffic_floor=0)
    assert after.traffic_spread == pytest.approx(promise.after, abs=1e-6)
    assert promise.kept_by(after.measures()["traffic_spread"], 0.999)


@pytest.mark.parametrize("seed", range(4))
def test_a_disk_proposal_promises_what_its_plan_measures_once_applied(seed: int) -> None:
    model = generate(Shape(brokers=6, dirs_per_broker=2, partitions=300, skew=0.8), seed)
    goals = Goals(threshold=0.10)
    found = imbalance.assess(model, goals)
    plan = imbalance.propose(model, goals, found)
    (promise,) = imbalance.promises(found, plan)
    assert promise.reason == "disk_spread" and promise.meaningful(0.25)
    after = imbalance.assess(apply(model, plan.moves), goals)
    assert after.spread == pytest.approx(promise.after, abs=1e-5)
    assert set(found.measures()) == {"disk_spread"}
