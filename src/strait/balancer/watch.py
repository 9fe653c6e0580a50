"""The watch mode's decisions for one cluster: a small state machine with no I/O.

The I/O thread (`strait.balancer.watcher`) samples the cluster, turns what it saw into an
`Observation` and calls `observe`, which answers with the next `State` and at most one action:

- `PROPOSE`: make a plan now (the thread reports it back with `proposed`);
- `EXECUTE`: run the current proposal through the executor (reported back with `submitted`, or
  `submit_failed`).

The rules:

1. Only the leader acts. A controller that does not lead forgets everything (phase `standby`);
   a new leader starts counting from its own first observation.
2. A cluster is out of balance while the assessment names a reason. Once it has been out of
   balance for `after_s` without a break, the watch alerts and proposes a plan, and proposes
   afresh when the imbalance changes (its signature) or the proposal is `replan_s` old.
3. With `execute` on, a proposal with moves is executed, once, if no execution is unfinished on
   the cluster (whoever started it).
4. A person's cancel always wins: an execution the watch proposed that ends cancelled (or has a
   cancel request) stops the watch from executing anything until the imbalance differs from the
   one that plan was for, or the cluster is back in balance. The watch itself never cancels.
   Executions are recognised as the watch's by their plan (`proposed_by: watch`, with the
   imbalance's signature), so a new leader honours an old cancel too.
5. When an execution the watch started ends, the clock starts again: a plan that could not
   fix everything is not re-run at once, and a fresh proposal with no moves is never executed.
6. A plan is executed for a measured reason (`disk_spread`, `traffic_spread`) only if it promises
   a meaningful gain: the measure down by at least `min_gain` of its excess over the threshold
   (`Promise`). Hard reasons (`disk_full`, `rack`, `broker_gone`) always count.
7. A plan must keep its promise. When the watch next alerts after its own execution ended (the
   imbalance outlived `after_s` once more), each promised measure still out of balance must have
   come down by at least `kept` of the promised gain. If one did not, the plan was ineffective:
   the watch backs off (phase `backing_off`) and executes nothing for a measured reason for
   max(after_s, replan_s) x 2^n (n ineffective plans in a row, at most `max_hold_s`). A plan that
   kept its promise, or the cluster back in balance, ends the series; a hard reason is not held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

PROPOSE = "propose"
EXECUTE = "execute"

STANDBY, BALANCED, OUT_OF_BALANCE, ALERTING, BUSY, EXECUTING, HELD, BACKING_OFF = (
    "standby",
    "balanced",
    "out_of_balance",
    "alerting",
    "busy",
    "executing",
    "held",
    "backing_off",
)

# Reasons a plan narrows by a measure (a spread); the others are rules a plan either fixes or not.
MEASURED = frozenset({"disk_spread", "traffic_spread"})


@dataclass(frozen=True, kw_only=True)
class Policy:
    """`balance:` options of the watch mode (`strait.balancer.settings.BalanceConfig`)."""

    after_s: float = 600.0
    execute: bool = False
    replan_s: float = 600.0
    min_gain: float = 0.25  # share of a measure's excess over its threshold a plan must promise to remove
    kept: float = 0.5  # share of the promised gain the measure must show afterwards
    max_hold_s: float = 86_400.0  # longest back-off after ineffective plans

    def __post_init__(self) -> None:
        if self.after_s < 0 or self.replan_s <= 0:
            raise ValueError(f"after_s must be >= 0 and replan_s > 0, got {self.after_s} and {self.replan_s}")
        if not (0 <= self.min_gain <= 1 and 0 <= self.kept <= 1 and self.max_hold_s >= 0):
            raise ValueError(
                f"min_gain and kept must be within [0, 1] and max_hold_s >= 0, got {self.min_gain}, "
                f"{self.kept} and {self.max_hold_s}"
            )

    def hold_s(self, strikes: int) -> float:
        """How long to back off after `strikes` ineffective plans in a row."""
        return min(max(self.after_s, self.replan_s) * 2.0 ** min(strikes, 30), self.max_hold_s)


@dataclass(frozen=True)
class Promise:
    """What a plan promises for one measured reason: the measure when proposed (`before`), what
    the plan predicts (`after`), and the threshold above which the reason holds."""

    reason: str
    before: float
    after: float
    threshold: float

    @property
    def gain(self) -> float:
        return self.before - self.after

    def meaningful(self, min_gain: float) -> bool:
        """Whether the promised gain is at least `min_gain` of the excess over the threshold."""
        excess = self.before - self.threshold
        return self.gain > 0 and self.gain >= min_gain * excess

    def kept_by(self, measured: float, share: float) -> bool:
        """Whether `measured` (the measure now) came down by at least `share` of the promised gain."""
        return self.before - measured >= share * self.gain

    def text(self) -> str:
        return f"{self.reason} {self.before:.3f} -> {self.after:.3f} (threshold {self.threshold:.3f})"


@dataclass(frozen=True)
class ExecutionSeen:
    """The cluster's latest balancer execution, as the state topic tells it."""

    id: str
    finished: bool
    cancelled: bool  # ended cancelled, or someone asked to cancel it
    by_watch: bool  # its plan was proposed by the watch mode
    signature: tuple[str, ...] | None = None  # the imbalance the watch proposed it for


