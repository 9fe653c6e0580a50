"""A real single-node ZooKeeper server for the sandbox."""

from __future__ import annotations

import socket
from pathlib import Path

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def write_config(directory: Path, port: int) -> Path:
    """Write zoo.cfg. A short tick lets tests use session timeouts of a few seconds."""
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    cfg = directory / "zoo.cfg"
    cfg.write_text(
        "\n".join(
            [
                "tickTime=500",
                "initLimit=10",
                "syncLimit=5",
                "minSessionTimeout=1000",
                "maxSessionTimeout=60000",
                f"dataDir={data}",
                f"clientPort={port}",
                "clientPortAddress=127.0.0.1",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                "maxClientCnxns=0",
                "",
            ]
        )
    )
    return cfg


def is_serving(port: int) -> bool:
    """ZooKeeper answers 'imok' to 'ruok' once it serves clients."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False
