"""Carry out a schedule's faults on the real sandbox, fleet, topics and load.

`Injector.start(fault)` strikes and `Injector.end(fault)` undoes; each returns a short account
of what it did. Faults run side by side (one thread each), so sandbox calls that rewrite its
state file are serialised, and a restart holds that lock only to spawn the process: waiting
for a broker to come back must not delay a ZooKeeper restart due meanwhile.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.bench.chaos.load import ChaosLoad
from strait.bench.chaos.schedule import Fault
from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox, process, zookeeper
from strait.sandbox.errors import SandboxError
from strait.sandbox.ports import is_listening
from strait.web.client import ApiError

# A broker killed with -9 recovers its logs before it listens again: on a starved two-core
# machine that takes one to two minutes.
RESTART_TIMEOUT_S = 240.0
IN_SYNC_TIMEOUT_S = 60.0
CONFLICT_WAIT_S = 120.0
WORKER_ACTIVE_S = 60.0


class Injector:
    """Strikes and undoes faults; remembers what is still in effect so it can all be undone."""

    def __init__(
        self,
        *,
        sandbox: Sandbox,
        fleet: Fleet,
        load: ChaosLoad,
        topics: Mapping[str, str],
        clusters: Mapping[str, str],
        coordination_topics: Sequence[str] = (),
    ) -> None:
        self._sandbox = sandbox
        self._fleet = fleet
        self._load = load
        self._topics = topics  # logical name in the schedule -> real topic
        self._clusters = clusters  # "src" / "dst" in the schedule -> sandbox cluster name
        self._sandbox_lock = threading.Lock()
        self._lock = threading.Lock()
        self._held: dict[int, Fault] = {}  # faults started and not yet undone, with their resources
        self._waiting: dict[int, Fault] = {}  # faults waiting for resources held by others
        self._victims: dict[int, str] = {}  # controller-kill fault -> the controller it killed
        # The Kafka store's topics on the destination (coordinator faults strike a broker leading one).
        self._coordination_topics = tuple(coordination_topics)
        self._coordinators: dict[int, int] = {}  # coordinator fault -> the broker it struck

    # ---- dispatch ------------------------------------------------------------------------------

    def start(self, fault: Fault, not_after: float) -> str:
        """Strike; raises on failure. A fault that could not apply returns a 'skipped: ...' account.

        The schedule keeps conflicting faults apart in planned time, but a restart can take
        minutes on a starved machine: a fault whose target or resources are still held by an
        earlier fault waits for it instead of striking on top of it, at most `CONFLICT_WAIT_S`
        and never past `not_after` (a monotonic time: the start of the run's quiet tail).
        """
        started = time.monotonic()
        blocker = self._acquire(fault, min(started + CONFLICT_WAIT_S, not_after))
        if blocker is not None:
            return f"skipped: #{blocker.id} {blocker.kind} {blocker.target} was still in effect"
        waited = time.monotonic() - started
        try:
            detail = self._strike(fault, not_after)
        except BaseException:
            # A topic removed or added through a controller that gave no answer in time may
            # still have been (the store took the write, the answer was lost): it stays in
            # effect, so its end, or `restore`, adds the topic, which is safe to repeat.
            if fault.kind not in ("topic-readd", "topic-add"):
                self._release(fault)
            raise
        if fault.end_s is None or detail.startswith("skipped"):
            self._release(fault)
        return detail + (f" (waited {waited:.0f}s for an earlier fault to be undone)" if waited >= 1 else "")

    def _strike(self, fault: Fault, not_after: float) -> str:
        kind = fault.kind
        if kind == "worker-kill":
            detail = self._kill_worker(fault.target)
        elif kind in ("worker-pause-long", "worker-pause-short"):
            self._fleet.signal(fault.target, signal.SIGSTOP)
            detail = f"SIGSTOP {fault.target}"
        elif kind == "controller-kill":
            detail = self._kill_leader(fault)
        elif kind in ("source-broker-kill", "destination-broker-kill"):
            detail = self._kill_broker(*self._broker(fault), not_after)
        elif kind == "zookeeper-kill":
            with self._sandbox_lock:
                self._sandbox.kill_zookeeper()
            detail = "kill -9 ZooKeeper"
        elif kind == "coordinator-kill":
            detail = self._strike_coordinator(fault, not_after, pause=False)
        elif kind == "coordinator-pause":
            detail = self._strike_coordinator(fault, not_after, pause=True)
        elif kind == "partition-expand":
            detail = self._expand(self._topics[fault.target], fault.count)
        elif kind == "topic-readd":
            detail = self._api("DELETE", f"/topics/{self._topics[fault.target]}")
        elif kind == "topic-add":
            detail = self._api("POST", f"/topics/{self._topics[fault.target]}", {"start": "earliest"})
        elif kind == "burst":
            sent = self._load.burst(self._topics[fault.target], fault.partitions, fault.count)
            if sent:
                detail = f"{fault.count:,} records to each of partitions {sent}"
            else:
                detail = f"skipped: partitions {list(fault.partitions)} do not exist (an expansion was skipped)"
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return detail

    def end(self, fault: Fault) -> str:
        """Undo a fault that is in effect (a skipped one has nothing to undo)."""
        with self._lock:
            if fault.id not in self._held:
                return "skipped: not in effect"
        detail = self._undo(fault)  # on failure the fault stays held: `restore` tries again at the end
        self._release(fault)
        return detail

    def _undo(self, fault: Fault) -> str:
        kind = fault.kind
        if kind == "worker-kill":
            return self._restart_worker(fault.target)
        if kind in ("worker-pause-long", "worker-pause-short"):
            self._fleet.signal(fault.target, signal.SIGCONT)
            return f"SIGCONT {fault.target}"
        if kind == "controller-kill":
            return self._restart_controller(self._victims[fault.id])
        if kind in ("source-broker-kill", "destination-broker-kill"):
            return self._restart_broker(*self._broker(fault))
        if kind == "zookeeper-kill":
            return self._restart_zookeeper()
        if kind == "coordinator-kill":
            return self._restart_broker(self._clusters["dst"], self._coordinators[fault.id])
        if kind == "coordinator-pause":
            broker = self._coordinators[fault.id]
            with self._sandbox_lock:
                self._sandbox.resume_broker(self._clusters["dst"], broker)
            return f"SIGCONT {self._clusters['dst']} broker {broker}"
        if kind in ("topic-readd", "topic-add"):
            return self._api("POST", f"/topics/{self._topics[fault.target]}", {"start": "earliest"})
        raise ValueError(f"fault kind {kind!r} has nothing to undo")

    def restore(self) -> list[str]:
        """Undo every fault still in effect (after an interrupted run); accounts of what was done."""
        with self._lock:
            # (A topic-add is held only when its call failed: it is made again.)
            pending = sorted(
                (f for f in self._held.values() if f.end_s is not None or f.kind == "topic-add"), key=lambda f: f.id
            )
        done = []
        for fault in pending:
            try:
                done.append(f"fault {fault.id} ({fault.kind}): {self.end(fault)}")
            except Exception as exc:
                done.append(f"fault {fault.id} ({fault.kind}): could not undo: {exc}")
        return done

    def _acquire(self, fault: Fault, deadline: float) -> Fault | None:
        """Hold the fault's resources; the fault in the way if they stay taken past `deadline`.

        Waiting faults get the resources in schedule order: a later fault does not overtake an
        earlier one waiting for the same thing.
        """
        with self._lock:
            self._waiting[fault.id] = fault
        try:
            while True:
                with self._lock:
                    ahead = [w for w in self._waiting.values() if w.id < fault.id]
                    blocker = next((f for f in [*self._held.values(), *ahead] if f.contends(fault)), None)
                    if blocker is None:
                        self._held[fault.id] = fault
                        return None
                if time.monotonic() > deadline:
                    return blocker
                time.sleep(0.5)
        finally:
            with self._lock:
                del self._waiting[fault.id]

    def _release(self, fault: Fault) -> None:
        with self._lock:
            self._held.pop(fault.id, None)

    # ---- processes -----------------------------------------------------------------------------

    def struck(self, name: str) -> bool:
        """Whether a fault in effect holds fleet process `name` down (its end starts it again)."""
        with self._lock:
            for fault in self._held.values():
                if fault.kind == "worker-kill" and fault.target == name:
                    return True
                # Which controller a leader kill strikes is known only once it struck.
                if fault.kind == "controller-kill" and self._victims.get(fault.id, name) == name:
                    return True
        return False

    def _kill_worker(self, name: str) -> str:
        if self._fleet.processes[name].poll() is not None:
            return f"skipped: {name} had already exited with {self._fleet.processes[name].returncode}"
        self._fleet.signal(name, signal.SIGKILL)
        self._fleet.wait_exit(name, 30)
        return f"kill -9 {name}"

    def _restart_worker(self, name: str) -> str:
        # Back only once registered: a ZooKeeper kill waiting for this restart must not cut the
        # new process off before it joined (it would give up and exit).
        self._fleet.start_worker(name)
        pid = self._fleet.processes[name].pid
        started = time.monotonic()

        def joined() -> bool:
            # The dead process's registration still reads "active" until its session expires:
            # only the new pid counts.
            workers = self._fleet.api().call("GET", "/workers")
            return any(w["id"] == name and w.get("pid") == pid and w["state"] == "active" for w in workers)

        if wait_until(joined, WORKER_ACTIVE_S, interval_s=0.5):
            return f"restarted {name} (active after {time.monotonic() - started:.1f}s)"
        return f"restarted {name} (not active after {WORKER_ACTIVE_S:.0f}s)"

    def _kill_leader(self, fault: Fault) -> str:
        found: list[str] = []

        def leading() -> bool:
            found.append(self._fleet.leader() or "")
            return bool(found[-1])

        wait_until(leading, 20, interval_s=0.5)
        name = found[-1] if found else ""
        if not name:
            return "skipped: no controller was leading"
        self._fleet.signal(name, signal.SIGKILL)
        self._fleet.wait_exit(name, 30)
        self._victims[fault.id] = name
        return f"kill -9 {name} (the leader)"

    def _restart_controller(self, name: str) -> str:
        try:
            self._fleet.start_controller(name)
        except RuntimeError:
            # Slow to answer on a starved machine, but started: wait a while longer.
            port = self._fleet.ports[name]
            if not wait_until(lambda: is_listening(port), RESTART_TIMEOUT_S):
                raise
            return f"restarted {name} (slow to answer)"
        return f"restarted {name}"

    def _broker(self, fault: Fault) -> tuple[str, int]:
        side, _, broker = fault.target.partition("/")
        return self._clusters[side], int(broker)

    def _kill_broker(self, cluster: str, broker_id: int, not_after: float) -> str:
        # The broker restarted last may still be catching up: killing another one now would
        # leave partitions below min.insync.replicas, which the schedule promises never to do.
        started = time.monotonic()
        patience = max(1.0, min(IN_SYNC_TIMEOUT_S, not_after - started))  # at least one look
        if not wait_until(lambda: self._in_sync(cluster), patience, interval_s=1):
            return f"skipped: {cluster} still had under-replicated partitions after {patience:.0f}s"
        waited = time.monotonic() - started
        with self._sandbox_lock:
            self._sandbox.kill_broker(cluster, broker_id)
        note = f" (waited {waited:.0f}s for in-sync replicas)" if waited > 1 else ""
        return f"kill -9 {cluster} broker {broker_id}{note}"

    def _strike_coordinator(self, fault: Fault, not_after: float, *, pause: bool) -> str:
        """kill -9 or SIGSTOP the destination broker leading a coordination topic (never broker 1)."""
        cluster = self._clusters["dst"]
        started = time.monotonic()
        patience = max(1.0, min(IN_SYNC_TIMEOUT_S, not_after - started))
        if not wait_until(lambda: self._in_sync(cluster), patience, interval_s=1):
            return f"skipped: {cluster} still had under-replicated partitions after {patience:.0f}s"
        waited = time.monotonic() - started
        broker, leads = self._coordinator(cluster)
        with self._sandbox_lock:
            if pause:
                self._sandbox.pause_broker(cluster, broker)
            else:
                self._sandbox.kill_broker(cluster, broker)
        self._coordinators[fault.id] = broker
        note = f" (waited {waited:.0f}s for in-sync replicas)" if waited > 1 else ""
        return f"{'SIGSTOP' if pause else 'kill -9'} {cluster} broker {broker}, leader of {leads}{note}"

    def _coordinator(self, cluster: str) -> tuple[int, str]:
        """The broker to strike and what it leads: the first coordination topic's leader that is not
        broker 1 (the KRaft controller), else the highest broker, which holds a replica of each."""
        metadata = clients.admin(self._sandbox.clusters[cluster].props(), log_level=0).list_topics(timeout=10)
        for topic in self._coordination_topics:
            meta = metadata.topics.get(topic)
            leader = meta.partitions[0].leader if meta is not None and 0 in meta.partitions else -1
            if leader > 1:
                return leader, topic
        highest = max(b.id for b in self._sandbox.clusters[cluster].brokers)
        return highest, "no coordination topic (broker 1 leads them)"

    def _in_sync(self, cluster: str) -> bool:
        metadata = clients.admin(self._sandbox.clusters[cluster].props(), log_level=0).list_topics(timeout=10)
        return all(len(p.isrs) >= len(p.replicas) for t in metadata.topics.values() for p in t.partitions.values())

    def _restart_broker(self, cluster: str, broker_id: int) -> str:
        state = self._sandbox.clusters[cluster].broker(broker_id)

        def spawn() -> None:
            # A short wait (it raises when the broker is not ready yet): readiness is watched
            # below, without holding the lock.
            with self._sandbox_lock, contextlib.suppress(SandboxError):
                self._sandbox.start_broker(cluster, broker_id, timeout_s=0.5)

        def alive() -> bool:
            return state.pid is not None and process.is_ours(state.pid, str(self._sandbox.state_dir))

        return self._restart(f"{cluster} broker {broker_id}", spawn, alive, lambda: is_listening(state.port))

    def _restart_zookeeper(self) -> str:
        zk = self._sandbox.zk
        assert zk is not None

        def spawn() -> None:
            with self._sandbox_lock, contextlib.suppress(SandboxError):
                self._sandbox.start_zookeeper(timeout_s=0.5)

        def alive() -> bool:
            return zk.pid is not None and process.is_ours(zk.pid, str(self._sandbox.state_dir))

        return self._restart("ZooKeeper", spawn, alive, lambda: zookeeper.is_serving(zk.port))

    def _restart(
        self, what: str, spawn: Callable[[], None], alive: Callable[[], bool], ready: Callable[[], bool]
    ) -> str:
        """Start `what` and wait until it serves; start it again only if it died meanwhile."""
        started = time.monotonic()
        spawns = 1
        spawn()
        while time.monotonic() - started < RESTART_TIMEOUT_S:
            if ready():
                again = f", started {spawns} times" if spawns > 1 else ""
                return f"restarted {what} (serving after {time.monotonic() - started:.1f}s{again})"
            # A JVM between fork and exec does not look like ours yet: ask twice before respawning.
            if not alive():
                time.sleep(1)
                if not alive():
                    spawns += 1
                    spawn()
            time.sleep(0.3)
        raise RuntimeError(f"{what} did not serve within {RESTART_TIMEOUT_S:.0f}s")

    # ---- topics --------------------------------------------------------------------------------

    def _expand(self, topic: str, count: int) -> str:
        admin = clients.admin(self._sandbox.clusters[self._clusters["src"]].props(), log_level=0)
        admin.create_partitions([NewPartitions(topic, count)])[topic].result(timeout=60)
        self._load.add(topic, count)
        return f"{topic} now has {count} partitions"

    def _api(self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float = 90.0) -> str:
        """A REST call to any running controller, retried while none answers."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client = self._fleet.api()
            except RuntimeError as exc:
                last = str(exc)
            else:
                try:
                    client.call(method, path, json=body)
                    return f"{method} {path}"
                except ApiError as exc:
                    if exc.status == 404 and method == "DELETE":
                        return f"{method} {path}: already removed"  # an earlier try went through
                    if exc.status in (400, 401, 409):
                        raise
                    last = str(exc)
                finally:
                    client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{method} {path}: no controller answered within {timeout_s:.0f}s ({last})")
            time.sleep(1)
