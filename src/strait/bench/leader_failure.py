"""Leader failure: kill -9 the leading controller; how soon a standby leads, and acts.

Two controllers and two workers copy a live topic on a sandbox, coordinating on ZooKeeper or on
the destination cluster (Kafka store). Each repeat kills the leader with kill -9 and, at once,
adds a topic (one record waiting in it) through the standby's API: only a leader assigns it, so
its first record on the destination marks the new leader acting. Measured from the kill:

- ``leader_s``: the standby's ``/health`` says it leads;
- ``acting_s``: the added topic's record is on the destination (the new leader assigned it and
  a worker copied it).

Both include the session timeout: the old leader is gone for the store only when its session
(ZooKeeper) or its heartbeats (Kafka) have run out. The killed controller then starts again
as the standby of the next repeat.

Run: ``strait bench leader-failure --store kafka|zookeeper [--repeats 3]``.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strait.bench.chaos import readback
from strait.config import ZookeeperConfig
from strait.demo import Fleet, Generator, create_topic, wait_until
from strait.web.client import ApiError, ControllerClient

SESSION_TIMEOUT_S: float = ZookeeperConfig.model_fields["session_timeout_s"].default


def run(
    *,
    store: str,
    repeats: int = 3,
    rate_per_partition: float = 50.0,
    timeout_s: float = 120.0,
    workdir: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The scenario on a sandbox of its own; the result document."""
    from strait.sandbox import Sandbox, SandboxSpec

    root = workdir or Path(tempfile.mkdtemp(prefix="strait-leader-failure-"))
    load_before = [round(x, 2) for x in os.getloadavg()]
    log(f"leader-failure on {store}: work folder {root}, load average {load_before}")
    spec = SandboxSpec(
        clusters=("src", "dst"), brokers=1, log_dirs=1, state_dir=root / "sandbox", zookeeper=store == "zookeeper"
    )
    sandbox = Sandbox.up(spec)
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    fleet = Fleet(
        zookeeper=sandbox.zookeeper if store == "zookeeper" else "",
        clusters={"src": src, "dst": dst},
        routes=[{"name": "bench", "source": "src", "destination": "dst"}],
        workdir=root / "fleet",
        session_timeout_s=SESSION_TIMEOUT_S,
        coordination_cluster="dst" if store == "kafka" else None,
    )
    generator = Generator(src, rate_per_partition=rate_per_partition, timestamp_skew_ms=0)
    runs: list[dict[str, Any]] = []
    try:
        fleet.start_controller("c1")
        if not wait_until(lambda: fleet.leader() == "c1", 60):
            raise RuntimeError(f"c1 did not lead; see {fleet.workdir}")
        fleet.start_controller("c2")
        for name in ("w1", "w2"):
            fleet.start_worker(name)
        if not wait_until(lambda: fleet.workers_in_state("active") == {"w1", "w2"}, 120):
            raise RuntimeError(f"workers not active after 120s; see {fleet.workdir}")
        live = f"lf-live-{uuid.uuid4().hex[:6]}"
        create_topic(src, live, 4)
        generator.add(live, 4)
        generator.start()
        _add(fleet.api(), live)
        if not wait_until(
            lambda: all(n > 0 for n in readback.end_offsets(dst, [(live, p) for p in range(4)]).values()), 120
        ):
            raise RuntimeError(f"{live} was not copied within 120s; see {fleet.workdir}")
        for repeat in range(repeats):
            runs.append(_repeat(fleet, src, dst, repeat, timeout_s, log))
    finally:
        generator.stop()
        fleet.stop()
        sandbox.down(keep=True)
    leader = [r["leader_s"] for r in runs if r.get("leader_s") is not None]
    acting = [r["acting_s"] for r in runs if r.get("acting_s") is not None]
    return {
        "scenario": "leader-failure",
        "store": store,
        "session_timeout_s": SESSION_TIMEOUT_S,
        "repeats": repeats,
        "runs": runs,
        "leader_s": _stats(leader),
        "acting_s": _stats(acting),
        "failed_repeats": sum(1 for r in runs if r.get("acting_s") is None),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "logs": str(root),
    }


def _repeat(
    fleet: Fleet, src: dict[str, str], dst: dict[str, str], repeat: int, timeout_s: float, log: Callable[[str], None]
) -> dict[str, Any]:
    found: list[str] = []

    def leading() -> bool:
        found.append(fleet.leader() or "")
        return bool(found[-1])

    # A leader may stand down for a moment (a store write refused on a loaded machine): wait for one.
    if not wait_until(leading, 60, interval_s=0.5):
        raise RuntimeError(f"no controller leads before repeat {repeat}; see {fleet.workdir}")
    old = found[-1]
    standby = "c2" if old == "c1" else "c1"
    topic = f"lf-added-{uuid.uuid4().hex[:6]}"
    create_topic(src, topic, 1)
    _produce_one(src, topic)
    load = [round(x, 2) for x in os.getloadavg()]
    standby_api = ControllerClient(f"http://127.0.0.1:{fleet.ports[standby]}", timeout_s=30)
    killed = time.monotonic()
    fleet.signal(old, signal.SIGKILL)
    fleet.wait_exit(old, 30)
    _add(standby_api, topic)
    added_s = time.monotonic() - killed
    leader_s: float | None = None
    acting_s: float | None = None
    while time.monotonic() - killed < timeout_s and acting_s is None:
        now = time.monotonic() - killed
        if leader_s is None:
            try:
                if standby_api.call("GET", "/health")["leader"]:
                    leader_s = now
            except ApiError:
                pass
        try:
            if readback.end_offsets(dst, [(topic, 0)])[(topic, 0)] > 0:
                acting_s = now
        except Exception:
            pass  # the destination topic may not be there yet
        time.sleep(0.05)
    result = {
        "repeat": repeat,
        "killed": old,
        "new_leader": standby,
        "load_at_kill": load,
        "topic_added_s": round(added_s, 3),
        "leader_s": None if leader_s is None else round(leader_s, 3),
        "acting_s": None if acting_s is None else round(acting_s, 3),
    }
    log(
        f"  repeat {repeat}: killed {old}; {standby} leads after {result['leader_s']} s, acts after "
        f"{result['acting_s']} s (load {load})"
    )
    fleet.start_controller(old)  # the next repeat's standby
    wait_until(lambda: fleet.leader() == standby, 30)
    return result


def _add(api: ControllerClient, topic: str, timeout_s: float = 60.0) -> None:
    """POST the topic, again while the controller cannot see it or its store is out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            api.call("POST", f"/topics/{topic}", json={"start": "earliest"})
            return
        except ApiError as exc:
            if exc.status not in (404, 503) or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _produce_one(props: dict[str, str], topic: str) -> None:
    from strait import clients

    producer = clients.producer(props)
    producer.produce(topic, value=b"leader-failure", partition=0)
    if producer.flush(30) != 0:
        raise RuntimeError(f"the record to {topic} was not acknowledged within 30s")


def _stats(values: list[float]) -> dict[str, float | None]:
    return {
        "median": round(statistics.median(values), 3) if values else None,
        "max": round(max(values), 3) if values else None,
        "min": round(min(values), 3) if values else None,
    }
