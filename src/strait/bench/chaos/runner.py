"""One chaos run: a sandbox, a fleet and a load, a seeded fault schedule, then every record checked.

The fleet coordinates on the destination cluster (`store="kafka"`, the product's default) or on
the sandbox's ZooKeeper (`store="zookeeper"`); the schedule's coordination faults follow the
store (`schedule.STORE_KINDS`).

The run, in order: topics (replication factor 3, `min.insync.replicas` 2 on 3 brokers), the
fleet (controllers, then workers), steady sequence-numbered load, topics added through the
API; then the schedule plays out under a CPU hog (one thread per fault, so a slow restart does
not stretch the faults after it); then the hog and the load stop, anything still in effect is
undone, the copy gets `catchup_timeout_s` to reach the source's end by its own checkpoints,
the fleet stops cleanly, and the destination is read in full and judged by `check.CopyCheck`.
The verdict counts what the copy holds, not what the fleet says: a run whose copy did not
catch up fails with the missing records named, never passes.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.bench.chaos import readback
from strait.bench.chaos.check import CopyCheck, Key
from strait.bench.chaos.inject import Injector
from strait.bench.chaos.load import ChaosLoad
from strait.bench.chaos.outcome import summarize
from strait.bench.chaos.schedule import STORE_KINDS, Fault, FaultKind, Schedule, ScheduleParams, Store, generate
from strait.bench.chaos.starve import CpuHog, LoadSampler
from strait.bench.chaos.supervise import Supervisor
from strait.config import RouteConfig
from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox, SandboxSpec
from strait.worker.agent import checkpoint_group, copy_mode

Delivery = Literal["at-least-once", "exactly-once"]
ROUTE = "chaos"
LOG_TAIL_LINES = 25
SOURCE, DESTINATION = "src", "dst"


@dataclass(frozen=True)
class ChaosOptions:
    """What `strait bench chaos` runs."""

    duration_s: float
    seed: int
    delivery: Delivery = "at-least-once"
    brokers: int = 3
    workers: int = 3
    controllers: int = 2
    hog: bool = True
    hog_processes: int | None = None  # default: one per core
    topics: int = 3
    partitions: int = 4
    rate_per_partition: float = 50.0
    record_size: int = 100
    session_timeout_s: float = 6.0
    catchup_timeout_s: float = 300.0
    # Where the fleet coordinates: on the destination cluster, or on the sandbox's ZooKeeper.
    store: Store = "kafka"
    # The kinds of fault to draw; None: every kind of the store (`STORE_KINDS`).
    kinds: frozenset[FaultKind] | None = None
    # The route's `copy` (record, batch); None leaves the route's default.
    copy: Literal["record", "batch"] | None = None

    def schedule_params(self, brokers: int) -> ScheduleParams:
        return ScheduleParams(
            duration_s=self.duration_s,
            seed=self.seed,
            workers=self.workers,
            controllers=self.controllers,
            brokers=brokers,
            topics=tuple(f"t{n}" for n in range(self.topics)),
            partitions=self.partitions,
            session_timeout_s=self.session_timeout_s,
            kinds=self.kinds if self.kinds is not None else frozenset(STORE_KINDS[self.store]),
            store=self.store,
        )


def run(
    options: ChaosOptions, *, workdir: Path, sandbox: Sandbox | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the chaos benchmark; the result document (see `outcome.summarize`).

    Without `sandbox`, one with clusters `src` and `dst` of `options.brokers` brokers is started
    in `workdir` and stopped at the end (its logs kept). A given sandbox must have those two
    clusters (and a ZooKeeper on the ZooKeeper store); its brokers and ZooKeeper are killed and
    restarted like the fleet's processes.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    own = sandbox is None
    if sandbox is None:
        zookeeper = options.store == "zookeeper"
        log(
            f"starting the sandbox ({'ZooKeeper, ' if zookeeper else ''}clusters src and dst of "
            f"{options.brokers} brokers) in {workdir} ..."
        )
        spec = SandboxSpec(
            clusters=(SOURCE, DESTINATION),
            brokers=options.brokers,
            log_dirs=1,
            state_dir=workdir / "sandbox",
            zookeeper=zookeeper,
        )
        sandbox = Sandbox.up(spec)
    try:
        return _Run(options, sandbox, workdir, log).execute()
    finally:
        if own:
            sandbox.down(keep=True)


class _Run:
    def __init__(self, options: ChaosOptions, sandbox: Sandbox, workdir: Path, log: Callable[[str], None]) -> None:
        self.options = options
        self.sandbox = sandbox
        self.workdir = workdir
        self.log = log
        self.brokers = min(len(sandbox.clusters[SOURCE].brokers), len(sandbox.clusters[DESTINATION].brokers))
        self.schedule: Schedule = generate(options.schedule_params(self.brokers))
        self.copy_mode: str | None = None
        tag = uuid.uuid4().hex[:6]  # fresh topics per run, so several runs can share a sandbox
        params = self.schedule.params
        self.topics = {name: f"chaos-{tag}-{name}" for name in (*params.topics, *params.late_topics)}
        self.src = sandbox.clusters[SOURCE].props()
        self.dst = sandbox.clusters[DESTINATION].props()
        self.replicas = min(3, self.brokers)
        self.min_insync = 2 if self.brokers >= 3 else 1
        self.executed: list[dict[str, Any]] = []
        self._executed_lock = threading.Lock()
        self._stop = threading.Event()
        self.chaos_started_us = 0  # wall clock when the schedule began: places missing records in time

    def execute(self) -> dict[str, Any]:
        started_at = dt.datetime.now(dt.UTC)
        o = self.options
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.schedule.counts().items())
        self.log(
            f"schedule: {len(self.schedule.faults)} faults over {o.duration_s:.0f}s, seed {o.seed}, "
            f"coordination on {o.store}: {kinds}"
        )
        self._create_topics()
        route = {
            "name": ROUTE,
            "source": "src",
            "destination": "dst",
            "delivery": o.delivery,
            "replication_factor": self.replicas,
            **({"copy": o.copy} if o.copy is not None else {}),
        }
        # What the route's copy resolves to, recorded with the run (the default changes with the code).
        self.copy_mode = copy_mode(RouteConfig.model_validate(route))[0]
        fleet = Fleet(
            zookeeper=self.sandbox.zookeeper if o.store == "zookeeper" else "",
            clusters={"src": self.src, "dst": self.dst},
            routes=[route],
            workdir=self.workdir / "fleet",
            session_timeout_s=o.session_timeout_s,
            coordination_cluster="dst" if o.store == "kafka" else None,
        )
        load = ChaosLoad(self.src, rate_per_partition=o.rate_per_partition, size=o.record_size)
        hog = CpuHog(o.hog_processes)
        sampler = LoadSampler()
        injector = Injector(
            sandbox=self.sandbox,
            fleet=fleet,
            load=load,
            topics=self.topics,
            clusters={"src": SOURCE, "dst": DESTINATION},
            coordination_topics=_coordination_topics(fleet),
        )
        supervisor = Supervisor(fleet, injector.struck, log=self.log)
        try:
            self._start_fleet(fleet)
            for name in self.topics.values():
                load.add(name, self.schedule.params.partitions)
            load.start()
            for logical in self.schedule.params.topics:
                fleet.api().add_topic(self.topics[logical], start="earliest")
            self._wait_flowing()
            if o.hog:
                hog.start()
                self.log(f"CPU hog: {hog.count} busy-loop processes, pids {hog.pids}")
            sampler.start()
            supervisor.start()
            self._play(injector)
            hog.stop()
            load_average = sampler.stop()
            restored = injector.restore()
            unacknowledged = load.stop()
            self.log(f"load stopped: {load.produced():,} records acknowledged by the source, {load.failed} failed")
            exits = self._exits(fleet)
            catch_up = self._catch_up()
            supervisor.stop()
            fleet.stop()
            self.log("fleet stopped; reading the copy ...")
            verdicts, read = self._judge(load.acked())
        finally:
            self._stop.set()
            supervisor.stop()
            hog.stop()
            injector.restore()
            load.stop(flush_timeout_s=10)
            fleet.stop()
        return summarize(
            options=asdict(o),
            schedule=self.schedule,
            executed=self.executed,
            topics=self.topics,
            shape={
                "brokers": self.brokers,
                "workers": o.workers,
                "controllers": o.controllers,
                "replication_factor": self.replicas,
                "min_insync_replicas": self.min_insync,
                "session_timeout_s": o.session_timeout_s,
                "store": o.store,
                "copy_mode": self.copy_mode,
                "hog_processes": hog.count if o.hog else 0,
                "partitions": readback.partition_counts(self.src, self.topics.values()),
            },
            load={
                "produced": load.produced(),
                "failed": load.failed,
                "crash": load.crash,
                "unacknowledged_at_stop": unacknowledged,
                "errors": load.errors[:5],
                "rate_per_partition": o.rate_per_partition,
                "record_size": o.record_size,
            },
            load_average=load_average,
            catch_up=catch_up,
            read=read,
            verdicts=verdicts,
            restored=restored,
            exits=exits,
            restarts=supervisor.restarts,
            started_at=started_at,
            chaos_started_us=self.chaos_started_us,
            workdir=str(self.workdir),
        )

    # ---- set-up ----------------------------------------------------------------------------------

    def _create_topics(self) -> None:
        configs = {"min.insync.replicas": str(self.min_insync)}
        partitions = self.schedule.params.partitions
        for logical, name in self.topics.items():
            _create_topic(self.src, name, partitions, self.replicas, configs)
            # The late topics' copies are left to Strait to create (with the route's replication factor).
            if logical not in self.schedule.params.late_topics:
                _create_topic(self.dst, name, partitions, self.replicas, configs)

    def _start_fleet(self, fleet: Fleet) -> None:
        controllers = [f"c{n}" for n in range(1, self.options.controllers + 1)]
        workers = [f"w{n}" for n in range(1, self.options.workers + 1)]
        fleet.start_controller(controllers[0])
        if not wait_until(lambda: fleet.leader() == controllers[0], 60):
            raise RuntimeError(f"controller {controllers[0]} did not lead; see {fleet.workdir}")
        for name in controllers[1:]:
            fleet.start_controller(name)
        for name in workers:
            fleet.start_worker(name)
        if not wait_until(lambda: fleet.workers_in_state("active") == set(workers), 120):
            raise RuntimeError(f"workers not all active after 120s: {fleet.api().call('GET', '/workers')}")
        self.log(f"fleet up: controllers {controllers} (leader {controllers[0]}), workers {workers}")

    def _wait_flowing(self) -> None:
        params = self.schedule.params
        keys = [(self.topics[t], p) for t in params.topics for p in range(params.partitions)]
        if not wait_until(lambda: all(n > 0 for n in readback.end_offsets(self.dst, keys).values()), 120):
            self.log("warning: not every partition was copied within 120s; starting the faults anyway")

    # ---- the schedule ----------------------------------------------------------------------------

    def _play(self, injector: Injector) -> None:
        """Every fault in its own thread, started and undone on time; returns after the duration."""
        t0 = time.monotonic()
        self.chaos_started_us = int(time.time() * 1_000_000)
        self.log(f"chaos for {self.options.duration_s:.0f}s (faults until {self.schedule.params.horizon_s:.0f}s)")
        threads = [
            threading.Thread(target=self._drive, args=(injector, fault, t0), name=f"fault-{fault.id}", daemon=True)
            for fault in self.schedule.faults
        ]
        for thread in threads:
            thread.start()
        self._stop.wait(max(0.0, t0 + self.options.duration_s - time.monotonic()))
        for thread in threads:
            thread.join(timeout=max(1.0, t0 + self.options.duration_s + 300 - time.monotonic()))
        # Whatever is still waiting now takes no further step: `Injector.restore` undoes the rest.
        self._stop.set()

    def _drive(self, injector: Injector, fault: Fault, t0: float) -> None:
        if self._stop.wait(max(0.0, t0 + fault.start_s - time.monotonic())):
            return
        not_after = t0 + self.schedule.params.horizon_s
        struck = self._step(lambda f: injector.start(f, not_after), fault, "start", fault.start_s, t0)
        if fault.end_s is None:
            return
        # A fault that struck late (it waited for an earlier one) still lasts as long as planned:
        # a long pause must stay beyond the session timeout.
        late = max(0.0, struck - fault.start_s)
        if self._stop.wait(max(0.0, t0 + fault.end_s + late - time.monotonic())):
            return  # an interrupted run undoes it in `Injector.restore`
        self._step(injector.end, fault, "end", fault.end_s, t0)

    def _step(self, action: Callable[[Fault], str], fault: Fault, name: str, planned_s: float, t0: float) -> float:
        """Carry out one step and record it; returns when it finished (seconds after `t0`)."""
        at = time.monotonic() - t0
        try:
            detail = action(fault)
            outcome = "skipped" if detail.startswith("skipped") else "ok"
        except Exception as exc:
            detail, outcome = f"{type(exc).__name__}: {exc}", "error"
        took = time.monotonic() - t0 - at
        entry = {
            "fault": fault.id,
            "kind": fault.kind,
            "target": fault.target,
            "action": name,
            "planned_s": planned_s,
            "at_s": round(at, 2),  # when the step began
            "took_s": round(took, 2),
            "done_s": round(at + took, 2),  # when it had taken effect
            "outcome": outcome,
            "detail": detail,
        }
        with self._executed_lock:
            self.executed.append(entry)
        self.log(f"[{at:7.1f}s] #{fault.id} {fault.kind} {name}: {detail}" + (f" ({took:.1f}s)" if took >= 1 else ""))
        return at + took

    # ---- the end ---------------------------------------------------------------------------------

    def _exits(self, fleet: Fleet) -> dict[str, dict[str, Any]]:
        """Fleet processes not running although every fault was undone: they exited by themselves.

        The end of each one's log goes into the result, which outlives the work folder.
        """
        out: dict[str, dict[str, Any]] = {}
        for name, process in fleet.processes.items():
            code = process.poll()
            if code is not None:
                log = fleet.workdir / f"{name}.log"
                tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
                out[name] = {"code": code, "log_tail": tail}
        return out

    def _keys(self) -> list[Key]:
        counts = readback.partition_counts(self.src, self.topics.values())
        return [(t, p) for t, n in sorted(counts.items()) for p in range(n)]

    def _catch_up(self) -> dict[str, Any]:
        """Wait until every partition's checkpoint reached the source's end (or the time is up)."""
        started = time.monotonic()
        group = checkpoint_group(ROUTE)
        keys = self._keys()
        lagging: dict[Key, int] = {}
        last_report = 0.0
        while time.monotonic() - started < self.options.catchup_timeout_s:
            try:
                lagging = readback.lag(self.src, group, keys)
            except Exception as exc:  # the source answers slowly right after the chaos
                self.log(f"catch-up check failed: {exc}")
                lagging = {k: -1 for k in keys}
            if not lagging:
                break
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                self.log(f"catching up: {len(lagging)} partitions behind, {sum(lagging.values()):,} records")
            time.sleep(2)
        waited = time.monotonic() - started
        self.log(("caught up" if not lagging else "did NOT catch up") + f" after {waited:.0f}s")
        return {
            "caught_up": not lagging,
            "waited_s": round(waited, 1),
            "timeout_s": self.options.catchup_timeout_s,
            "lagging": {f"{t}/{p}": n for (t, p), n in sorted(lagging.items())},
        }

    def _judge(self, acked: dict[Key, bytes]) -> tuple[list[Any], dict[str, Any]]:
        exactly_once = self.options.delivery == "exactly-once"
        check = CopyCheck(acked)
        dst_counts = readback.partition_counts(self.dst, self.topics.values())
        started = time.monotonic()
        incomplete = readback.read_copy(
            self.dst,
            dst_counts,
            check,
            read_committed=exactly_once,
            # Reading runs at some 10,000 records/s on a loaded machine; with read_committed a
            # transaction a killed worker left open holds the reader until the broker aborts it.
            timeout_s=180 + sum(len(flags) for flags in acked.values()) / 2_000 + (120 if exactly_once else 0),
            progress=self.log,
        )
        read_s = time.monotonic() - started
        missing = check.missing()
        keys = sorted(set(acked))
        checkpoints = readback.checkpoints(self.src, checkpoint_group(ROUTE), keys)
        located = {key: readback.locate(self.src, key, set(seqs)) for key, seqs in missing.items()}
        read = {
            "isolation": "read_committed" if exactly_once else "read_uncommitted",
            "seconds": round(read_s, 1),
            "destination_partitions": dst_counts,
            "incomplete_partitions": [f"{t}/{p}" for t, p in sorted(incomplete)],
            "foreign_records": check.foreign,
        }
        return check.verdicts(checkpoints=checkpoints, located=located), read


def _coordination_topics(fleet: Fleet) -> tuple[str, ...]:
    """The Kafka store's topics on the destination, the state topic first (none on ZooKeeper)."""
    kafka = fleet.coordination().get("kafka")
    return (f"{kafka['prefix']}.state", f"{kafka['prefix']}.live") if kafka else ()


def _create_topic(props: dict[str, str], topic: str, partitions: int, replicas: int, configs: dict[str, str]) -> None:
    admin = clients.admin(props, log_level=0)
    admin.create_topics([NewTopic(topic, partitions, replicas, config=configs)])[topic].result(timeout=60)
    # Every partition needs a leader before the first record is produced to it.
    if not wait_until(
        lambda: all(p.leader >= 0 for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()),
        60,
    ):
        raise RuntimeError(f"topic {topic} has partitions without a leader after 60s")
