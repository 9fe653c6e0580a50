"""A sandbox: one ZooKeeper and named real Kafka clusters on 127.0.0.1, with fault controls.

Everything the sandbox starts is recorded in ``state.json`` in its state folder, so a later
process (``strait sandbox status|down|broker kill ...``) can find and stop exactly those
processes. Start-up either completes (every broker registered, metadata answered) or stops
whatever it already started and raises one error that names the cause and the log file.

Clusters may be secured (``SandboxSpec.security``, see ``sandbox.security``): then ``props()``
is the least-privilege user ``strait``, granted Strait's ACLs at start-up, and ``admin_props()``
the super user the sandbox itself works with.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strait.sandbox import artifacts, kafka, ports, process, security, zookeeper
from strait.sandbox.errors import SandboxError
from strait.sandbox.security import Credentials, SecurityMode

STATE_FILE = "state.json"
# JVM options added to every broker the sandbox starts (after its own, so they win), for
# diagnosis and for benchmarks: e.g. ``-Xlog:gc:file=/tmp/gc-%p.log`` shows whether a latency
# spike was a broker's GC pause.
BROKER_JVM_OPTIONS_ENV = "STRAIT_SANDBOX_BROKER_JVM_OPTS"


def default_state_dir() -> Path:
    return Path(os.environ.get("STRAIT_SANDBOX_DIR", artifacts.cache_root() / "sandbox"))


@dataclass(frozen=True)
class SandboxSpec:
    """The shape of a sandbox to start."""

    clusters: tuple[str, ...] = ("src", "dst")
    brokers: int = 1
    racks: int = 0
    log_dirs: int = 2
    state_dir: Path | None = None
    zookeeper: bool = True
    zookeeper_port: int | None = None
    startup_timeout_s: float = 180.0
    broker_heap: str = "384m"
    # One mode for every cluster, or {cluster: mode} (others plaintext); see sandbox.security.
    security: str | Mapping[str, str] = "plaintext"
    # Plaintext clusters whose brokers get a second listener advertised at a proxy's port
    # (ClusterState.proxied_props): the proxy itself is the caller's to start.
    proxied: tuple[str, ...] = ()

    def security_modes(self) -> dict[str, SecurityMode]:
        """Each cluster's security mode."""
        return security.modes_for(self.clusters, self.security)

    def validate(self) -> None:
        if not self.clusters:
            raise SandboxError("at least one cluster name is needed")
        for name in self.clusters:
            if not name or not all(c.isalnum() or c in "-_" for c in name):
                raise SandboxError(f"invalid cluster name {name!r}: use letters, digits, '-' or '_'")
        if len(set(self.clusters)) != len(self.clusters):
            raise SandboxError("cluster names must be distinct")
        if self.brokers < 1:
            raise SandboxError(f"--brokers must be at least 1, got {self.brokers}")
        if self.racks < 0 or self.racks > self.brokers:
            raise SandboxError(f"--racks must be between 0 and the broker count ({self.brokers}), got {self.racks}")
        if self.log_dirs < 1:
            raise SandboxError(f"--log-dirs must be at least 1, got {self.log_dirs}")
        modes = self.security_modes()
        for name in self.proxied:
            if name not in modes:
                raise SandboxError(f"proxied cluster {name!r} is not one of {', '.join(self.clusters)}")
            if modes[name].secured:
                raise SandboxError(f"proxied cluster {name!r} must be plaintext")


@dataclass
class BrokerState:
    id: int
    rack: str | None
    port: int
    controller_port: int
    log_dirs: list[str]
    config: str
    log: str
    pid: int | None = None
    # Set on a proxied cluster: where the broker's proxied listener binds, and the port it
    # advertises there (the proxy's, SandboxSpec.proxied).
    proxied_port: int | None = None
    proxy_port: int | None = None


