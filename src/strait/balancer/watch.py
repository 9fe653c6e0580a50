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
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PROPOSE = "propose"
EXECUTE = "execute"

STANDBY, BALANCED, OUT_OF_BALANCE, ALERTING, BUSY, EXECUTING, HELD = (
    "standby",
    "balanced",
    "out_of_balance",
    "alerting",
    "busy",
    "executing",
    "held",
)


@dataclass(frozen=True, kw_only=True)
class Policy:
    """`balance:` options of the watch mode (`strait.balancer.settings.BalanceConfig`)."""

    after_s: float = 600.0
    execute: bool = False
    replan_s: float = 600.0

    def __post_init__(self) -> None:
        if self.after_s < 0 or self.replan_s <= 0:
            raise ValueError(f"after_s must be >= 0 and replan_s > 0, got {self.after_s} and {self.replan_s}")


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
    if state.running is not None and not (busy and execution is not None and execution.id == state.running):
        # The watch's own execution ended (or another replaced it): count afresh from now.
        state = replace(state, running=None, since=seen.at if seen.reasons else None)
    if state.held is not None and (not seen.reasons or seen.signature != state.held):
        state = replace(state, held=None)
    if not seen.reasons:
        return Decision(replace(state, phase=BUSY if busy else BALANCED, since=None, proposal=None))
    if state.since is None:
        state = replace(state, since=seen.at)
    if busy:
        assert execution is not None
        ours = execution.by_watch and execution.id == state.running
        return Decision(replace(state, phase=EXECUTING if ours else BUSY))
    if not state.alerting(policy):
        return Decision(replace(state, phase=OUT_OF_BALANCE))
    state = replace(state, phase=HELD if state.held is not None else ALERTING)
    stale = (
        state.proposal is None
        or state.proposal_signature != seen.signature
        or seen.at - (state.proposal_at or 0.0) >= policy.replan_s
    )
    if stale:
        return Decision(state, PROPOSE)
    if policy.execute and state.held is None and state.proposal_moves > 0 and state.executed != state.proposal:
        return Decision(state, EXECUTE)
    return Decision(state)


def proposed(state: State, proposal: str, moves: int, at: float) -> State:
    """The I/O made proposal `proposal` (with `moves` moves) for the imbalance last observed."""
    return replace(state, proposal=proposal, proposal_at=at, proposal_signature=state.signature, proposal_moves=moves)


def submitted(state: State, proposal: str, execution: str) -> State:
    """The executor took `proposal` as execution `execution`."""
    return replace(state, executed=proposal, running=execution, phase=EXECUTING)


def submit_failed(state: State, *, stale: bool) -> State:
    """The executor refused the proposal; a stale one (the cluster moved on) is proposed afresh."""
    return replace(state, proposal=None) if stale else state
