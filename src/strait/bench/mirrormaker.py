"""MirrorMaker 2 in dedicated mode, configured to do what Strait does and nothing more.

One or more ``org.apache.kafka.connect.mirror.MirrorMaker`` JVMs (nodes) share an
``mm2.properties`` rendered here: one flow ``src->dst`` with the identity replication policy
(destination topics keep their names, as with Strait), ``tasks.max`` matched to Strait's
worker count, and the heartbeat, checkpoint, offset-sync and config/ACL sync machinery off,
because Strait does none of it and it would only cost MirrorMaker CPU. Each run gets its own
Connect group and internal topics, so no run resumes from another's offsets.

With ``exactly_once`` it runs as KIP-618 sets Connect up for it (MirrorMaker 2 since 3.5): the
destination's Connect worker with ``exactly.once.source.support = enabled`` (each source task
writes its records and its source offsets in one transaction), the internal REST server that
mode needs, and the source read ``read_committed`` so aborted transactions are not copied.

On secured clusters the clusters' librdkafka properties are translated to the Java clients'
(:func:`java_client_properties`) and set per cluster (``src.security.protocol`` and so on), so
every MirrorMaker client of a cluster uses them; the properties file is then private (0600),
since it holds the password or key.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strait.sandbox import artifacts, kafka, ports, process

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Tuning and identity settings of librdkafka that have no bearing on what MirrorMaker's clients need.
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")


class UnsupportedSecurity(ValueError):
    """A cluster security property with no Java client equivalent here; the message names it."""


def _jaas_quote(value: str) -> str:
    # JAAS option values are double-quoted strings: a quote or backslash inside is escaped.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read(path: Any, key: str) -> str:
    try:
        return Path(str(path)).read_text()
    except OSError as exc:
        raise UnsupportedSecurity(f"{key}: cannot read {path}: {exc.strerror}") from None


def java_client_properties(props: Mapping[str, Any]) -> dict[str, str]:
    """Java Kafka client properties equivalent to a cluster's librdkafka security properties.

    ``security.protocol`` and ``sasl.mechanism(s)`` carry over; ``sasl.username``/``sasl.password``
    become ``sasl.jaas.config`` (PLAIN or SCRAM login module). TLS uses PEM stores (KIP-651):
    ``ssl.ca.location`` is the PEM truststore, a client certificate and key (files or inline PEM)
    the PEM keystore's chain and key, a ``ssl.keystore.location`` stays PKCS#12. Bootstrap
    servers and non-security (tuning) properties are not included. A security property Java has
    no equivalent for here raises :class:`UnsupportedSecurity` naming it.
    """
    java: dict[str, str] = {}
    protocol = str(props.get("security.protocol", "PLAINTEXT")).strip().upper()
    if protocol not in _PROTOCOLS:
        raise UnsupportedSecurity(f"security.protocol={props['security.protocol']}: expected one of {_PROTOCOLS}")
    if protocol != "PLAINTEXT":
        java["security.protocol"] = protocol
    handled = {"bootstrap.servers", "security.protocol"}
    if protocol.startswith("SASL_"):
        mechanism = str(props.get("sasl.mechanisms", props.get("sasl.mechanism", "GSSAPI"))).strip().upper()
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise UnsupportedSecurity(f"sasl.mechanisms={mechanism}: MirrorMaker runs here with PLAIN or SCRAM only")
        java["sasl.mechanism"] = mechanism
        user, password = props.get("sasl.username"), props.get("sasl.password")
        if user is None or password is None:
            raise UnsupportedSecurity(f"sasl.mechanisms={mechanism} needs sasl.username and sasl.password")
        java["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(str(user))} password={_jaas_quote(str(password))};"
        )
        handled |= {"sasl.mechanisms", "sasl.mechanism", "sasl.username", "sasl.password"}
    if protocol.endswith("SSL"):
        java.update(_java_tls(props))
        handled |= {
            "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
            "ssl.certificate.pem", "ssl.key.pem", "ssl.keystore.location", "ssl.keystore.password",
            "ssl.endpoint.identification.algorithm", "ssl.cipher.suites",
        }  # fmt: skip
    for key in props:
        if not protocol.endswith("SSL") and key.startswith(("ssl.", "enable.ssl.")):
            continue  # as librdkafka: TLS settings of a cluster reached without TLS mean nothing
        if key not in handled and key.startswith(_SECURITY_PREFIXES):
            raise UnsupportedSecurity(f"{key}: no MirrorMaker (Java client) equivalent is set up for this property")
    return java


def _java_tls(props: Mapping[str, Any]) -> dict[str, str]:
    java: dict[str, str] = {}
    if props.get("ssl.ca.pem"):
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.certificates"] = str(props["ssl.ca.pem"])
    elif props.get("ssl.ca.location") and str(props["ssl.ca.location"]) != "probe":
        if os.path.isdir(str(props["ssl.ca.location"])):
            raise UnsupportedSecurity("ssl.ca.location: a CA folder has no Java equivalent; name a PEM file")
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = str(props["ssl.ca.location"])
    if props.get("ssl.certificate.location") or props.get("ssl.certificate.pem"):
        chain = props.get("ssl.certificate.pem") or _read(props["ssl.certificate.location"], "ssl.certificate.location")
        key = props.get("ssl.key.pem") or (
            _read(props["ssl.key.location"], "ssl.key.location") if props.get("ssl.key.location") else None
        )
        if not key:
            raise UnsupportedSecurity("ssl.certificate.*: a client certificate needs its key (ssl.key.location)")
        if "BEGIN PRIVATE KEY" not in key and "BEGIN ENCRYPTED PRIVATE KEY" not in key:
            raise UnsupportedSecurity("ssl.key.*: Java's PEM keystore reads PKCS#8 keys only (BEGIN PRIVATE KEY)")
        java["ssl.keystore.type"] = "PEM"
        java["ssl.keystore.certificate.chain"] = str(chain)
        java["ssl.keystore.key"] = str(key)
        if props.get("ssl.key.password"):
            java["ssl.key.password"] = str(props["ssl.key.password"])
    elif props.get("ssl.keystore.location"):
        java["ssl.keystore.type"] = "PKCS12"
        java["ssl.keystore.location"] = str(props["ssl.keystore.location"])
        if props.get("ssl.keystore.password"):
            java["ssl.keystore.password"] = str(props["ssl.keystore.password"])
    algorithm = str(props.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
    if algorithm not in ("https", "none"):
        raise UnsupportedSecurity(f"ssl.endpoint.identification.algorithm={algorithm}: expected https or none")
    java["ssl.endpoint.identification.algorithm"] = "https" if algorithm == "https" else ""
    if props.get("ssl.cipher.suites"):
        raise UnsupportedSecurity("ssl.cipher.suites: OpenSSL cipher names have no Java equivalent here")
    return java


# MirrorMaker 2 as a careful operator would tune it for throughput (`strait bench throughput
# --mm2-profile default,tuned`); "default" keeps the Java clients' defaults. Both profiles compress
# with the source's codec (render_properties). Per-cluster client settings: `src.consumer.*` is
# the source task's consumer, `dst.producer.*` its producer.
MM2_PROFILES: dict[str, dict[str, str]] = {
    "default": {},
    "tuned": {
        # ~1 MB producer batches (default 16 KB), filled for up to 25 ms (default 5 ms since Kafka 4.0).
        "dst.producer.batch.size": "1000000",
        "dst.producer.linger.ms": "25",
        # Room for several partitions' 1 MB batches per request and in the buffer (defaults 1 MB, 32 MB).
        "dst.producer.max.request.size": "8388608",
        "dst.producer.buffer.memory": "134217728",
        # Larger polls and fetches (defaults: 500 records, 1 byte, 500 ms, 1 MB per partition).
        "src.consumer.max.poll.records": "5000",
        "src.consumer.fetch.min.bytes": "262144",
        "src.consumer.fetch.max.wait.ms": "100",
        "src.consumer.max.partition.fetch.bytes": "4194304",
    },
}
# Tuned for a source across a long link (`strait bench wan`): the tuned settings, and the socket
# buffers an operator raises so one connection's TCP window covers the bandwidth-delay product
# (defaults: 64 KB receive for the consumer, 128 KB send for the producer).
MM2_PROFILES["wan"] = {
    **MM2_PROFILES["tuned"],
    "src.consumer.receive.buffer.bytes": "8388608",
    "src.consumer.send.buffer.bytes": "1048576",
}


# Exactly-once in dedicated mode (Kafka's geo-replication docs): the target cluster's Connect
# worker writes records and source offsets in transactions; the REST listener is required.
EXACTLY_ONCE_PROPERTIES: dict[str, str] = {
    "dst.exactly.once.source.support": "enabled",
    "src.consumer.isolation.level": "read_committed",
}


def profile_properties(profile: str) -> dict[str, str]:
    """The ``mm2.properties`` settings of a MirrorMaker 2 profile (see :data:`MM2_PROFILES`)."""
    try:
        return dict(MM2_PROFILES[profile])
    except KeyError:
        raise ValueError(f"unknown MirrorMaker 2 profile {profile!r}: use {', '.join(MM2_PROFILES)}") from None


def _property_value(value: str) -> str:
    """``value`` escaped for a .properties file (java.util.Properties.load reads it back as is)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out.startswith((" ", "\t")) else out