@dataclass
class ClusterState:
    name: str
    cluster_id: str
    brokers: list[BrokerState] = field(default_factory=list)
    security: SecurityMode = SecurityMode.PLAINTEXT
    # Never shown by repr: it holds the passwords.
    credentials: Credentials | None = field(default=None, repr=False, compare=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def props(self) -> dict[str, str]:
        """librdkafka properties for Strait on this cluster: on a secured cluster, the
        least-privilege user ``strait`` (holding only the ACLs of strait.security.acls)."""
        return security.client_props(self.security, self.bootstrap, self.credentials, security.STRAIT)

    def admin_props(self) -> dict[str, str]:
        """librdkafka properties for the super user ``admin`` (the same as props() when plaintext)."""
        return security.client_props(self.security, self.bootstrap, self.credentials, security.ADMIN)

    @property
    def proxied_bootstrap(self) -> str | None:
        """The proxy ports of a proxied cluster: clients that start there only ever reach the
        brokers through the proxy. None if the cluster has no proxied listener."""
        if not self.brokers or any(b.proxy_port is None for b in self.brokers):
            return None
        return ",".join(f"127.0.0.1:{b.proxy_port}" for b in self.brokers)

    def broker(self, broker_id: int) -> BrokerState:
        for broker in self.brokers:
            if broker.id == broker_id:
                return broker
        raise SandboxError(f"cluster {self.name!r} has no broker {broker_id}")


@dataclass
class ZooKeeperState:
    port: int
    config: str
    log: str
    pid: int | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"


class Sandbox:
    """A running (or stopped) sandbox, backed by its state folder."""

    def __init__(self, state_dir: Path, zk: ZooKeeperState | None, clusters: dict[str, ClusterState]) -> None:
        self.state_dir = state_dir
        self.zk = zk
        self.clusters = clusters

    # ---- creation and discovery -------------------------------------------------------------

    @classmethod
    def up(cls, spec: SandboxSpec) -> Sandbox:
        """Start a sandbox of shape ``spec``; on failure nothing it started is left running."""
        spec.validate()
        state_dir = (spec.state_dir or default_state_dir()).resolve()
        if (state_dir / STATE_FILE).exists():
            existing = cls.load(state_dir)
            if existing.running_pids():
                raise SandboxError(f"a sandbox is already running in {state_dir}; run 'strait sandbox down' first")
            shutil.rmtree(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        kafka_cp = artifacts.classpath("kafka")
        zk_cp = artifacts.classpath("zookeeper") if spec.zookeeper else ""
        (state_dir / "log4j2.properties").write_text(kafka.LOG4J2)
        sandbox = cls(state_dir, None, {})
        modes = spec.security_modes()
        credentials = None
        if any(m.secured for m in modes.values()):
            credentials = Credentials.create(state_dir / security.SECURITY_DIR, run=state_dir.name)
        try:
            if spec.zookeeper:
                zk_port = spec.zookeeper_port or ports.free_port()
                ports.ensure_free(zk_port, "ZooKeeper")
                zk_dir = state_dir / "zookeeper"
                cfg = zookeeper.write_config(zk_dir, zk_port)
                sandbox.zk = ZooKeeperState(port=zk_port, config=str(cfg), log=str(zk_dir / "zookeeper.log"))
            for name, mode in modes.items():
                sandbox.clusters[name] = sandbox._layout_cluster(name, spec, mode, credentials)
            sandbox._save()
            sandbox._format_all(kafka_cp, timeout_s=max(120.0, spec.startup_timeout_s))
            if sandbox.zk is not None:
                sandbox._spawn_zookeeper(zk_cp)
            for cluster in sandbox.clusters.values():
                for broker in cluster.brokers:
                    sandbox._spawn_broker(cluster, broker, kafka_cp, spec.broker_heap)
            sandbox._save()
            sandbox._wait_ready(spec.startup_timeout_s)
            for cluster in sandbox.clusters.values():
                if cluster.security.authorizes:
                    sandbox._grant_strait_acls(cluster)
        except BaseException:
            sandbox.stop_all()
            raise
        return sandbox

    @classmethod
    def load(cls, state_dir: Path | None = None) -> Sandbox:
        """Read the sandbox recorded in ``state_dir``."""
        state_dir = (state_dir or default_state_dir()).resolve()
        path = state_dir / STATE_FILE
        if not path.exists():
            raise SandboxError(f"no sandbox recorded in {state_dir} (start one with 'strait sandbox up')")
        raw = json.loads(path.read_text())
        zk = ZooKeeperState(**raw["zookeeper"]) if raw.get("zookeeper") else None
        clusters = {
            name: ClusterState(
                name=name,
                cluster_id=c["cluster_id"],
                brokers=[BrokerState(**b) for b in c["brokers"]],
                security=security.mode(c.get("security", "plaintext")),
            )
            for name, c in raw["clusters"].items()
        }
        if any(c.security.secured for c in clusters.values()):
            credentials = Credentials.load(state_dir / security.SECURITY_DIR)
            for cluster in clusters.values():
                if cluster.security.secured:
                    cluster.credentials = credentials
        return cls(state_dir, zk, clusters)

    def _layout_cluster(
        self, name: str, spec: SandboxSpec, mode: SecurityMode, credentials: Credentials | None
    ) -> ClusterState:
        credentials = credentials if mode.secured else None
        cluster = ClusterState(name=name, cluster_id=kafka.new_cluster_id(), security=mode, credentials=credentials)
        controller_port = ports.free_port()
        taken = {controller_port}

        def new_port() -> int:
            port = ports.free_port()
            while port in taken:
                port = ports.free_port()
            taken.add(port)
            return port

        for node_id in range(1, spec.brokers + 1):
            port = new_port()
            proxied = name in spec.proxied
            rack = f"r{(node_id - 1) % spec.racks + 1}" if spec.racks else None
            home = self.state_dir / "clusters" / name / f"broker-{node_id}"
            dirs = [str(home / f"disk-{i}") for i in range(spec.log_dirs)]
            cluster.brokers.append(
                BrokerState(
                    id=node_id,
                    rack=rack,
                    port=port,
                    controller_port=controller_port,
                    log_dirs=dirs,
                    config=str(home / "server.properties"),
                    log=str(home / "broker.log"),
                    proxied_port=new_port() if proxied else None,
                    proxy_port=new_port() if proxied else None,
                )
            )
            kafka.write_config(self._layout(cluster, cluster.brokers[-1], spec.brokers))
        return cluster

    @staticmethod
    def _layout(cluster: ClusterState, broker: BrokerState, size: int) -> kafka.BrokerLayout:
        mode = cluster.security
        return kafka.BrokerLayout(
            node_id=broker.id,
            port=broker.port,
            controller_port=broker.controller_port,
            rack=broker.rack,
            log_dirs=tuple(Path(d) for d in broker.log_dirs),
            config=Path(broker.config),
            log=Path(broker.log),
            cluster_size=size,
            listener=mode.protocol,
            controller_protocol=mode.controller_protocol,
            security=tuple(security.broker_settings(mode, cluster.credentials)),
            proxied_port=broker.proxied_port,
            proxy_port=broker.proxy_port,
        )

    def _format_all(self, kafka_cp: str, timeout_s: float = 120.0) -> None:
        # StorageTool is a JVM start each; run them side by side to keep start-up short.
        running: list[tuple[subprocess.Popen[bytes], BrokerState]] = []
        for cluster in self.clusters.values():
            scram: list[str] = []
            if cluster.security is SecurityMode.SASL_SSL:
                assert cluster.credentials is not None
                scram = security.scram_arguments(cluster.credentials)
            for broker in cluster.brokers:
                Path(broker.log).parent.mkdir(parents=True, exist_ok=True)
                log = open(broker.log, "ab")  # noqa: SIM115 - closed below once the tool exits
                cmd = [
                    process.java_binary(),
                    "-Xmx128m",
                    *process.JVM_OPTIONS,
                    "-cp",
                    kafka_cp,
                    f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
                    kafka.STORAGE_TOOL,
                    *kafka.format_args(Path(broker.config), cluster.cluster_id, scram),
                ]
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                log.close()
                running.append((proc, broker))
        failures = []
        deadline = time.monotonic() + timeout_s
        for proc, broker in running:
            try:
                # One deadline for all: they run side by side (a loaded machine may need minutes).
                code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                failures.append(
                    f"formatting storage of broker {broker.id} did not finish within {timeout_s:.0f} s "
                    f"(a starved machine? load average {os.getloadavg()[0]:.1f}); see {broker.log}"
                )
                continue
            if code != 0:
                failures.append(f"formatting storage of broker {broker.id} failed (exit {code}); see {broker.log}")
        if failures:
            raise SandboxError("; ".join(failures))

    def _spawn_zookeeper(self, zk_cp: str) -> None:
        assert self.zk is not None
        self.zk.pid = process.spawn_java(
            classpath=zk_cp,
            main_class=zookeeper.ZOOKEEPER_MAIN,
            args=[self.zk.config],
            log_file=Path(self.zk.log),
            heap="128m",
            system_properties={"log4j2.configurationFile": str(self.state_dir / "log4j2.properties")},
        )

    def _spawn_broker(self, cluster: ClusterState, broker: BrokerState, kafka_cp: str, heap: str = "384m") -> None:
        broker.pid = process.spawn_java(
            classpath=kafka_cp,
            main_class=kafka.KAFKA_MAIN,
            args=[broker.config],
            log_file=Path(broker.log),
            heap=heap,
            system_properties={"log4j2.configurationFile": str(self.state_dir / "log4j2.properties")},
            extra_options=os.environ.get(BROKER_JVM_OPTIONS_ENV, "").split(),
        )

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self.zk is not None:
            self._wait_zookeeper(deadline)
        for cluster in self.clusters.values():
            self._wait_cluster(cluster, deadline)

    def _wait_zookeeper(self, deadline: float) -> None:
        assert self.zk is not None and self.zk.pid is not None
        while not zookeeper.is_serving(self.zk.port):
            if self._exited(self.zk.pid) and not zookeeper.is_serving(self.zk.port):
                raise SandboxError(f"ZooKeeper exited during start-up; see {self.zk.log}")
            if time.monotonic() > deadline:
                raise SandboxError(f"ZooKeeper did not serve on port {self.zk.port} in time; see {self.zk.log}")
            time.sleep(0.2)

    def _wait_cluster(self, cluster: ClusterState, deadline: float) -> None:
        from strait import clients

        # log_level 0: connection refusals while brokers boot are expected, not worth printing.
        client = clients.admin(cluster.admin_props(), **{"socket.timeout.ms": 2000, "log_level": 0})
        wanted = {b.id for b in cluster.brokers}
        while True:
            for broker in cluster.brokers:
                if broker.pid is not None and self._exited(broker.pid):
                    raise SandboxError(
                        f"broker {broker.id} of cluster {cluster.name!r} exited during start-up"
                        f"{_last_words(Path(broker.log))}; see {broker.log}"
                    )
            try:
                if not all(ports.is_listening(b.port) for b in cluster.brokers):
                    raise ConnectionError("not all brokers listen yet")
                metadata = client.list_topics(timeout=2)
                if set(metadata.brokers) >= wanted:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                late = ", ".join(b.log for b in cluster.brokers)
                raise SandboxError(f"cluster {cluster.name!r} was not ready in time; see {late}")
            time.sleep(0.3)

    def _grant_strait_acls(self, cluster: ClusterState) -> None:
        from strait import clients
        from strait.security import acls

        # Through the super user: only it may create ACLs. Kafka's errors name no secret.
        admin = clients.admin(cluster.admin_props(), log_level=0)
        try:
            acls.grant(admin, f"User:{security.STRAIT}", acls.ROLES)
        except Exception as exc:
            raise SandboxError(f"cluster {cluster.name!r}: granting the strait user's ACLs failed: {exc}") from None

    def _exited(self, pid: int) -> bool:
        # Asked twice, a moment apart: on a loaded machine one look at /proc can catch a
        # process between states, and a false "exited" would tear down a healthy sandbox.
        if process.is_ours(pid, str(self.state_dir)):
            return False
        time.sleep(0.5)
        return not process.is_ours(pid, str(self.state_dir))

    def _save(self) -> None:
        raw: dict[str, Any] = {
            "zookeeper": asdict(self.zk) if self.zk else None,
            "clusters": {
                name: {"cluster_id": c.cluster_id, "security": c.security, "brokers": [asdict(b) for b in c.brokers]}
                for name, c in self.clusters.items()
            },
        }
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(raw, indent=2))
        tmp.replace(self.state_dir / STATE_FILE)

    # ---- what a caller sees ----------------------------------------------------------------

    @property
    def zookeeper(self) -> str:
        if self.zk is None:
            raise SandboxError("this sandbox has no ZooKeeper")
        return self.zk.connect

    def describe(self) -> dict[str, Any]:
        """The sandbox as the JSON object ``strait sandbox up --json`` prints."""
        return {
            "zookeeper": self.zk.connect if self.zk else None,
            "clusters": {
                name: {
                    "bootstrap": cluster.bootstrap,
                    "security": cluster.security.value,
                    "client": cluster.props(),
                    "admin_client": cluster.admin_props(),
                    "brokers": [
                        {
                            "id": b.id,
                            "rack": b.rack,
                            "log_dirs": b.log_dirs,
                            "running": b.pid is not None and process.is_ours(b.pid, str(self.state_dir)),
                        }
                        for b in cluster.brokers
                    ],
                }
                for name, cluster in self.clusters.items()
            },
        }

    def running_pids(self) -> list[int]:
        marker = str(self.state_dir)
        pids = [b.pid for c in self.clusters.values() for b in c.brokers if b.pid]
        if self.zk and self.zk.pid:
            pids.append(self.zk.pid)
        return [pid for pid in pids if process.is_ours(pid, marker)]

    # ---- fault controls ----------------------------------------------------------------------

    def stop_broker(self, cluster: str, broker_id: int) -> None:
        """Stop a broker cleanly (SIGTERM, controlled shutdown)."""
        broker = self._cluster(cluster).broker(broker_id)
        if broker.pid:
            process.stop(broker.pid, str(self.state_dir))

    def kill_broker(self, cluster: str, broker_id: int) -> None:
        """kill -9 a broker."""
        broker = self._cluster(cluster).broker(broker_id)
        if broker.pid:
            process.stop(broker.pid, str(self.state_dir), hard=True)

    def start_broker(self, cluster: str, broker_id: int, *, timeout_s: float = 60.0) -> None:
        """Start a stopped broker again on the same port and data, and wait until it is registered."""
        state = self._cluster(cluster)
        broker = state.broker(broker_id)
        if broker.pid and process.is_ours(broker.pid, str(self.state_dir)):
            return
        self._spawn_broker(state, broker, artifacts.classpath("kafka"))
        self._save()
        self._wait_cluster(state, time.monotonic() + timeout_s)

    def pause_broker(self, cluster: str, broker_id: int) -> None:
        """SIGSTOP a broker (it hangs without closing connections)."""
        broker = self._cluster(cluster).broker(broker_id)
        if broker.pid:
            process.signal_process(broker.pid, signal.SIGSTOP, str(self.state_dir))

    def resume_broker(self, cluster: str, broker_id: int) -> None:
        broker = self._cluster(cluster).broker(broker_id)
        if broker.pid:
            process.signal_process(broker.pid, signal.SIGCONT, str(self.state_dir))

    def stop_zookeeper(self) -> None:
        if self.zk and self.zk.pid:
            process.stop(self.zk.pid, str(self.state_dir))

    def kill_zookeeper(self) -> None:
        if self.zk and self.zk.pid:
            process.stop(self.zk.pid, str(self.state_dir), hard=True)

    def start_zookeeper(self, *, timeout_s: float = 30.0) -> None:
        if self.zk is None:
            raise SandboxError("this sandbox has no ZooKeeper")
        if self.zk.pid and process.is_ours(self.zk.pid, str(self.state_dir)):
            return
        self._spawn_zookeeper(artifacts.classpath("zookeeper"))
        self._save()
        self._wait_zookeeper(time.monotonic() + timeout_s)

    def _cluster(self, name: str) -> ClusterState:
        try:
            return self.clusters[name]
        except KeyError:
            raise SandboxError(f"no cluster named {name!r} (have: {', '.join(self.clusters)})") from None

    # ---- teardown ------------------------------------------------------------------------------

    def stop_all(self) -> None:
        """Stop every process this sandbox started (brokers first, then ZooKeeper)."""
        marker = str(self.state_dir)
        brokers = [b for c in self.clusters.values() for b in c.brokers if b.pid]
        for broker in brokers:  # SIGTERM all first so they shut down side by side
            assert broker.pid is not None
            process.signal_process(broker.pid, signal.SIGTERM, marker)
        for broker in brokers:
            assert broker.pid is not None
            process.stop(broker.pid, marker, timeout_s=15)
        if self.zk and self.zk.pid:
            process.stop(self.zk.pid, marker)

    def down(self, *, keep: bool = False) -> None:
        """Stop everything, then remove the data unless ``keep``."""
        self.stop_all()
        if not keep:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _last_words(log: Path) -> str:
    """The log's last line (a JVM's reason for exiting, e.g. OutOfMemoryError), quoted for an error."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 2048))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return f" ({lines[-1][:300]!r})" if lines else ""
