"""The balancer's current execution, summarised for the dashboard and the metrics, and the
watch mode's metrics.

Executions keep their durable state in the balanced cluster (`strait.balancer.state`); the
controller reads it from every configured cluster that has one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

FINISHED_MOVES = ("done", "failed", "cancelled", "skipped")


def summarize(execution_id: str, status: str, moves: Mapping[str, Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """Counts of moves by state, of pending moves waiting for room on a disk, and the fraction
    finished. Pure."""
    by_state: dict[str, int] = {}
    waiting = 0
    for move in moves.values():
        state = str(move.get("state", "pending"))
        by_state[state] = by_state.get(state, 0) + 1
        waiting += 1 if state == "pending" and move.get("waiting") else 0
    total = sum(by_state.values())
    finished = sum(n for s, n in by_state.items() if s in FINISHED_MOVES)
    return {
        "execution": execution_id,
        "status": status,
        "moves": total,
        "by_state": dict(sorted(by_state.items())),
        "progress": finished / total if total else (1.0 if status == "done" else 0.0),
        "waiting_for_room": waiting,
        **extra,
    }


def read_executions(clusters: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """cluster name -> summary of its latest balancer execution, for clusters that had one.

    Only clusters that already hold the state topic are read: an observer must not create
    the balancer's topic on every cluster it looks at.
    """
    from strait import clients
    from strait.balancer.state import TOPIC, StateStore

    out: dict[str, dict[str, Any]] = {}
    for name, props in clusters.items():
        try:
            listing = clients.admin(props).list_topics(TOPIC, timeout=5)
            present = TOPIC in listing.topics and listing.topics[TOPIC].error is None
        except Exception as exc:
            log.debug("cannot list topics of %s: %s", name, exc)
            continue
        if not present:
            continue
        store = StateStore(props)
        try:
            execution = store.current()
        except Exception as exc:  # the balancer's errors vary by cause; report none rather than fail
            log.warning("cannot read balancer state on %s: %s", name, exc)
            continue
        finally:
            store.close()
        if execution is None:
            continue
        moves = dict(execution.progress.get("moves") or {})
        out[name] = summarize(execution.id, execution.status, moves, alive=execution.alive())
    return out


WATCH_REASONS = ("disk_spread", "disk_full", "rack", "broker_gone", "traffic_spread")


class WatchCollector(Collector):
    """The balance watch mode (`strait.balancer.watcher`), per watched cluster, from its `view()`.

    Only the leader watches: a standby's phase is `standby` and it reports no imbalance.
    """

    def __init__(self, view: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._view = view

    def collect(self) -> Iterator[Any]:
        reason = GaugeMetricFamily(
            "strait_balance_out_of_balance",
            "1 while the watch finds the cluster out of balance for this reason.",
            labels=["cluster", "reason"],
        )
        seconds = GaugeMetricFamily(
            "strait_balance_out_of_balance_seconds",
            "How long the cluster has been out of balance without a break (0: in balance).",
            labels=["cluster"],
        )
        alert = GaugeMetricFamily(
            "strait_balance_alert",
            "1 once the cluster has stayed out of balance for balance.after_s (the watch then proposes a plan).",
            labels=["cluster"],
        )
        spread = GaugeMetricFamily(
            "strait_balance_disk_spread_ratio",
            "Largest minus smallest disk usage ratio, as the watch last measured it.",
            labels=["cluster"],
        )
        traffic = GaugeMetricFamily(
            "strait_balance_traffic_spread_ratio",
            "Largest minus smallest broker network in, over its mean, as the watch last measured it "
            "(absent without balance.traffic or before the second sample).",
            labels=["cluster"],
        )
        proposal = GaugeMetricFamily(
            "strait_balance_proposal_moves",
            "Moves in the plan the watch currently proposes (absent: no proposal).",
            labels=["cluster"],
        )
        held = GaugeMetricFamily(
            "strait_balance_watch_held",
            "1 while a person's cancel holds the watch from executing until the imbalance changes.",
            labels=["cluster"],
        )
        backing_off = GaugeMetricFamily(
            "strait_balance_watch_backing_off",
            "1 while the watch does not execute its proposal: the predicted gain is too small, or "
            "its last plans did not keep their promise (GET /balance/watch says why and until when).",
            labels=["cluster"],
        )
        ineffective = GaugeMetricFamily(
            "strait_balance_ineffective_plans",
            "Plans the watch executed in a row that did not narrow the spread as they promised.",
            labels=["cluster"],
        )
        errors = CounterMetricFamily(
            "strait_balance_watch_errors",
            "Samples, plans or executions of the watch that failed (cluster unreachable, ...).",
            labels=["cluster"],
        )
        for cluster, row in sorted(self._view().items()):
            errors.add_metric([cluster], row.get("errors", 0))
            if row.get("phase") == "standby":
                continue
            present = set(row.get("reasons") or ())
            for name in WATCH_REASONS:
                reason.add_metric([cluster, name], 1.0 if name in present else 0.0)
            seconds.add_metric([cluster], float(row.get("out_of_balance_s") or 0.0))
            alert.add_metric([cluster], 1.0 if row.get("alert") else 0.0)
            held.add_metric([cluster], 1.0 if row.get("held") else 0.0)
            backing_off.add_metric([cluster], 1.0 if row.get("backoff") else 0.0)
            ineffective.add_metric([cluster], float(row.get("ineffective_plans") or 0))
            measured = (row.get("assessment") or {}).get("spread")
            if measured is not None:
                spread.add_metric([cluster], measured)
            measured_traffic = (row.get("assessment") or {}).get("traffic_spread")
            if measured_traffic is not None:
                traffic.add_metric([cluster], measured_traffic)
            if row.get("proposal") is not None:
                proposal.add_metric([cluster], row["proposal"]["moves"])
        yield from (reason, seconds, alert, spread, traffic, proposal, held, backing_off, ineffective, errors)