@dataclass(frozen=True)
class Observation:
    """One sample of a cluster. `reasons` empty: in balance."""

    at: float
    leading: bool
    reasons: frozenset[str] = frozenset()
    signature: tuple[str, ...] = ()
    execution: ExecutionSeen | None = None
    measures: Mapping[str, float] = field(default_factory=dict)  # measured reasons' values now


@dataclass(frozen=True)
class State:
    """What the watch remembers about one cluster between samples."""

    phase: str = STANDBY
    reasons: frozenset[str] = frozenset()
    signature: tuple[str, ...] = ()
    since: float | None = None  # start of the current out-of-balance stretch
    at: float | None = None  # time of the latest observation
    proposal: str | None = None  # id of the current proposal
    proposal_at: float | None = None
    proposal_signature: tuple[str, ...] = ()
    proposal_moves: int = 0
    executed: str | None = None  # the proposal last handed to the executor
    running: str | None = None  # the execution the watch started and saw unfinished
    held: tuple[str, ...] | None = None  # signature under which a person cancelled
    cancels_seen: str | None = None  # the cancelled execution already accounted for
    proposal_promise: tuple[Promise, ...] = ()  # what the current proposal promises
    promised: tuple[Promise, ...] = ()  # what the watch's last execution promised, until judged
    strikes: int = 0  # ineffective plans in a row
    hold_until: float | None = None  # no execution for a measured reason before this time
    backoff: str | None = None  # why the proposal is not executed (gain too small, backing off)

    def out_of_balance_s(self) -> float:
        if self.since is None or self.at is None:
            return 0.0
        return max(0.0, self.at - self.since)

    def alerting(self, policy: Policy) -> bool:
        return self.since is not None and self.out_of_balance_s() >= policy.after_s


@dataclass(frozen=True)
class Decision:
    state: State
    action: str | None = None


