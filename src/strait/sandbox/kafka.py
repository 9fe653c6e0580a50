"""Real Apache Kafka brokers in KRaft mode for the sandbox.

Each cluster's broker 1 also acts as its single KRaft controller (combined mode); the
other brokers are brokers only. That keeps a cluster to one JVM per broker on a two-core
machine; fault tests that restart a broker pick one other than 1 when they need the
quorum to stay up.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KAFKA_MAIN = "kafka.Kafka"
# The listener a proxy stands in front of (BrokerLayout.proxied_port).
PROXIED_LISTENER = "PROXIED"
STORAGE_TOOL = "kafka.tools.StorageTool"


def new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding.

    Like Kafka's own Uuid.randomUuid, an id starting with '-' is drawn again: the storage
    tool's argument parser would read it as an option (1 draw in 64).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class BrokerLayout:
    """Where one broker listens and keeps its data."""

    node_id: int
    port: int
    controller_port: int  # the cluster's controller listener (on broker 1)
    rack: str | None
    log_dirs: tuple[Path, ...]
    config: Path
    log: Path
    cluster_size: int
    # The client/inter-broker listener's name, which is also its security protocol.
    listener: str = "PLAINTEXT"
    controller_protocol: str = "PLAINTEXT"
    security: tuple[str, ...] = ()  # server.properties lines of a secured cluster (sandbox.security)
    # A second, plaintext listener for clients that go through a proxy (a delayed link): the broker
    # listens on ``proxied_port`` and tells its clients to connect to ``proxy_port``, so every
    # connection a client opens from metadata, not only its bootstrap, passes the proxy.
    proxied_port: int | None = None
    proxy_port: int | None = None

    @property
    def is_controller(self) -> bool:
        return self.node_id == 1


def write_config(layout: BrokerLayout) -> Path:
    """Render server.properties with small thread pools and test-friendly timings."""
    replication = min(3, layout.cluster_size)
    proxied = layout.proxied_port is not None and layout.proxy_port is not None
    listeners = f"{layout.listener}://127.0.0.1:{layout.port}"
    advertised = listeners
    protocols = f"{layout.listener}:{layout.listener},CONTROLLER:{layout.controller_protocol}"
    if proxied:
        listeners += f",{PROXIED_LISTENER}://127.0.0.1:{layout.proxied_port}"
        advertised += f",{PROXIED_LISTENER}://127.0.0.1:{layout.proxy_port}"
        protocols += f",{PROXIED_LISTENER}:PLAINTEXT"
    lines = [
        f"node.id={layout.node_id}",
        f"controller.quorum.voters=1@127.0.0.1:{layout.controller_port}",
        "controller.listener.names=CONTROLLER",
        f"listener.security.protocol.map={protocols}",
        # Brokers replicate over the same (secured) listener clients use.
        f"inter.broker.listener.name={layout.listener}",
        f"advertised.listeners={advertised}",
        f"log.dirs={','.join(str(d) for d in layout.log_dirs)}",
        "num.network.threads=2",
        "num.io.threads=2",
        "num.replica.fetchers=1",
        "num.recovery.threads.per.data.dir=1",
        "background.threads=2",
        "log.cleaner.threads=1",
        # The cleaner's key map is 128 MiB by default, allocated in one piece when it starts;
        # in a 256 MiB heap that ended a broker with OutOfMemoryError (CI, 2026-12-01). 16 MiB
        # holds ~700k keys, far more than any sandbox topic compacts.
        "log.cleaner.dedupe.buffer.size=16777216",
        "num.partitions=1",
        f"default.replication.factor={replication}",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=4",
        f"transaction.state.log.replication.factor={replication}",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=4",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        "delete.topic.enable=true",
        "log.retention.check.interval.ms=30000",
        "replica.lag.time.max.ms=10000",
        "socket.request.max.bytes=104857600",
    ]
    if layout.is_controller:
        lines += [
            "process.roles=broker,controller",
            f"listeners={listeners},CONTROLLER://127.0.0.1:{layout.controller_port}",
        ]
    else:
        lines += ["process.roles=broker", f"listeners={listeners}"]
    if layout.rack is not None:
        lines.append(f"broker.rack={layout.rack}")
    lines += layout.security
    for directory in layout.log_dirs:
        directory.mkdir(parents=True, exist_ok=True)
    layout.config.parent.mkdir(parents=True, exist_ok=True)
    # 0600: a secured broker's file holds its inter-broker password.
    fd = os.open(layout.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    return layout.config


def format_args(config: Path, cluster_id: str, scram: Sequence[str] = ()) -> list[str]:
    """StorageTool arguments; ``scram`` holds ``--add-scram`` values (users created at format time)."""
    extra = [arg for credential in scram for arg in ("--add-scram", credential)]
    return ["format", "-t", cluster_id, "-c", str(config), "--ignore-formatted", *extra]


LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
logger.zk.name = org.apache.zookeeper
logger.zk.level = info
"""