def render_properties(
    *,
    src_bootstrap: str,
    dst_bootstrap: str,
    topics_pattern: str,
    tasks: int,
    run_id: str,
    compression: str = "none",
    refresh_topics_s: int = 5,
    rebalance_delay_ms: int = 10_000,
    rest_port: int | None = None,
    extra: Mapping[str, str] | None = None,
    src_security: Mapping[str, str] | None = None,
    dst_security: Mapping[str, str] | None = None,
) -> str:
    """The ``mm2.properties`` of one dedicated-mode node.

    ``src_security``/``dst_security`` are Java client properties (:func:`java_client_properties`)
    set for every client of that cluster.
    """
    props: dict[str, str] = {
        "clusters": "src, dst",
        "src.bootstrap.servers": src_bootstrap,
        "dst.bootstrap.servers": dst_bootstrap,
        "src->dst.enabled": "true",
        "dst->src.enabled": "false",
        "src->dst.topics": topics_pattern,
        "replication.policy.class": IDENTITY_POLICY,
        "tasks.max": str(tasks),
        # Single-broker sandbox clusters: every topic MirrorMaker creates has one replica.
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        # Strait copies records only; MirrorMaker's extras would be work Strait does not do.
        # (No offset-syncs.* key may be set once offset syncs are off: the connector refuses it.
        # The checkpoint connector then logs that it cannot run, which is the intent.)
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "emit.offset-syncs.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "refresh.groups.enabled": "false",
        # New source topics must be found within seconds in the add-topics scenario.
        "refresh.topics.interval.seconds": str(refresh_topics_s),
        # A fresh Connect group and internal topics per run: nothing resumes from another run.
        "dst.group.id": f"mm2-{run_id}",
        "offset.storage.topic": f"mm2-offsets.{run_id}.internal",  # MirrorMaker2.offsets_topic
        # Connect commits source offsets every minute by default (Strait: every second). The
        # lost / not-yet-copied split reads them, and a commit on stop can time out when busy.
        "offset.flush.interval.ms": "1000",
        "config.storage.topic": f"mm2-configs.{run_id}.internal",
        "status.storage.topic": f"mm2-status.{run_id}.internal",
        # Connect waits this long for a departed node before moving its tasks (default 5 min);
        # set near Strait's ZooKeeper session timeout so the failure scenario compares detection.
        "scheduled.rebalance.max.delay.ms": str(rebalance_delay_ms),
        # Start-up only: the reflective plugin scan takes over a minute on a busy two-core
        # machine, and Kafka's own start-up warning recommends this setting.
        "plugin.discovery": "service_load",
    }
    if compression != "none":
        props["dst.producer.compression.type"] = compression
    if rest_port is not None:
        # Several dedicated nodes need the internal REST server to forward task configs (KIP-710).
        props["dedicated.mode.enable.internal.rest"] = "true"
        props["listeners"] = f"http://127.0.0.1:{rest_port}"
    for alias, security in (("src", src_security), ("dst", dst_security)):
        for key, value in (security or {}).items():
            props[f"{alias}.{key}"] = _property_value(value)
    props.update(extra or {})
    return "".join(f"{key} = {value}\n" for key, value in props.items())


