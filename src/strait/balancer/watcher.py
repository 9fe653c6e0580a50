"""The watch mode's I/O: a thread in the controller process that samples each watched cluster.

Every `interval_s`, while its controller leads, for each cluster under `balance.clusters`: load
the cluster model (`KafkaGateway`; with `balance.traffic`, a traffic sample with it, so the
rates since the last round go into a proposal), assess it (`strait.balancer.imbalance`), read the latest
execution from the state topic (only if the topic exists: watching creates nothing), and let
`strait.balancer.watch.observe` decide. A `PROPOSE` plans with the existing planner from the
model just loaded; an `EXECUTE` hands the proposal to `strait.balancer.service.submit`, which
runs it in its own process with the executor's throttles, window and capacity limit, like
`POST /balance/{cluster}/executions`. `cancel` (CLI or REST) stops it as any other execution.

`view()` and `proposal()` are what the REST layer, the dashboard and the metrics read.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from strait.balancer import executor, imbalance, sampler, service, watch
from strait.balancer.capacity import Capacities
from strait.balancer.errors import BalanceError, ClusterError, StalePlanError
from strait.balancer.gateway import KafkaGateway
from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel
from strait.balancer.plan import Plan
from strait.balancer.settings import BalanceConfig
from strait.balancer.traffic import Sample, Traffic
from strait.balancer.traffic import rates as traffic_rates

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposal:
    """A plan the watch proposed for one cluster."""

    id: str
    at: float
    plan: Plan
    assessment: imbalance.Assessment

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "operation": self.plan.operation,
            "moves": len(self.plan.moves),
            "bytes": self.plan.bytes,
            "warnings": list(self.plan.warnings),
            "spread_before": self.plan.stats.get("spread_before"),
            "spread_after": self.plan.stats.get("spread_after"),
            "traffic_spread_before": self.plan.stats.get("traffic_spread_before"),
            "traffic_spread_after": self.plan.stats.get("traffic_spread_after"),
        }


class BalanceWatcher:
    """Watches `settings.watched()` clusters while `leading()`; see the module docstring."""

    def __init__(
        self,
        clusters: Mapping[str, Mapping[str, Any]],
        settings: BalanceConfig,
        *,
        leading: Callable[[], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.names = settings.watched()
        self._props = {name: dict(clusters[name]) for name in self.names}
        self._leading = leading
        self._clock = clock
        self.policy = watch.Policy(
            after_s=settings.after_s,
            execute=settings.execute,
            replan_s=max(settings.after_s, settings.interval_s),
            min_gain=settings.min_gain,
        )
        self.goals = Goals(threshold=settings.threshold)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._states = {name: watch.State() for name in self.names}
        self._proposals: dict[str, Proposal] = {}
        self._assessments: dict[str, imbalance.Assessment] = {}
        self._errors: dict[str, str | None] = dict.fromkeys(self.names)
        self._error_count = dict.fromkeys(self.names, 0)
        self._checked: dict[str, float | None] = dict.fromkeys(self.names)
        self._samples: dict[str, Sample] = {}  # with `traffic`: each cluster's last sample

    # ---- lifecycle ------------------------------------------------------------------------------

    def run(self) -> None:
        """Check every cluster each `interval_s` until `stop`."""
        while not self._stop.is_set():
            for name in self.names:
                if self._stop.is_set():
                    break
                try:
                    self.check(name)
                except Exception as exc:  # a client library's own errors, a bug: the thread must go on
                    log.exception("balance watch: checking cluster %s failed", name)
                    self._failed(name, f"checking cluster {name!r} failed: {exc}")
            self._wake.wait(self.settings.interval_s)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Check every cluster now."""
        self._wake.set()

    # ---- one round ------------------------------------------------------------------------------

    def check(self, name: str) -> None:
        """Sample cluster `name` once and act on the decision."""
        if not self._leading():
            self._set(name, watch.State())
            return
        props = self._props[name]
        capacities = self.settings.capacities_of(name)
        try:
            model, traffic = self._sample(name, props, capacities)
            # Tiers are placed only with traffic measured (`imbalance.propose`); then the spread
            # that counts is the one within each tier.
            tiers = self.settings.classes_of(name) if traffic is not None else None
            assessment = imbalance.assess(
                model,
                self.goals,
                tiers,
                traffic=traffic,
                traffic_spread=self.settings.traffic_spread,
                traffic_floor=self.settings.traffic_floor,
            )
            seen = watch.Observation(
                at=self._clock(),
                leading=True,
                reasons=assessment.reasons,
                signature=assessment.signature,
                execution=_latest_execution(props),
                measures=assessment.measures(),
            )
        except (BalanceError, OSError) as exc:
            self._failed(name, f"cannot sample cluster {name!r}: {exc}")
            return
        with self._lock:
            self._assessments[name] = assessment
            self._checked[name] = seen.at
            self._errors[name] = None
        before = self._states[name]
        decision = watch.observe(before, seen, self.policy)
        if decision.action == watch.PROPOSE:
            decision = self._propose(name, model, traffic, assessment, decision.state, seen)
        if decision.action == watch.EXECUTE:
            self._execute(name, props, capacities, decision.state)
        else:
            self._set(name, decision.state)
        self._log_change(name, before, self._states[name])

    def _propose(
        self,
        name: str,
        model: ClusterModel,
        traffic: Traffic | None,
        assessment: imbalance.Assessment,
        state: watch.State,
        seen: watch.Observation,
    ) -> watch.Decision:
        try:
            plan = imbalance.propose(model, self.goals, assessment, traffic, self.settings.classes_of(name))
        except (BalanceError, ValueError) as exc:
            self._failed(name, f"cannot plan for cluster {name!r}: {exc}")
            return watch.Decision(state)
        made = Proposal(uuid.uuid4().hex[:12], seen.at, plan, assessment)
        with self._lock:
            self._proposals[name] = made
        # Said loudly for a new imbalance; a refresh of the same one (every replan_s) quietly.
        log.log(
            logging.WARNING if state.proposal is None or state.proposal_signature != seen.signature else logging.INFO,
            "balance watch: cluster %s out of balance for %.0f s (%s); proposal %s: %d moves, %d bytes%s",
            name,
            state.out_of_balance_s(),
            ", ".join(sorted(assessment.reasons)),
            made.id,
            len(plan.moves),
            plan.bytes,
            "" if self.policy.execute else " (not executed: balance.execute is off)",
        )
        state = watch.proposed(state, made.id, len(plan.moves), seen.at, imbalance.promises(assessment, plan))
        # The same sample again: with the fresh proposal, the machine says whether to execute it.
        return watch.observe(state, seen, self.policy)

    def _execute(self, name: str, props: Mapping[str, Any], capacities: Capacities, state: watch.State) -> None:
        proposal = self._proposals.get(name)
        if proposal is None or proposal.id != state.proposal:
            self._set(name, watch.submit_failed(state, stale=True))
            return
        options = executor.Options(throttle=self.settings.throttle)
        try:
            execution = service.submit(props, proposal.plan, options, capacities)
        except StalePlanError as exc:
            log.info("balance watch: proposal %s on %s is stale (%s); proposing afresh", proposal.id, name, exc)
            self._set(name, watch.submit_failed(state, stale=True))
            return
        except (BalanceError, OSError) as exc:
            self._failed(name, f"cannot execute proposal {proposal.id} on cluster {name!r}: {exc}")
            self._set(name, watch.submit_failed(state, stale=False))
            return
        log.warning("balance watch: cluster %s: executing proposal %s as execution %s", name, proposal.id, execution)
        self._set(name, watch.submitted(state, proposal.id, execution))

    # ---- I/O --------------------------------------------------------------------------------------

    @staticmethod
    def _load(props: Mapping[str, Any], capacities: Capacities) -> ClusterModel:
        gateway = KafkaGateway(props, capacities)
        try:
            return gateway.load_model()
        finally:
            gateway.close()

    def _sample(
        self, name: str, props: Mapping[str, Any], capacities: Capacities
    ) -> tuple[ClusterModel, Traffic | None]:
        """The cluster model now; with `balance.traffic`, also the rates since the last sample
        (None on the first, or when the samples did not come in order)."""
        if not self.settings.traffic:
            return self._load(props, capacities), None
        from strait import clients

        gateway = KafkaGateway(props, capacities)
        try:
            model, now = sampler.sample(gateway, clients.admin(props))
        except ClusterError:
            raise
        except Exception as exc:  # librdkafka's errors vary by cause; the sample fails as a whole
            raise ClusterError(f"sampling traffic failed: {exc}") from exc
        finally:
            gateway.close()
        before, self._samples[name] = self._samples.get(name), now
        if before is None or now.at <= before.at:
            return model, None
        return model, traffic_rates(before, now)

    # ---- bookkeeping ------------------------------------------------------------------------------

    def _set(self, name: str, state: watch.State) -> None:
        with self._lock:
            self._states[name] = state

    def _failed(self, name: str, message: str) -> None:
        log.warning("balance watch: %s", message)
        with self._lock:
            self._errors[name] = message
            self._error_count[name] += 1

    def _log_change(self, name: str, before: watch.State, after: watch.State) -> None:
        if before.phase == after.phase:
            return
        if after.phase == watch.ALERTING:
            log.warning("balance watch: cluster %s out of balance for %.0f s", name, after.out_of_balance_s())
        elif after.phase == watch.HELD:
            log.warning("balance watch: cluster %s: a person cancelled the last proposal; holding", name)
        elif after.phase == watch.BACKING_OFF:
            log.warning("balance watch: cluster %s: not executing proposal %s: %s", name, after.proposal, after.backoff)
        else:
            log.info("balance watch: cluster %s is %s", name, after.phase.replace("_", " "))

    # ---- readers -----------------------------------------------------------------------------------

    def view(self) -> dict[str, dict[str, Any]]:
        """Per watched cluster: phase, reasons, how long out of balance, alert, proposal, errors."""
        with self._lock:
            out = {}
            for name in self.names:
                state = self._states[name]
                assessment = self._assessments.get(name) if state.phase != watch.STANDBY else None
                proposal = self._proposals.get(name)
                out[name] = {
                    "phase": state.phase,
                    "reasons": sorted(state.reasons),
                    "out_of_balance_s": round(state.out_of_balance_s(), 1),
                    "since": state.since,
                    "alert": state.alerting(self.policy),
                    "assessment": assessment.to_dict() if assessment is not None else None,
                    "proposal": proposal.summary() if proposal is not None and proposal.id == state.proposal else None,
                    "execute": self.policy.execute,
                    "after_s": self.policy.after_s,
                    "execution": state.running,
                    "held": state.held is not None,
                    "backoff": state.backoff if state.phase == watch.BACKING_OFF else None,
                    "backoff_until": state.hold_until,
                    "ineffective_plans": state.strikes,
                    "promise": [asdict(p) for p in state.proposal_promise] if state.proposal else [],
                    "checked": self._checked[name],
                    "error": self._errors[name],
                    "errors": self._error_count[name],
                }
            return out

    def proposal(self, name: str) -> dict[str, Any] | None:
        """The current proposal's plan for cluster `name` (as `GET /balance/{cluster}/plan`), or None."""
        with self._lock:
            state = self._states.get(name)
            proposal = self._proposals.get(name)
            if state is None or proposal is None or proposal.id != state.proposal:
                return None
            return {
                **proposal.summary(),
                "assessment": proposal.assessment.to_dict(),
                "executed": state.executed == proposal.id,
                "plan": proposal.plan.to_dict(),
            }


def _latest_execution(props: Mapping[str, Any]) -> watch.ExecutionSeen | None:
    """The cluster's latest execution, read only where the state topic already exists."""
    from strait import clients
    from strait.balancer.state import TOPIC, StateStore

    try:
        listing = clients.admin(props).list_topics(TOPIC, timeout=10)
    except Exception as exc:  # librdkafka's errors vary by cause; the sample fails as a whole
        raise ClusterError(f"cannot list topics: {exc}") from exc
    topic = listing.topics.get(TOPIC)
    if topic is None or topic.error is not None:
        return None
    store = StateStore(props)
    try:
        execution = store.current()
    finally:
        store.close()
    if execution is None:
        return None
    stats = dict(execution.plan.get("stats") or {})
    signature = stats.get("signature")
    return watch.ExecutionSeen(
        id=execution.id,
        finished=execution.finished(),
        cancelled=execution.cancel_requested or execution.status == "cancelled",
        by_watch=stats.get("proposed_by") == "watch",
        signature=tuple(str(t) for t in signature) if isinstance(signature, list) else None,
    )
