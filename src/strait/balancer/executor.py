"""Runs a plan against a cluster: the sliding window, throttles, cancel, durable progress.

One loop, ticking every `poll_interval` (0.5 s by default, so a finished move is noticed within a
second): read what Kafka says about the moves in flight, retire finished ones, honour a cancel
request, start whatever the window admits, keep the throttles equal to what the moves in flight
need, and write progress to the state topic. In `batch` mode the window only refills once it
is empty, which is how stock tools behave and what the benchmark compares against.

Deviations from the ideal, forced by Kafka's APIs: an inter-broker move picks the log dir of each
new replica by calling AlterReplicaLogDirs before the reassignment (the broker remembers the
preferred dir and answers ReplicaNotAvailable); should the replica still land elsewhere, the
executor follows up with an intra-broker move before it calls the move done. Reading back where
the moves in flight stand, and settling them, is `strait.balancer.tracking`'s part.

Capacity: a move starts only when its destination disks have room for it next to what is on them
and what is already moving there (`strait.balancer.headroom`); otherwise it waits, and says why.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from strait.balancer import tracking
from strait.balancer.errors import BalanceError, ExecutionConflict, PlanError
from strait.balancer.gateway import Gateway
from strait.balancer.headroom import RoomKeeper, with_capacities
from strait.balancer.kafka_moves import already_applied, cancel, cancel_moves, settled, stale
from strait.balancer.plan import InterBrokerMove, IntraBrokerMove, Move, Plan, order_for_execution, validate
from strait.balancer.progress import (
    ACTIVE,
    CANCELLED,
    DONE,
    FAILED,
    FINAL,
    PENDING,
    PLACING,
    RUNNING,
    SKIPPED,
    Options,
    Snapshot,
    make_snapshot,
    snapshot_of,
)
from strait.balancer.state import StateStore
from strait.balancer.throttle import Ledger, Throttles
from strait.balancer.window import Window, footprint

# The executor's public face: callers use `executor.Options`, `executor.cancel`, and so on.
__all__ = [
    "Executor",
    "Options",
    "Snapshot",
    "cancel",
    "cancel_moves",
    "new_execution_id",
    "resume",
    "snapshot_of",
    "start",
]

log = logging.getLogger(__name__)

# Errors AlterReplicaLogDirs returns for a replica the broker does not host yet; the preferred dir
# is still recorded, which is all we asked for.
_NOT_HOSTED_YET = {"ReplicaNotAvailableError", "NotLeaderOrFollowerError", "NotLeaderForPartitionError"}


class Executor:
    """Drives one execution to its end (done, failed or cancelled)."""

    def __init__(
        self,
        gateway: Gateway,
        store: StateStore | None,
        execution_id: str,
        plan: Plan,
        options: Options,
        *,
        progress: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        live: Collection[int] | None = None,
    ) -> None:
        self.gateway = gateway
        self.store = store
        self.id = execution_id
        self.plan = plan
        self.options = options
        self.clock = clock
        self.sleep = sleep
        self.moves = {m.id: m for m in plan.moves}
        self.order = order_for_execution(plan.moves)
        saved = dict(progress or {})
        self.states: dict[str, dict[str, Any]] = {k: dict(v) for k, v in dict(saved.get("moves") or {}).items()}
        for m in plan.moves:
            self.states.setdefault(m.id, {"state": PENDING})
        # `live`: the brokers listed at start; no throttle rate is asked of a gone one being drained.
        self.throttles = Throttles(gateway, Ledger.from_dict(saved.get("throttles")), live)
        self.window = Window(options.caps)
        self.keeper = RoomKeeper(plan, lambda brokers: gateway.disk_usage(brokers), clock, options.heartbeat_interval)
        self.status = "running"
        self._cancel = False
        self._last_beat = 0.0
        self._last_cancel_check = 0.0
        self._dirty = True
        self._started_at = time.time()
        # Moves already running when we (re)start hold their window slots.
        for mid, st in self.states.items():
            if st["state"] in ACTIVE and mid in self.moves:
                self.window.add(mid, footprint(self.moves[mid]))

    # ---- public ---------------------------------------------------------------------------

    def request_cancel(self) -> None:
        """Ask the loop to cancel at its next tick (thread-safe: a flag)."""
        self._cancel = True

    def snapshot(self) -> Snapshot:
        return make_snapshot(self.id, self.status, self.plan.moves, self.states)

    def run(self, on_tick: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """Run to the end; returns the final snapshot. Throttles are removed however it ends."""
        try:
            while True:
                self._tick()
                if on_tick is not None:
                    on_tick(self.snapshot())
                if self._finished():
                    break
                self.sleep(self.options.poll_interval)
            self._finish()
        except BaseException as exc:
            # Whatever went wrong, leave no throttle behind. The status stays as it was, so the
            # execution reads as unfinished: once the heartbeat is stale, `cancel` or
            # `execute --resume` deal with the moves still in flight (a caller that catches
            # KeyboardInterrupt can also `request_cancel()` and `run()` again).
            self._safe_clear_throttles()
            try:
                self._save(force=True, error=f"executor stopped: {exc!r}")
            except Exception as save_exc:
                log.error("could not record the failure in the state topic: %s", save_exc)
            raise
        return self.snapshot()

    # ---- the loop -------------------------------------------------------------------------

    def _active(self) -> list[Move]:
        return [self.moves[k] for k, s in self.states.items() if s["state"] in ACTIVE and k in self.moves]

    def _pending(self) -> list[Move]:
        return [m for m in self.order if self.states[m.id]["state"] == PENDING]

    def _finished(self) -> bool:
        return not self._active() and (self.status == "cancelling" or not self._pending())

    def _tick(self) -> None:
        if (
            not self._cancel
            and self.store is not None
            and (self.clock() - self._last_cancel_check >= self.options.heartbeat_interval)
        ):
            # Another process (CLI, REST) may have asked to cancel through the state topic.
            self._last_cancel_check = self.clock()
            self._cancel = self.store.cancel_requested(self.id)
        reassigning = self.gateway.reassignments()
        self._check_inter(reassigning)
        self._check_dirs()
        if self._cancel and self.status == "running":
            self._cancel_in_flight()
            return
        if self.status == "running":
            self._start_moves(reassigning)
        self.throttles.sync(self._active(), self.options.throttle)
        self._save()

    def _beat_due(self) -> bool:
        return self.clock() - self._last_beat >= self.options.heartbeat_interval

    def _set(self, move: Move, state: str, **extra: Any) -> None:
        entry = self.states[move.id]
        entry["state"] = state
        entry.update(extra)
        if state in ACTIVE and "started" not in entry:
            entry["started"] = time.time()
        if state in FINAL:
            entry["finished"] = time.time()
            if move.id in self.window.running:
                self.keeper.moved()
            self.window.remove(move.id)
        self._dirty = True

    def _check_inter(self, reassigning: Mapping[tuple[str, int], Any]) -> None:
        running = [
            m
            for m in self._active()
            if isinstance(m, InterBrokerMove) and self.states[m.id]["state"] == RUNNING and m.key not in reassigning
        ]
        tracking.check_inter(self.gateway, running, self.states, self._set)

    def _check_dirs(self) -> None:
        watched = [m for m in self._active() if isinstance(m, IntraBrokerMove) or self.states[m.id]["state"] == PLACING]
        tracking.check_dirs(self.gateway, watched, self.states, self._set)

    def _start_moves(self, reassigning: Mapping[tuple[str, int], Any]) -> None:
        if self.options.mode == "batch" and self._active():
            return
        active = self._active()
        busy = {m.key for m in active} | set(reassigning)
        candidates = self._pending()
        if not candidates:
            return
        if not active and all(m.key in reassigning for m in candidates):
            # Only partitions another tool is reassigning are left. Their moves are not ours to
            # force or to wait on forever: skip them, leaving the other tool's work alone.
            for m in candidates:
                self._set(
                    m,
                    SKIPPED,
                    error=f"partition {m.topic}-{m.partition} is being reassigned by another tool; left alone",
                )
            return
        room = None
        if len(self.window.running) < self.options.caps.in_flight:
            room = self.keeper.room(active)
        admitted = self.window.admit(candidates, busy, room=room)
        self._note_waiting()
        if not admitted:
            if not active:
                self._skip_without_room()
            return
        current = self.gateway.replicas({m.topic for m in admitted})
        intra_brokers = {m.broker for m in admitted if isinstance(m, IntraBrokerMove)}
        dirs = (
            self.gateway.replica_dirs(intra_brokers, {m.topic for m in admitted if isinstance(m, IntraBrokerMove)})
            if intra_brokers
            else {}
        )
        ready: list[Move] = []
        for m in admitted:
            if already_applied(m, current, dirs):
                # Submitted just before a crash, before its state was saved: nothing to redo.
                self._set(m, DONE, note="found already applied")
                continue
            problem = stale(m, current, dirs)
            if problem is not None:
                self._set(m, SKIPPED, error=problem)
                continue
            ready.append(m)
        if not ready:
            return
        # Throttles first, so no byte of a new move is copied unthrottled.
        self.throttles.sync([*self._active(), *ready], self.options.throttle)
        inter = [m for m in ready if isinstance(m, InterBrokerMove)]
        intra = [m for m in ready if isinstance(m, IntraBrokerMove)]
        preferred = {(m.topic, m.partition, b): d for m in inter for b, d in m.target_dirs.items()}
        if preferred:
            for rk, err in self.gateway.move_dirs(preferred).items():
                if err and err not in _NOT_HOSTED_YET:
                    log.warning("preferred dir for %s-%s on broker %s not recorded: %s", *rk, err)
        if inter:
            errors = self.gateway.reassign({m.key: m.target for m in inter})
            for m in inter:
                err = errors.get(m.key)
                if err:
                    self._set(m, FAILED, error=f"AlterPartitionReassignments: {err}")
                else:
                    self._set(m, RUNNING)
        if intra:
            errors_dirs = self.gateway.move_dirs({(m.topic, m.partition, m.broker): m.target_dir for m in intra})
            for m in intra:
                err = errors_dirs.get((m.topic, m.partition, m.broker))
                if err:
                    self._set(m, FAILED, error=f"AlterReplicaLogDirs: {err}")
                else:
                    self._set(m, RUNNING)

    def _note_waiting(self) -> None:
        """Record why each move the disks held back waits (shown by `status`), clear it once it has room."""
        for move_id, block in self.window.verdicts.items():
            entry = self.states[move_id]
            if block is None:
                if entry.pop("waiting", None) is not None:
                    entry.pop("waiting_on", None)
                    self._dirty = True
                continue
            on = f"{block.disk[0]}:{block.disk[1]}"
            entry["waiting"] = str(block)  # the figures change every tick: saved with the heartbeat
            if entry.get("waiting_on") != on:
                entry["waiting_on"] = on
                self._dirty = True

    def _skip_without_room(self) -> None:
        """Nothing runs, yet the disks hold moves back: nothing of ours will make room, so skip them."""
        for move_id, block in self.window.verdicts.items():
            if block is not None:
                self._set(
                    self.moves[move_id],
                    SKIPPED,
                    error=f"{block}, and no move in flight will make room there (add capacity or make a new plan)",
                )

    def _cancel_in_flight(self) -> None:
        self.status = "cancelling"
        self._dirty = True
        self._save(force=True)
        cancel_moves(self.gateway, self._active(), self.states)
        for m in self._active():
            self._set(m, CANCELLED)
        for m in self._pending():
            self._set(m, CANCELLED, error="not started")

    def _finish(self) -> None:
        self.throttles.clear()
        if self.status == "cancelling":
            self.status = "cancelled"
        else:
            failed = any(s["state"] == FAILED for s in self.states.values())
            self.status = "failed" if failed else "done"
            if self.options.elect_leaders:
                self._elect()
        self._save(force=True)

    def _elect(self) -> None:
        moved = [m for m in self.plan.moves if isinstance(m, InterBrokerMove) and self.states[m.id]["state"] == DONE]
        if not moved:
            return
        leaders = self.gateway.leaders({m.topic for m in moved})
        want = [m.key for m in moved if leaders.get(m.key) != m.target[0]]
        try:
            self.gateway.elect_preferred(want)
        except Exception as exc:  # leadership is a nicety; the data moves are what matter
            log.warning("preferred leader election failed: %s", exc)

    def _safe_clear_throttles(self) -> None:
        try:
            self.throttles.clear()
        except Exception as exc:
            log.error("could not remove throttles (they are in the state topic; `cancel` retries): %s", exc)

    def _save(self, *, force: bool = False, error: str | None = None) -> None:
        if self.store is None:
            return
        if not (force or self._dirty or self._beat_due()):
            return
        progress = {
            "status": self.status,
            "moves": self.states,
            "throttles": self.throttles.ledger.to_dict(),
            "heartbeat": time.time(),
            "owner": f"{socket.gethostname()}:{os.getpid()}",
            "started": self._started_at,
        }
        if error:
            progress["error"] = error
        try:
            self.store.save_progress(self.id, progress)
        except BalanceError as exc:
            if force:
                raise
            log.warning("progress not saved this tick: %s", exc)
            return
        self._dirty = False
        self._last_beat = self.clock()


# ---- entry points for the CLI and the REST layer ---------------------------------------------


def new_execution_id() -> str:
    return uuid.uuid4().hex[:12]


def start(gateway: Gateway, store: StateStore, plan: Plan, options: Options) -> Executor:
    """Validate `plan` against the cluster now, record it, and return an executor ready to `run`.

    The disks' capacities are recorded with the plan: configured ones (the gateway's rules) over
    those the plan was made with, over what the brokers report. Refuses if another execution on
    this cluster is still running (or died without finishing: it must be resumed or cancelled first).
    """
    current = store.current()
    if current is not None and not current.finished():
        state = "running" if current.alive() else "unfinished (its executor is gone)"
        raise ExecutionConflict(
            f"execution {current.id} is {state} on this cluster; use `status`, `cancel`, or `execute --resume`"
        )
    model = settled(gateway.load_model(), gateway.reassignments())
    validate(plan, model)
    # The disk sizes the capacity limit is held against while moves run travel with the plan.
    plan = dataclasses.replace(plan, capacities=with_capacities(plan, model))
    execution_id = new_execution_id()
    store.start(execution_id, plan.to_dict(), options.to_dict())
    return Executor(gateway, store, execution_id, plan, options, live=model.brokers)


def resume(gateway: Gateway, store: StateStore, execution_id: str | None = None) -> Executor:
    """An executor that carries on an unfinished execution from its recorded progress."""
    execution = store.load(execution_id) if execution_id else store.current()
    if execution is None:
        raise BalanceError("no execution to resume on this cluster")
    if execution.finished():
        raise BalanceError(f"execution {execution.id} already ended ({execution.status})")
    if execution.alive() and execution.progress.get("owner") != f"{socket.gethostname()}:{os.getpid()}":
        raise ExecutionConflict(f"execution {execution.id} is still running ({execution.progress.get('owner')})")
    try:
        plan = Plan.from_dict(execution.plan)
    except PlanError as exc:
        raise BalanceError(f"stored plan of execution {execution.id} is unreadable: {exc}") from exc
    live = gateway.load_model().brokers  # a broker gone since the start is asked for no throttle rate
    executor = Executor(
        gateway, store, execution.id, plan, Options.from_dict(execution.options), progress=execution.progress, live=live
    )
    if execution.cancel_requested:
        executor.request_cancel()
    return executor
