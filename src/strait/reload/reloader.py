"""Reads the configuration again, on request (SIGHUP) or when its file or a secret file it
references changes, and applies what :mod:`strait.reload.plan` decides.

A file that cannot be read, parsed or validated, or a secret that cannot be resolved, is refused
with the loader's error (naming the key) and the running configuration stays. New credentials
are handed to the live clients here (:func:`strait.clients.rotate_credentials`); the rest goes
to the process's ``apply``.
"""

from __future__ import annotations

import hashlib
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from strait import clients
from strait.config import ConfigError, StraitConfig
from strait.reload.plan import ReloadPlan, Role, plan
from strait.secrets import referenced_files

log = logging.getLogger(__name__)

# How often the configuration file and the secret files it references are checked for a change.
POLL_INTERVAL_S = 2.0


def defer_sighup() -> threading.Event:
    """Take SIGHUP from now on (its default action ends the process): the event tells whether
    one arrived before the process's reloader runs, which then reloads at once."""
    asked = threading.Event()
    signal.signal(signal.SIGHUP, lambda _signum, _frame: asked.set())
    return asked


class Reloader:
    """The running configuration of one process, and the thread that reloads it.

    ``load`` reads the file as the process did at start (environment overrides, command-line
    overrides); ``apply`` receives each plan that changes something, with the configuration now
    running, on the reloader's thread.
    """

    def __init__(
        self,
        *,
        path: Path,
        load: Callable[[], StraitConfig],
        running: StraitConfig,
        role: Role,
        apply: Callable[[ReloadPlan, StraitConfig], None],
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        self._path = Path(path)
        self._load = load
        self._running = running
        self._role = role
        self._apply = apply
        self._poll_interval_s = poll_interval_s
        self._asked = threading.Event()
        self._stopping = threading.Event()
        self._fingerprint = self._read_fingerprint()
        self._thread = threading.Thread(target=self._run, name="config-reload", daemon=True)

    @property
    def running(self) -> StraitConfig:
        """The configuration in force."""
        return self._running

    def request(self) -> None:
        """Reload soon (SIGHUP lands here): only sets a flag, so it is safe in a signal handler."""
        self._asked.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._asked.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            asked = self._asked.wait(self._poll_interval_s)
            if self._stopping.is_set():
                return
            self._asked.clear()
            fingerprint = self._read_fingerprint()
            if asked:
                cause = "SIGHUP"
            elif fingerprint != self._fingerprint:
                cause = f"{self._path} or a secret file it references changed"
            else:
                continue
            self._fingerprint = fingerprint
            try:
                self.reload(cause)
            except Exception:
                # A reload that fails half-way leaves what it applied; the process copies on.
                log.exception("reload (%s) failed", cause)

    def reload(self, cause: str) -> ReloadPlan | None:
        """Read, decide, apply; None when the new file is refused."""
        try:
            new = self._load()
        except ConfigError as exc:
            log.error("reload (%s) refused, the running configuration stays: %s", cause, exc)
            return None
        decided = plan(self._running, new, self._role)
        for key in decided.restart:
            log.warning("reload (%s): needs a restart: %s", cause, key)
        for cluster, credentials in decided.credentials.items():
            # Into the running maps the clients are made from (see rotate_credentials).
            count = clients.rotate_credentials(self._running.clusters[cluster], credentials)
            log.info("cluster %s: %d live client(s) take the new credentials", cluster, count)
        running = decided.config.model_copy(update={"clusters": self._running.clusters})
        self._running = running
        if not decided.applies:
            log.info("reload (%s): nothing to apply%s", cause, " live" if decided.restart else "")
            return decided
        self._apply(decided, running)
        log.info("reload (%s): applied %s", cause, "; ".join(decided.describe()))
        return decided

    def _read_fingerprint(self) -> str:
        """A digest of the configuration file and of every secret file it references."""
        digest = hashlib.sha256()
        try:
            text = self._path.read_bytes()
        except OSError as exc:
            return f"unreadable: {exc.strerror}"
        digest.update(text)
        for file in referenced_files(text.decode(errors="replace")):
            digest.update(str(file).encode() + b"\0")
            try:
                digest.update(file.read_bytes())
            except OSError as exc:
                digest.update(f"unreadable: {exc.strerror}".encode())
        return digest.hexdigest()
