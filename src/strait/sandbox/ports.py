"""Free-port allocation on 127.0.0.1."""

from __future__ import annotations

import socket

from strait.sandbox.errors import SandboxError


def free_port() -> int:
    """A port nobody listens on right now (the OS picks it; we bind 127.0.0.1 only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_free(port: int, what: str) -> None:
    """Raise naming ``what`` if ``port`` on 127.0.0.1 is already taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise SandboxError(f"port {port} for {what} is already in use on 127.0.0.1") from exc


def is_listening(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
