"""Start and stop the sandbox's JVMs, and nothing else.

Every process is started in its own session (so a Ctrl-C in the terminal that ran
``strait sandbox up`` does not take the clusters down) and is stopped only by the pid we
recorded, after checking that the pid still belongs to a process of ours: its command line
must mention our state folder, so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from strait.sandbox.errors import SandboxError
from strait.sandbox.java import java_binary as java_binary  # the sandbox's JVMs start with it

# Small heaps and few GC/compiler threads: the sandbox runs several JVMs on two cores.
JVM_OPTIONS = (
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:CICompilerCount=2",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


def spawn_java(
    *,
    classpath: str,
    main_class: str,
    args: Sequence[str],
    log_file: Path,
    heap: str = "384m",
    system_properties: dict[str, str] | None = None,
    extra_options: Sequence[str] = (),
) -> int:
    """Start ``main_class`` detached, stdout and stderr to ``log_file``; return its pid.
    ``extra_options`` come after :data:`JVM_OPTIONS`, so they win over them."""
    props = [f"-D{k}={v}" for k, v in (system_properties or {}).items()]
    cmd = [java_binary(), f"-Xmx{heap}", *JVM_OPTIONS, *extra_options, *props, "-cp", classpath, main_class, *args]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    return proc.pid


def run_java(*, classpath: str, main_class: str, args: Sequence[str], log_file: Path, timeout_s: float = 120) -> None:
    """Run a short-lived Java tool to completion; raise naming the log file if it fails."""
    cmd = [java_binary(), "-Xmx256m", *JVM_OPTIONS, "-cp", classpath, main_class, *args]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    if result.returncode != 0:
        raise SandboxError(f"{main_class} exited with {result.returncode}; see {log_file}")


def _reap(pid: int) -> None:
    # Our own children must be reaped or they linger as zombies that still "exist".
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_ours(pid: int, marker: str) -> bool:
    """True when ``pid`` is alive and its command line mentions ``marker`` (our state folder)."""
    _reap(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    if "State:\tZ" in status:
        return False
    return marker in cmdline


def signal_process(pid: int, sig: signal.Signals, marker: str) -> bool:
    """Send ``sig`` to ``pid`` if it is still ours; return whether it was sent."""
    if not is_ours(pid, marker):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop(pid: int, marker: str, *, timeout_s: float = 20.0, hard: bool = False) -> None:
    """Stop a process of ours: SIGTERM and wait, then SIGKILL. ``hard`` sends SIGKILL at once."""
    if not signal_process(pid, signal.SIGKILL if hard else signal.SIGTERM, marker):
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_ours(pid, marker):
            return
        time.sleep(0.1)
    signal_process(pid, signal.SIGKILL, marker)
    deadline = time.monotonic() + 10
    while is_ours(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.1)
