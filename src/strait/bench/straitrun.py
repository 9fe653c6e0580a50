"""Strait under benchmark: one controller and N worker processes from a rendered YAML config.

The processes are the same commands an operator runs (``python -m strait controller|worker``),
each in its own session so a benchmark's Ctrl-C does not reach them before the harness stops
them in order, and each stopped by the pid recorded here (after checking that the pid's
command line still names this run's config file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import yaml

from strait.sandbox import ports, process
from strait.web.client import ApiError, ControllerClient


def coordination_section(
    store: str, *, zookeeper: str | None, root: str, session_timeout_s: float, cluster: str = "dst"
) -> dict[str, Any]:
    """The configuration's ``coordination``: on ZooKeeper under ``root``, or on Kafka ``cluster``
    with topics named after ``root`` (so runs sharing a sandbox do not share a fleet)."""
    if store == "kafka":
        prefix = "__" + root.strip("/").replace("/", ".")
        return {"kafka": {"cluster": cluster, "prefix": prefix, "session_timeout_s": session_timeout_s}}
    if store != "zookeeper" or zookeeper is None:
        raise ValueError(f"store {store!r}: use kafka, or zookeeper with a ZooKeeper to connect to")
    return {"zookeeper": {"connect": zookeeper, "root": root, "session_timeout_s": session_timeout_s}}


def render_config(
    *,
    zookeeper: str | None,
    root: str,
    src_props: Mapping[str, Any],
    dst_props: Mapping[str, Any],
    listen: str,
    api_token: str,
    session_timeout_s: float,
    delivery: str | None = None,
    groups: Mapping[str, Any] | None = None,
    copy: str | None = None,
    store: str = "zookeeper",
) -> dict[str, Any]:
    """The configuration every node of the run reads (``delivery``: the route's, when not the
    default; ``groups``: the route's consumer-group sync, when wanted; ``copy``: the route's
    copy mode, batch or record, when not the default; ``store``: where the fleet coordinates,
    zookeeper or kafka, on ``dst``)."""
    route: dict[str, Any] = {"name": "bench", "source": "src", "destination": "dst"}
    if delivery is not None:
        route["delivery"] = delivery
    if copy is not None:
        route["copy"] = copy
    if groups is not None:
        route["groups"] = dict(groups)
    return {
        "coordination": coordination_section(
            store, zookeeper=zookeeper, root=root, session_timeout_s=session_timeout_s
        ),
        "clusters": {"src": dict(src_props), "dst": dict(dst_props)},
        "routes": [route],
        "controller": {"listen": listen, "api_token": api_token, "refresh_interval_s": 1.0},
    }


# The processes' log level: WARNING keeps the logs of long runs small; STRAIT_BENCH_LOG_LEVEL=INFO
# shows when each partition started, to find where a figure's time went.
_LOG_LEVEL = os.environ.get("STRAIT_BENCH_LOG_LEVEL", "WARNING")


class StraitReplicator:
    """A Strait controller and workers copying ``src`` to ``dst`` of a sandbox."""

    name = "strait"

    def __init__(
        self,
        *,
        zookeeper: str | None,
        src_props: Mapping[str, Any],
        dst_props: Mapping[str, Any],
        workdir: Path,
        workers: int,
        compression: str = "none",
        session_timeout_s: float = 4.0,
        start_timeout_s: float = 60.0,
        delivery: str | None = None,
        groups: Mapping[str, Any] | None = None,
        copy: str | None = None,
        store: str = "zookeeper",
    ) -> None:
        self.parallelism = workers
        self.store = store
        self.delivery = delivery
        self.copy = copy
        self._workers = workers
        self._compression = compression
        self._session_timeout_s = session_timeout_s
        self._start_timeout_s = start_timeout_s
        self._workdir = workdir.resolve()
        self._run_id = uuid.uuid4().hex[:8]
        self._token = uuid.uuid4().hex
        self._port = ports.free_port()
        dst = dict(dst_props)
        if compression != "none":
            dst["compression.type"] = compression  # cluster properties reach the worker's producer
        # Where the workers publish their stats reports (strait.bench.worker_stages reads them).
        self.zookeeper, self.root = zookeeper, f"/strait-bench-{self._run_id}"
        self._config = render_config(
            zookeeper=zookeeper,
            root=self.root,
            src_props=src_props,
            dst_props=dst,
            listen=f"127.0.0.1:{self._port}",
            api_token=self._token,
            session_timeout_s=session_timeout_s,
            delivery=delivery,
            groups=groups,
            copy=copy,
            store=store,
        )
        self._config_path = self._workdir / f"strait-{self._run_id}.yaml"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        # 30 s, as the CLI's client: a POST waits up to 5 s for its destination topic, after up to
        # 5 s for a source topic created a moment ago (at load 72 a 10 s timeout cut one off).
        self._api = ControllerClient(f"http://127.0.0.1:{self._port}", token=self._token, timeout_s=30)
        self.posted_at: dict[str, float] = {}  # topic -> when add_topics sent its POST (time.time())

    @property
    def _marker(self) -> str:
        return str(self._config_path)

    @property
    def worker_names(self) -> list[str]:
        return [f"w{n}" for n in range(1, self._workers + 1)]

    def _spawn(self, name: str, args: list[str]) -> None:
        with open(self._workdir / f"{name}.log", "ab") as log:
            self._procs[name] = subprocess.Popen(
                [sys.executable, "-m", "strait", *args, "--config", str(self._config_path), "--log-level", _LOG_LEVEL],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def start(self, topics: Sequence[str]) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._config_path.write_text(yaml.safe_dump(self._config, sort_keys=False))
        self._spawn("controller", ["controller", "--id", "c1"])
        for name in self.worker_names:
            self._spawn(name, ["worker", "--id", name])
        # Topics are added once every worker is registered, so the first assignment is already
        # the balanced one (no partition moves while the benchmark measures).
        self._wait("the controller to lead", lambda: bool(self._api.call("GET", "/health")["leader"]))
        self._wait(f"{self._workers} active workers", self._all_workers_active)
        self.add_topics(topics)

    def _all_workers_active(self) -> bool:
        states = {w["id"]: w["state"] for w in self._api.call("GET", "/workers")}
        return all(states.get(name) == "active" for name in self.worker_names)

    def _wait(self, what: str, predicate: Any) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"Strait {name} exited with {proc.returncode}; see {self._workdir / name}.log")
            try:
                if predicate():
                    return
            except ApiError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}; see logs in {self._workdir}")

    def add_topics(self, topics: Sequence[str]) -> float:
        """POST every topic at once, as an operator's script adding several would (a POST returns
        once the topic's destination is ready); returns when the first was sent."""
        asked = time.time()

        def post(topic: str) -> None:
            self.posted_at[topic] = time.time()  # each topic's own POST (the "after its POST")
            self._api.call("POST", f"/topics/{topic}", json={"start": "earliest"})

        if topics:
            with ThreadPoolExecutor(max_workers=len(topics), thread_name_prefix="post") as posting:
                list(posting.map(post, topics))  # re-raises the first refusal
        return asked

    def pids(self) -> list[int]:
        """Controllers and workers, and the workers' backlog processes (their children)."""
        ours = [p.pid for p in list(self._procs.values()) if process.is_ours(p.pid, self._marker)]
        return ours + [child for pid in ours for child in children(pid)]

    def worker_pids(self) -> list[int]:
        return [self._procs[n].pid for n in self.worker_names if process.is_ours(self._procs[n].pid, self._marker)]

    def kill_one(self) -> str:
        name = self.worker_names[-1]
        process.stop(self._procs[name].pid, self._marker, hard=True)
        return name

    def assignment(self) -> dict[str, str | None]:
        result: dict[str, str | None] = self._api.call("GET", "/assignment")
        return result

    def describe(self) -> dict[str, object]:
        return {
            "system": "Strait (controller + worker processes)",
            "workers": self._workers,
            "compression": self._compression,
            "coordination": self.store,
            "session_timeout_s": self._session_timeout_s,
            **({"delivery": self.delivery} if self.delivery is not None else {}),
            **({"copy": self.copy} if self.copy is not None else {}),
        }

    def stop(self) -> None:
        # Workers first (they drain and commit), then the controller; by pid, ours only.
        workers = [self._procs[n] for n in self.worker_names if n in self._procs]
        for proc in workers:
            process.signal_process(proc.pid, signal.SIGTERM, self._marker)
        for proc in workers:
            process.stop(proc.pid, self._marker, timeout_s=30)
        if "controller" in self._procs:
            process.stop(self._procs["controller"].pid, self._marker, timeout_s=15)
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._api.close()


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (none once it is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []
