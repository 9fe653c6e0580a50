"""The watch mode's state machine (`strait.balancer.watch`) over generated sequences of samples.

A small simulated world feeds `observe`: leadership comes and goes, imbalances appear, change and
clear, executions the watch starts run for a while, people start their own and cancel the
watch's. After every step a checker holds the rules the module promises; a companion test breaks
one rule in the machine and requires the checker to notice.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from strait.balancer import watch
from strait.balancer.watch import EXECUTE, PROPOSE, ExecutionSeen, Observation, Policy, State

Observe = Callable[[State, Observation, Policy], watch.Decision]


@dataclass
class World:
    """The cluster and the people around the watch, driven by a seeded random generator."""

    rng: random.Random
    policy: Policy
    at: float = 0.0
    leading: bool = True
    signature: tuple[str, ...] = ()
    execution: ExecutionSeen | None = None
    remaining: int = 0  # ticks the current execution still runs
    proposals: int = 0
    cancels: int = 0
    executed: set[str] = field(default_factory=set)
    # What the checker tracks on its own, from the samples alone.
    stretch_since: float | None = None  # start of the current leading, out-of-balance stretch
    held_signature: tuple[str, ...] | None = None  # a person cancelled a watch plan under this signature
    violations: list[str] = field(default_factory=list)

    def tick(self) -> Observation:
        self.at += self.rng.choice((1.0, 5.0, 10.0, 30.0))
        if self.rng.random() < 0.05:
            self.leading = not self.leading
        roll = self.rng.random()
        if roll < 0.08:
            self.signature = ()
        elif roll < 0.16:
            self.signature = tuple(sorted(self.rng.sample(("disk_spread", "rack:3:ab", "broker_gone:4"), 2)))
        elif roll < 0.30 and not self.signature:
            self.signature = ("disk_spread",)
        if self.execution is not None and not self.execution.finished:
            self.remaining -= 1
            if self.execution.by_watch and self.rng.random() < 0.25:
                self.execution = replace(self.execution, cancelled=True)  # a person cancels it
                self.held_signature = self.execution.signature
                self.cancels += 1
            if self.remaining <= 0 or self.execution.cancelled:
                self.execution = replace(self.execution, finished=True)
        elif self.rng.random() < 0.03:
            # A person starts an execution of their own (which supersedes any earlier cancel).
            self.held_signature = None
            self.execution = ExecutionSeen(f"human-{self.at}", finished=False, cancelled=False, by_watch=False)
            self.remaining = self.rng.randint(1, 6)
        if not self.leading or not self.signature:
            self.stretch_since = None
        elif self.stretch_since is None:
            self.stretch_since = self.at
        if self.held_signature is not None and self.signature != self.held_signature:
            self.held_signature = None
        return Observation(
            at=self.at,
            leading=self.leading,
            reasons=frozenset(s.split(":")[0] for s in self.signature),
            signature=self.signature,
            execution=self.execution,
        )

    def check(self, seen: Observation, decision: watch.Decision) -> None:
        action, state = decision.action, decision.state
        where = f"at {seen.at}"
        if not seen.leading and (action is not None or state.phase != watch.STANDBY):
            self.violations.append(f"{where}: a standby acted ({action}, {state.phase})")
        if action is not None and (self.stretch_since is None or seen.at - self.stretch_since < self.policy.after_s):
            self.violations.append(f"{where}: {action} before out of balance for {self.policy.after_s} s")
        busy = seen.execution is not None and not seen.execution.finished
        if action == EXECUTE:
            if not self.policy.execute:
                self.violations.append(f"{where}: executed with execute off")
            if busy:
                self.violations.append(f"{where}: executed while an execution runs")
            if self.held_signature is not None:
                self.violations.append(f"{where}: executed after a person cancelled under {self.held_signature}")
            if state.proposal in self.executed:
                self.violations.append(f"{where}: proposal {state.proposal} executed twice")
            if state.proposal_moves <= 0:
                self.violations.append(f"{where}: executed a proposal without moves")

    def act(self, state: State, action: str | None, seen: Observation) -> State:
        if action == PROPOSE:
            self.proposals += 1
            return watch.proposed(state, f"p{self.proposals}", self.rng.choice((0, 3, 7)), seen.at)
        if action == EXECUTE:
            assert state.proposal is not None
            if self.rng.random() < 0.1:  # refused (a conflict, or the plan went stale): not run
                return watch.submit_failed(state, stale=self.rng.random() < 0.5)
            self.executed.add(state.proposal)
            self.execution = ExecutionSeen(
                f"e-{state.proposal}",
                finished=False,
                cancelled=False,
                by_watch=True,
                signature=state.proposal_signature,
            )
            self.remaining = self.rng.randint(1, 8)
            return watch.submitted(state, state.proposal, self.execution.id)
        return state


def run(seed: int, policy: Policy, observe: Observe = watch.observe, steps: int = 400) -> World:
    world = World(random.Random(seed), policy)
    state = State()
    for _ in range(steps):
        seen = world.tick()
        decision = observe(state, seen, policy)
        world.check(seen, decision)
        state = world.act(decision.state, decision.action, seen)
        if decision.action == PROPOSE:
            # As the I/O thread does: the same sample again, now with the fresh proposal.
            again = observe(state, seen, policy)
            world.check(seen, again)
            state = world.act(again.state, again.action, seen)
    return world


POLICIES = [
    Policy(after_s=0, execute=True, replan_s=30),
    Policy(after_s=60, execute=True, replan_s=120),
    Policy(after_s=60, execute=False, replan_s=60),
    Policy(after_s=300, execute=True, replan_s=600),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"after{p.after_s:g}-exec{int(p.execute)}")
@pytest.mark.parametrize("seed", range(25))
def test_generated_sequences_keep_the_rules(seed: int, policy: Policy) -> None:
    world = run(seed, policy)
    assert world.violations == []


def test_generated_sequences_exercise_every_path() -> None:
    """The generator reaches what the rules are about: proposals, executions, cancels, holds."""
    executions = cancels = 0
    for seed in range(25):
        world = run(seed, POLICIES[1])
        executions += len(world.executed)
        cancels += world.cancels
    assert executions > 50 and cancels > 10
    phases = set()
    for seed in range(5):
        world = World(random.Random(seed), POLICIES[1])
        state = State()
        for _ in range(400):
            seen = world.tick()
            decision = watch.observe(state, seen, POLICIES[1])
            phases.add(decision.state.phase)
            state = world.act(decision.state, decision.action, seen)
    assert phases >= {watch.STANDBY, watch.BALANCED, watch.OUT_OF_BALANCE, watch.ALERTING, watch.EXECUTING}
    assert watch.HELD in phases or watch.BUSY in phases


def test_the_checker_catches_a_machine_that_ignores_a_cancel() -> None:
    def forgetful(state: State, seen: Observation, policy: Policy) -> watch.Decision:
        if seen.execution is not None:
            seen = replace(seen, execution=replace(seen.execution, cancelled=False))
        return watch.observe(replace(state, held=None), seen, policy)

    found = [v for seed in range(25) for v in run(seed, POLICIES[1], forgetful).violations]
    assert any("person cancelled" in v for v in found)


def test_the_checker_catches_a_machine_that_acts_at_once() -> None:
    def hasty(state: State, seen: Observation, policy: Policy) -> watch.Decision:
        return watch.observe(state, seen, replace(policy, after_s=0))

    found = [v for seed in range(10) for v in run(seed, POLICIES[3], hasty).violations]
    assert any("before out of balance" in v for v in found)


# ---- scenarios, step by step -----------------------------------------------------------------


def seen(at: float, *reasons: str, execution: ExecutionSeen | None = None, leading: bool = True) -> Observation:
    return Observation(
        at=at, leading=leading, reasons=frozenset(reasons), signature=tuple(sorted(reasons)), execution=execution
    )


def test_alerts_proposes_and_executes_after_after_s() -> None:
    policy = Policy(after_s=60, execute=True, replan_s=600)
    d = watch.observe(State(), seen(0, "disk_spread"), policy)
    assert (d.state.phase, d.action, d.state.alerting(policy)) == (watch.OUT_OF_BALANCE, None, False)
    d = watch.observe(d.state, seen(59, "disk_spread"), policy)
    assert d.action is None
    d = watch.observe(d.state, seen(60, "disk_spread"), policy)
    assert (d.state.phase, d.action, d.state.alerting(policy)) == (watch.ALERTING, PROPOSE, True)
    state = watch.proposed(d.state, "p1", 4, 60)
    d = watch.observe(state, seen(60, "disk_spread"), policy)
    assert d.action == EXECUTE
    state = watch.submitted(d.state, "p1", "e1")
    running = ExecutionSeen("e1", finished=False, cancelled=False, by_watch=True)
    d = watch.observe(state, seen(90, "disk_spread", execution=running), policy)
    assert (d.state.phase, d.action) == (watch.EXECUTING, None)
    done = replace(running, finished=True)
    d = watch.observe(d.state, seen(120, execution=done), policy)
    assert (d.state.phase, d.action, d.state.since) == (watch.BALANCED, None, None)


def test_watch_only_proposes_and_serves_without_executing() -> None:
    policy = Policy(after_s=0, execute=False)
    d = watch.observe(State(), seen(0, "rack"), policy)
    assert d.action == PROPOSE
    d = watch.observe(watch.proposed(d.state, "p1", 2, 0), seen(0, "rack"), policy)
    assert d.action is None and d.state.proposal == "p1"
    d = watch.observe(d.state, seen(30, "rack"), policy)
    assert d.action is None


def test_a_cancel_holds_until_the_imbalance_changes() -> None:
    policy = Policy(after_s=0, execute=True, replan_s=10)
    state = watch.submitted(watch.proposed(State(phase=watch.ALERTING), "p1", 3, 0), "p1", "e1")
    cancelled = ExecutionSeen("e1", finished=True, cancelled=True, by_watch=True)
    d = watch.observe(state, seen(5, "disk_spread", execution=cancelled), policy)
    assert d.state.phase == watch.HELD
    for t in (20, 40, 400):  # replanned, but never executed while the imbalance stays the same
        d = watch.observe(d.state, seen(t, "disk_spread", execution=cancelled), policy)
        if d.action == PROPOSE:
            d = watch.observe(
                watch.proposed(d.state, f"p{t}", 3, t), seen(t, "disk_spread", execution=cancelled), policy
            )
        assert d.action != EXECUTE and d.state.phase == watch.HELD
    # A broker goes: a different imbalance, so the watch may act again.
    d = watch.observe(d.state, seen(410, "disk_spread", "broker_gone", execution=cancelled), policy)
    assert d.action == PROPOSE
    d = watch.observe(
        watch.proposed(d.state, "p9", 5, 410), seen(410, "disk_spread", "broker_gone", execution=cancelled), policy
    )
    assert d.action == EXECUTE


def test_a_new_leader_honours_an_old_cancel() -> None:
    policy = Policy(after_s=0, execute=True)
    cancelled = ExecutionSeen("e1", finished=True, cancelled=True, by_watch=True)
    d = watch.observe(State(), seen(0, "disk_spread", execution=cancelled), policy)
    assert d.action == PROPOSE
    d = watch.observe(watch.proposed(d.state, "p1", 3, 0), seen(0, "disk_spread", execution=cancelled), policy)
    assert d.action is None and d.state.phase == watch.HELD


def test_a_new_leader_acts_when_the_imbalance_changed_since_the_cancel() -> None:
    policy = Policy(after_s=0, execute=True)
    cancelled = ExecutionSeen("e1", finished=True, cancelled=True, by_watch=True, signature=("disk_spread",))
    now = seen(0, "disk_spread", "broker_gone", execution=cancelled)  # a broker went while nobody watched
    d = watch.observe(State(), now, policy)
    d = watch.observe(watch.proposed(d.state, "p1", 3, 0), now, policy)
    assert d.action == EXECUTE and d.state.held is None
    same = seen(0, "disk_spread", execution=cancelled)
    d = watch.observe(State(), same, policy)
    d = watch.observe(watch.proposed(d.state, "p1", 3, 0), same, policy)
    assert d.action is None and d.state.phase == watch.HELD


def test_someone_elses_execution_makes_the_watch_wait() -> None:
    policy = Policy(after_s=0, execute=True)
    theirs = ExecutionSeen("h1", finished=False, cancelled=False, by_watch=False)
    d = watch.observe(State(), seen(0, "disk_spread", execution=theirs), policy)
    assert (d.state.phase, d.action) == (watch.BUSY, None)


def test_a_standby_forgets_and_does_nothing() -> None:
    policy = Policy(after_s=0, execute=True)
    d = watch.observe(State(), seen(0, "disk_spread"), policy)
    assert d.action == PROPOSE
    d = watch.observe(d.state, seen(5, "disk_spread", leading=False), policy)
    assert (d.state, d.action) == (State(), None)


def test_an_empty_proposal_is_never_executed() -> None:
    policy = Policy(after_s=0, execute=True)
    d = watch.observe(State(), seen(0, "disk_spread"), policy)
    d = watch.observe(watch.proposed(d.state, "p1", 0, 0), seen(0, "disk_spread"), policy)
    assert d.action is None


def test_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Policy(after_s=-1)
    with pytest.raises(ValueError):
        Policy(replan_s=0)