class MirrorMaker2:
    """MirrorMaker 2 nodes copying ``src`` to ``dst`` of a sandbox."""

    name = "mm2"

    def __init__(
        self,
        *,
        src_bootstrap: str,
        dst_bootstrap: str,
        workdir: Path,
        tasks: int,
        nodes: int = 1,
        compression: str = "none",
        refresh_topics_s: int = 5,
        rebalance_delay_ms: int = 10_000,
        heap: str = "512m",
        topics_pattern: str | None = None,
        extra: Mapping[str, str] | None = None,
        src_props: Mapping[str, Any] | None = None,
        dst_props: Mapping[str, Any] | None = None,
        exactly_once: bool = False,
    ) -> None:
        """``src_props``/``dst_props``: the clusters' librdkafka properties, whose security settings
        MirrorMaker's clients get (translated by :func:`java_client_properties`); ``exactly_once``:
        :data:`EXACTLY_ONCE_PROPERTIES` and the internal REST server."""
        self.parallelism = tasks
        self._src_security = java_client_properties(src_props or {})
        self._dst_security = java_client_properties(dst_props or {})
        self._src = src_bootstrap
        self._dst = dst_bootstrap
        self._tasks = tasks
        self._nodes = nodes
        self._compression = compression
        self._refresh_topics_s = refresh_topics_s
        self._rebalance_delay_ms = rebalance_delay_ms
        self._heap = heap
        self._exactly_once = exactly_once
        self._extra = {**(EXACTLY_ONCE_PROPERTIES if exactly_once else {}), **(extra or {})}
        self._pattern = topics_pattern
        self._run_id = f"bench-{uuid.uuid4().hex[:8]}"
        self._workdir = workdir.resolve()
        self._pids: dict[str, int] = {}

    @property
    def offsets_topic(self) -> str:
        """Connect's offsets topic of this run (on the destination): the committed source offsets."""
        return f"mm2-offsets.{self._run_id}.internal"

    @property
    def _marker(self) -> str:
        # Every node's command line names its properties file under the work folder.
        return str(self._workdir)

    def start(self, topics: Sequence[str]) -> None:
        """Start the nodes, copying ``topics`` or, when one was given, every topic ``topics_pattern`` matches."""
        pattern = self._pattern or "|".join(_escape(t) for t in topics)
        self._workdir.mkdir(parents=True, exist_ok=True)
        log4j = self._workdir / "log4j2.properties"
        log4j.write_text(kafka.LOG4J2)
        classpath = artifacts.classpath("mirrormaker")
        for n in range(1, self._nodes + 1):
            node = f"node-{n}"
            config = self._workdir / f"mm2-{node}.properties"
            _write_private(config, self.properties(pattern))
            self._pids[node] = process.spawn_java(
                classpath=classpath,
                main_class=MAIN_CLASS,
                args=[str(config), "--clusters", "dst"],
                log_file=self._workdir / f"mm2-{node}.log",
                heap=self._heap,
                system_properties={"log4j2.configurationFile": str(log4j)},
            )
        time.sleep(0.5)
        for node, pid in self._pids.items():
            if not process.is_ours(pid, self._marker):
                raise RuntimeError(f"MirrorMaker {node} exited at start; see {self._workdir / f'mm2-{node}.log'}")

    def properties(self, pattern: str) -> str:
        """One node's ``mm2.properties``, copying the topics ``pattern`` matches."""
        return render_properties(
            src_bootstrap=self._src,
            dst_bootstrap=self._dst,
            topics_pattern=pattern,
            tasks=self._tasks,
            run_id=self._run_id,
            compression=self._compression,
            refresh_topics_s=self._refresh_topics_s,
            rebalance_delay_ms=self._rebalance_delay_ms,
            rest_port=ports.free_port() if self._nodes > 1 or self._exactly_once else None,
            extra=self._extra,
            src_security=self._src_security,
            dst_security=self._dst_security,
        )

    def wait_tasks_started(self, timeout_s: float) -> bool:
        """Wait until every source task has started (on every node, when there are several)."""
        wanted = min(self._tasks, self._nodes) if self._nodes > 1 else 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            started = [_started_tasks(log) for log in self.logs()]
            if sum(1 for tasks in started if tasks) >= wanted and len(set().union(*started)) >= self._tasks:
                return True
            time.sleep(0.5)
        return False

    def add_topics(self, topics: Sequence[str]) -> float:
        # MirrorMaker learns of new topics only by polling the source against its pattern;
        # the caller has created them already, so there is nothing to ask.
        return time.time()

    def pids(self) -> list[int]:
        return [pid for pid in list(self._pids.values()) if process.is_ours(pid, self._marker)]

    def kill_one(self) -> str:
        node = f"node-{self._nodes}"
        process.stop(self._pids[node], self._marker, hard=True)
        return node

    def describe(self) -> dict[str, object]:
        return {
            "system": "MirrorMaker 2 (connect-mirror 4.3.1, dedicated mode)",
            "nodes": self._nodes,
            "tasks_max": self._tasks,
            "heap": self._heap,
            "compression": self._compression,
            "exactly_once": self._exactly_once,
            "refresh_topics_interval_s": self._refresh_topics_s,
            "scheduled_rebalance_max_delay_ms": self._rebalance_delay_ms,
            "extra": self._extra,
        }

    def logs(self) -> list[Path]:
        return sorted(self._workdir.glob("mm2-node-*.log"))

    def stop(self) -> None:
        for pid in self._pids.values():
            process.signal_process(pid, signal.SIGTERM, self._marker)
        for pid in self._pids.values():
            process.stop(pid, self._marker, timeout_s=20)


def write_properties(path: Path, props: Mapping[str, str]) -> Path:
    """A Java ``.properties`` file of ``props``, escaped, readable by its owner only (it may
    hold a password or a private key)."""
    _write_private(path, "".join(f"{key}={_property_value(value)}\n" for key, value in props.items()))
    return path


def _write_private(path: Path, text: str) -> None:
    # Created 0600 from the start: it may hold a password or a private key.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


_TASK_START = re.compile(r"Starting task (MirrorSourceConnector-\d+)")


def _started_tasks(log: Path) -> set[str]:
    # Connect's own log is the only outside view of which node runs which task in dedicated mode.
    try:
        return set(_TASK_START.findall(log.read_text(errors="replace")))
    except OSError:
        return set()


def _escape(topic: str) -> str:
    # Kafka topic names allow only [a-zA-Z0-9._-]; '.' is the one regex metacharacter among them.
    return topic.replace(".", "\\.")
