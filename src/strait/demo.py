"""Strait's main job, runnable end to end on one machine, and the pieces it is built from.

`run` brings up a sandbox (clusters `src` and `dst`), one controller and two workers as real
processes, a generator producing to a few topics, adds the topics through the REST API, and
prints the API's URL and a live one-line status until Ctrl-C; then it stops everything.

`Fleet` (controller and worker processes on a private ZooKeeper root or Kafka topic prefix) and `Generator`
(sequence-numbered records) are also what the integration tests drive, so the demo shows
exactly what is tested.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.coordination.kafka import START_TIMEOUT_S
from strait.sandbox.ports import free_port
from strait.web.client import ApiError, ControllerClient

# A generated record: value "<partition>:<seq>:<timestamp ms>", header seq=<seq>, and that
# timestamp, so a verifier can check loss, duplicates, order, headers and timestamps from the
# copy alone. The timestamp lies a minute in the past, so a copy that stamped records with its
# own clock would show; it stays recent so that source retention does not delete the records.
TIMESTAMP_SKEW_MS = 60_000


def encode_record(
    partition: int, seq: int, *, skew_ms: int = TIMESTAMP_SKEW_MS
) -> tuple[bytes, list[tuple[str, str | bytes | None]], int]:
    """(value, headers, timestamp ms) of record `seq` of a partition, `skew_ms` in the past."""
    timestamp = int(time.time() * 1000) - skew_ms - (seq % 1000 if skew_ms else 0)
    return f"{partition}:{seq}:{timestamp}".encode(), [("seq", str(seq).encode())], timestamp


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll `predicate` until it holds or `timeout_s` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return True
        time.sleep(interval_s)
    return False


def create_topic(
    props: Mapping[str, Any], topic: str, partitions: int, configs: Mapping[str, str] | None = None
) -> None:
    admin = clients.admin(props)
    future = admin.create_topics([NewTopic(topic, partitions, 1, config=dict(configs or {}))])[topic]
    future.result(timeout=30)


class Produced(dict[int, int]):
    """Records a :class:`Generator` had acknowledged, per partition; ``failed`` names, per
    partition, the sequence numbers whose delivery failed (the source never held them)."""

    failed: dict[int, set[int]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failed = {}


class Generator:
    """Produces sequence-numbered records to every partition of some topics at a steady rate."""

    def __init__(
        self, props: Mapping[str, Any], *, rate_per_partition: float = 50.0, timestamp_skew_ms: int = TIMESTAMP_SKEW_MS
    ) -> None:
        # Tests backdate timestamps to prove they are preserved; the demo stamps records now so
        # that its end-to-end latency figures mean something.
        self._skew_ms = timestamp_skew_ms
        # A short metadata refresh lets the generator see partitions added to a topic quickly.
        self._producer = clients.producer(
            props, **{"enable.idempotence": True, "linger.ms": 5, "topic.metadata.refresh.interval.ms": 1000}
        )
        self._rate = rate_per_partition
        self._topics: dict[str, int] = {}
        self._next: dict[tuple[str, int], int] = {}
        self._acked: dict[tuple[str, int], int] = {}
        # Sequence numbers whose delivery failed: never in the source, so no copy can hold them
        # (seen once in ~10 runs: the first batch to a topic created a moment before failed while
        # the next one, sequence 2 on, was accepted).
        self._failed: dict[tuple[str, int], set[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="generator", daemon=True)
        self.errors: list[str] = []

    def add(self, topic: str, partitions: int) -> None:
        with self._lock:
            self._topics[topic] = partitions
            self._paused.discard(topic)

    def pause(self, topic: str) -> None:
        with self._lock:
            self._paused.add(topic)

    def start(self) -> Generator:
        self._thread.start()
        return self

    def produced(self, topic: str) -> Produced:
        """Acknowledged records per partition of `topic`: sequence numbers 0..n+f-1 except the f
        whose delivery failed (``Produced.failed``)."""
        with self._lock:
            counts = Produced({p: n for (t, p), n in self._acked.items() if t == topic})
            counts.failed = {p: set(seqs) for (t, p), seqs in self._failed.items() if t == topic}
            return counts

    def total(self) -> int:
        with self._lock:
            return sum(self._acked.values())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._producer.flush(30)

    def _run(self) -> None:
        tick = 0.05
        while not self._stop.is_set():
            started = time.monotonic()
            with self._lock:
                topics = {t: n for t, n in self._topics.items() if t not in self._paused}
            per_tick = max(1, round(self._rate * tick))
            for topic, partitions in topics.items():
                for partition in range(partitions):
                    for _ in range(per_tick):
                        self._send(topic, partition)
            self._producer.poll(0)
            time.sleep(max(0.0, tick - (time.monotonic() - started)))

    def _send(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        seq = self._next.get(key, 0)
        value, headers, timestamp = encode_record(partition, seq, skew_ms=self._skew_ms)

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                with self._lock:
                    self.errors.append(str(err))
                    self._failed.setdefault(key, set()).add(seq)
                return
            with self._lock:
                self._acked[key] = self._acked.get(key, 0) + 1

        try:
            self._producer.produce(
                topic,
                value=value,
                key=str(seq).encode(),
                partition=partition,
                headers=headers,
                timestamp=timestamp,
                on_delivery=delivered,
            )
        except BufferError:
            self._producer.poll(0.1)
            return
        except KafkaException as exc:
            self.errors.append(str(exc))
            return
        self._next[key] = seq + 1


@dataclass
class Fleet:
    """Controllers and workers as real processes sharing one generated configuration file."""

    zookeeper: str
    clusters: Mapping[str, Mapping[str, Any]]
    routes: Sequence[Mapping[str, Any]]
    workdir: Path
    root: str = field(default_factory=lambda: f"/strait-{uuid.uuid4().hex[:8]}")
    refresh_interval_s: float = 1.0
    session_timeout_s: float = 3.0
    api_token: str | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    # Coordinate on this cluster of `clusters` (topics prefixed after `root`) instead of ZooKeeper.
    coordination_cluster: str | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "strait.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config()))

    def config(self) -> dict[str, Any]:
        return {
            "coordination": self.coordination(),
            "clusters": {name: dict(props) for name, props in self.clusters.items()},
            "routes": [dict(r) for r in self.routes],
            "controller": {
                "listen": "127.0.0.1:0",
                "api_token": self.api_token,
                "refresh_interval_s": self.refresh_interval_s,
            },
            "worker": {"commit_interval_s": 0.5, "stats_interval_s": 1.0, "drain_timeout_s": 20.0},
        }

    def coordination(self) -> dict[str, Any]:
        """The configuration's coordination section."""
        if self.coordination_cluster is not None:
            prefix = "__" + self.root.strip("/").replace("/", ".")
            kafka = {
                "cluster": self.coordination_cluster,
                "prefix": prefix,
                "session_timeout_s": self.session_timeout_s,
            }
            return {"kafka": kafka}
        return {
            "zookeeper": {"connect": self.zookeeper, "root": self.root, "session_timeout_s": self.session_timeout_s}
        }

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it open
        process = subprocess.Popen(
            [sys.executable, "-m", "strait", *args, "--config", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            # Own session: a Ctrl-C meant for the demo must not stop controllers and workers
            # all at once; `stop` shuts them down in order.
            start_new_session=True,
        )
        log.close()
        self.processes[name] = process
        return process

    def start_controller(self, name: str = "c1") -> str:
        """Start a controller; returns its API URL."""
        port = self.ports.setdefault(name, free_port())
        self._spawn(name, ["controller", "--id", name, "--listen", f"127.0.0.1:{port}"])
        url = f"http://127.0.0.1:{port}"
        # A controller waits for a coordination cluster too busy to answer, then has its API up.
        ready_s = START_TIMEOUT_S + 30
        if not wait_until(lambda: bool(ControllerClient(url, timeout_s=2).call("GET", "/health")), ready_s):
            raise RuntimeError(f"controller {name} did not start; see {self.workdir / (name + '.log')}")
        return url

    def start_worker(self, name: str, pool: str | None = None) -> None:
        self._spawn(name, ["worker", "--id", name, *(["--pool", pool] if pool else [])])

    def api(self, name: str | None = None) -> ControllerClient:
        """A client of controller `name`, or of any running controller."""
        names = [name] if name else [n for n, p in self.processes.items() if n in self.ports and p.poll() is None]
        if not names:
            raise RuntimeError("no controller is running")
        return ControllerClient(f"http://127.0.0.1:{self.ports[names[0]]}", token=self.api_token)

    def leader(self) -> str | None:
        for name, port in self.ports.items():
            if self.processes[name].poll() is None:
                with contextlib.suppress(ApiError):
                    health = ControllerClient(f"http://127.0.0.1:{port}", timeout_s=2).call("GET", "/health")
                    if health["leader"]:
                        return name
        return None

    def workers_in_state(self, state: str) -> set[str]:
        return {w["id"] for w in self.api().call("GET", "/workers") if w["state"] == state}

    def signal(self, name: str, signum: int) -> None:
        self.processes[name].send_signal(signum)

    def wait_exit(self, name: str, timeout_s: float = 30.0) -> int:
        return self.processes[name].wait(timeout=timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop workers first (they drain while a controller still hands their partitions
        over), then controllers (they release leadership)."""
        workers = [p for n, p in self.processes.items() if n not in self.ports]
        controllers = [p for n, p in self.processes.items() if n in self.ports]
        for group in (workers, controllers):
            for process in group:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in group:
                try:
                    process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _status_line(fleet: Fleet, generator: Generator) -> str:
    workers = fleet.api().call("GET", "/workers")
    copied = sum(w["records_copied"] for w in workers)
    lag = sum(w["lag"] for w in workers)
    active = sum(1 for w in workers if w["state"] == "active")
    leader = fleet.leader() or "none"
    return (
        f"produced {generator.total():>9,}  copied {copied:>9,}  lag {lag:>7,}  "
        f"workers active {active}/{len(workers)}  leader {leader}"
    )


def _add_when_listed(api: ControllerClient, topic: str, timeout_s: float = 60.0) -> None:
    """Add ``topic`` through the API, asking again while the controller cannot see it yet: a topic
    just created can be missing from the broker's metadata for a moment (KRaft publishes it
    asynchronously, for longer on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            api.add_topic(topic)
            return
        except ApiError as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def _log_to(path: Path) -> None:
    """The demo process's own log goes to ``path``; the terminal shows only Strait's warnings,
    not librdkafka's lines (such as a transaction coordinator still loading at start)."""
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_terminal = logging.StreamHandler()
    to_terminal.setLevel(logging.WARNING)
    to_terminal.addFilter(lambda record: not record.name.startswith("strait.librdkafka"))
    logging.basicConfig(level=logging.INFO, handlers=[to_file, to_terminal], force=True)


def run(*, workers: int = 2, topics: int = 3) -> int:
    """The demo; returns the process exit status."""
    from strait.sandbox import Sandbox, SandboxSpec

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # stop cleanly when terminated, as on Ctrl-C
    workdir = Path(tempfile.mkdtemp(prefix="strait-demo-"))
    _log_to(workdir / "demo.log")
    print(f"starting sandbox (Kafka clusters src and dst; Strait coordinates on dst) in {workdir} ...", flush=True)
    spec = SandboxSpec(clusters=("src", "dst"), brokers=1, log_dirs=2, state_dir=workdir / "sandbox", zookeeper=False)
    sandbox = Sandbox.up(spec)
    fleet: Fleet | None = None
    generator: Generator | None = None
    try:
        src = sandbox.clusters["src"].props()
        fleet = Fleet(
            zookeeper="",
            clusters={"src": src, "dst": sandbox.clusters["dst"].props()},
            routes=[{"name": "src-dst", "source": "src", "destination": "dst"}],
            workdir=workdir / "fleet",
            coordination_cluster="dst",
        )
        url = fleet.start_controller("controller-1")
        for n in range(workers):
            fleet.start_worker(f"worker-{n + 1}")
        generator = Generator(src, rate_per_partition=100, timestamp_skew_ms=0).start()
        for n in range(topics):
            topic = f"demo-{n + 1}"
            create_topic(src, topic, partitions=4)
            generator.add(topic, 4)
            _add_when_listed(fleet.api(), topic)
        print(f"controller API: {url}   (OpenAPI: {url}/docs, e.g. curl {url}/workers)")
        print(f"dashboard: {url}/ui   metrics: {url}/metrics")
        print(f"logs: {fleet.workdir} (this process: {workdir / 'demo.log'}); Ctrl-C stops everything", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                with contextlib.suppress(ApiError):
                    print("\r" + _status_line(fleet, generator), end="", flush=True)
                time.sleep(1)
        print("\nstopping ...", flush=True)
        return 0
    finally:
        # Children run in their own sessions, so Ctrl-C reached only us: stop them in order.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if generator is not None:
                generator.stop()
            if fleet is not None:
                fleet.stop()
            sandbox.down()
        finally:
            signal.signal(signal.SIGINT, previous)
        print("stopped.")
