"""Whether this worker may still act as the owner of its partitions, right now.

The controller gives a dead worker's partitions away (fencing its exactly-once producers first)
only after its ZooKeeper session expired, at least a session timeout after the worker last
heard from ZooKeeper. A worker frozen that long (SIGSTOP, a VM pause) wakes up with threads
that do not know yet: its copier could start a partition assigned before the freeze, or take a
fenced transactional id back, and write beside the new owner. The agent confirms the lease on
each successful read of the assignment, and a `LeaseKeeper` thread confirms it by a round trip
to the store on its own, so that an agent waiting on a long revoke never lets it lapse (an
exactly-once pipeline that needs the lease to take its transactional id back is what the revoke
waits for). Actions that claim ownership check it first, and wait for a confirmation (or for the
session to be found gone) when it is older than a safe fraction of the session timeout. Time is
monotonic, which keeps running while frozen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Lease:
    """Confirmed by the agent and its keeper, checked by copiers and pipelines (any thread)."""

    def __init__(self, valid_for_s: float) -> None:
        self.valid_for_s = valid_for_s
        self._confirmed: float | None = None
        self._revocations = 0
        self._lock = threading.Lock()

    def confirm(self, since: int | None = None) -> bool:
        """Confirm the lease now. With ``since`` (a `revocations` value read before the round
        trip that proved the session), only if no revoke came in between: a revoke always wins
        over a confirmation that raced it."""
        with self._lock:
            if since is not None and since != self._revocations:
                return False
            self._confirmed = time.monotonic()
            return True

    def revoke(self) -> None:
        with self._lock:
            self._revocations += 1
            self._confirmed = None

    def revocations(self) -> int:
        return self._revocations

    def valid(self) -> bool:
        confirmed = self._confirmed
        return confirmed is not None and time.monotonic() - confirmed < self.valid_for_s


def always() -> bool:
    """The lease of a copier used without an agent (tests, tools): always valid."""
    return True


class LeaseKeeper:
    """Confirms a lease every ``interval_s`` on its own thread while ``proves_session`` (a round
    trip to the store that raises or returns False when the session is in doubt) succeeds."""

    def __init__(self, lease: Lease, proves_session: Callable[[], bool], interval_s: float) -> None:
        self._lease = lease
        self._proves_session = proves_session
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="strait-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(self._interval_s + 5)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            since = self._lease.revocations()
            try:
                proven = self._proves_session()
            except Exception as exc:  # the store's errors: the agent's loop handles them
                log.debug("lease not confirmed: %s", exc)
                continue
            if proven:
                self._lease.confirm(since)