def observe(state: State, seen: Observation, policy: Policy) -> Decision:
    """The next state after `seen`, and what to do now (None, `PROPOSE` or `EXECUTE`)."""
    if not seen.leading:
        return Decision(State())
    state = replace(state, at=seen.at, reasons=seen.reasons, signature=seen.signature)
    execution = seen.execution
    busy = execution is not None and not execution.finished
    if execution is not None and execution.by_watch and execution.cancelled and state.cancels_seen != execution.id:
        # A person cancelled a plan the watch proposed: hold off until the imbalance differs from
        # the one that plan was for (recorded with it, so a new leader judges it the same way).
        held = execution.signature if execution.signature is not None else seen.signature
        state = replace(state, held=held, cancels_seen=execution.id)
        if execution.id == state.running:
            state = replace(state, promised=())  # a person stopped it: nothing to judge
    if state.running is not None and not (busy and execution is not None and execution.id == state.running):
        # The watch's own execution ended (or another replaced it): count afresh from now.
        state = replace(state, running=None, since=seen.at if seen.reasons else None)
    if state.held is not None and (not seen.reasons or seen.signature != state.held):
        state = replace(state, held=None)
    if not seen.reasons:
        # Back in balance: the series of ineffective plans ends, and a finished plan kept its
        # promise (one still running is judged once it ends).
        promised = state.promised if state.running is not None else ()
        state = replace(state, promised=promised, strikes=0, hold_until=None, backoff=None)
        return Decision(replace(state, phase=BUSY if busy else BALANCED, since=None, proposal=None))
    if state.since is None:
        state = replace(state, since=seen.at)
    if busy:
        assert execution is not None
        ours = execution.by_watch and execution.id == state.running
        return Decision(replace(state, phase=EXECUTING if ours else BUSY))
    if not state.alerting(policy):
        return Decision(replace(state, phase=OUT_OF_BALANCE))
    if state.promised and state.running is None:
        state = _judge(state, seen, policy)
    state = replace(state, phase=HELD if state.held is not None else ALERTING)
    stale = (
        state.proposal is None
        or state.proposal_signature != seen.signature
        or seen.at - (state.proposal_at or 0.0) >= policy.replan_s
    )
    if stale:
        return Decision(state, PROPOSE)
    if policy.execute and state.held is None and state.proposal_moves > 0 and state.executed != state.proposal:
        why = _why_not(state, seen, policy)
        if why is not None:
            return Decision(replace(state, phase=BACKING_OFF, backoff=why))
        return Decision(replace(state, backoff=None), EXECUTE)
    return Decision(state)


def _judge(state: State, seen: Observation, policy: Policy) -> State:
    """Whether the watch's last execution kept its promise, now that the imbalance has outlived
    `after_s` once more; an ineffective one adds a strike and starts a hold-off."""
    broken = [
        p
        for p in state.promised
        if p.reason in seen.reasons
        and p.reason in seen.measures
        and not p.kept_by(seen.measures[p.reason], policy.kept)
    ]
    if not broken:
        return replace(state, promised=(), strikes=0, hold_until=None, backoff=None)
    strikes = state.strikes + 1
    until = seen.at + policy.hold_s(strikes)
    measured = ", ".join(f"{p.text()}, measured {seen.measures[p.reason]:.3f}" for p in broken)
    why = f"ineffective plan #{strikes} in a row (promised {measured}); no execution before {until:.0f}"
    return replace(state, promised=(), strikes=strikes, hold_until=until, backoff=why)


def _why_not(state: State, seen: Observation, policy: Policy) -> str | None:
    """Why the current proposal must not be executed now (rules 6 and 7), or None."""
    if seen.reasons - MEASURED:
        return None  # a hard rule is broken: its fix is always worth a run
    if state.hold_until is not None and seen.at < state.hold_until:
        return state.backoff or f"backing off until {state.hold_until:.0f}"
    promised = [p for p in state.proposal_promise if p.reason in seen.reasons]
    if state.proposal_promise and not any(p.meaningful(policy.min_gain) for p in promised):
        said = "; ".join(p.text() for p in promised) or "nothing for the reasons now measured"
        return f"predicted gain below {policy.min_gain:.0%} of the excess: {said}"
    return None


def proposed(state: State, proposal: str, moves: int, at: float, promise: tuple[Promise, ...] = ()) -> State:
    """The I/O made proposal `proposal` (with `moves` moves) for the imbalance last observed;
    `promise` is what it predicts for the measured reasons (none given: not judged)."""
    return replace(
        state,
        proposal=proposal,
        proposal_at=at,
        proposal_signature=state.signature,
        proposal_moves=moves,
        proposal_promise=promise,
    )


def submitted(state: State, proposal: str, execution: str) -> State:
    """The executor took `proposal` as execution `execution`."""
    promised = state.proposal_promise if proposal == state.proposal else ()
    return replace(state, executed=proposal, running=execution, phase=EXECUTING, promised=promised, backoff=None)


def submit_failed(state: State, *, stale: bool) -> State:
    """The executor refused the proposal; a stale one (the cluster moved on) is proposed afresh."""
    return replace(state, proposal=None) if stale else state
