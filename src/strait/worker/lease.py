"""Whether this worker may still act as the owner of its partitions, right now.

The controller gives a dead worker's partitions away (fencing its exactly-once producers first)
only after its ZooKeeper session expired, at least a session timeout after the worker last
heard from ZooKeeper. A worker frozen that long (SIGSTOP, a VM pause) wakes up with threads
that do not know yet: its copier could start a partition assigned before the freeze, or take a
fenced transactional id back, and write beside the new owner. The agent confirms the lease on
each successful read of the assignment; actions that claim ownership check it first, and wait
for the agent to confirm again (or to find the session gone) when it is older than a safe
fraction of the session timeout. Time is monotonic, which keeps running while frozen.
"""

from __future__ import annotations

import time


class Lease:
    """Confirmed by the agent, checked by copiers and pipelines (any thread)."""

    def __init__(self, valid_for_s: float) -> None:
        self.valid_for_s = valid_for_s
        self._confirmed: float | None = None

    def confirm(self) -> None:
        self._confirmed = time.monotonic()

    def revoke(self) -> None:
        self._confirmed = None

    def valid(self) -> bool:
        confirmed = self._confirmed
        return confirmed is not None and time.monotonic() - confirmed < self.valid_for_s


def always() -> bool:
    """The lease of a copier used without an agent (tests, tools): always valid."""
    return True
