"""Port allocation on 127.0.0.1 for the sandbox's servers.

Ports the OS hands out for ``bind(0)`` come from the ephemeral range, the same range every
outgoing connection's local port comes from. On a busy machine a client can take such a port
between our probe and the broker's bind ("Address already in use"). Servers therefore get
ports below the ephemeral range, picked at random and checked free. A port is handed out once
per process: the clusters of one sandbox are laid out before any of them binds, so a probe alone
could give two brokers the same free port.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from strait.sandbox.errors import SandboxError

_LOWEST = 10_000
_ATTEMPTS = 200
_handed: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nobody listens on right now and not handed out before in this process, outside the
    ephemeral range when there is room."""
    high = _ephemeral_low() - 1
    if high - _LOWEST >= 1000:
        for _ in range(_ATTEMPTS):
            port = random.randint(_LOWEST, high)
            if port not in _handed and _bindable(port):
                _handed.add(port)
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _handed:
            _handed.add(port)
            return port


def ensure_free(port: int, what: str) -> None:
    """Raise naming ``what`` if ``port`` on 127.0.0.1 is already taken."""
    if not _bindable(port):
        raise SandboxError(f"port {port} for {what} is already in use on 127.0.0.1")


def is_listening(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
