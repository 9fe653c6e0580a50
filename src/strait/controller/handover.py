"""Turn the wanted assignment into the one to write, so that hand-overs are clean. Pure.

A partition moves from a live worker in two steps: first it is written as unowned (`None`),
so its old owner stops, waits for the destination's acknowledgements and commits; only when
no live worker reports holding it any more is it written to its new owner, which resumes
from that checkpoint. No two workers copy a partition at once, so a move duplicates nothing.
A dead worker holds nothing, so its partitions go to their new owners at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from strait.coordination.model import PartitionKey


def plan_handover(
    desired: Mapping[PartitionKey, str],
    written: Mapping[PartitionKey, str | None],
    holding: Mapping[str, frozenset[PartitionKey]],
) -> dict[PartitionKey, str | None]:
    """The assignment to write now, given the desired one, the one in force and what live
    workers hold."""
    holder: dict[PartitionKey, str] = {}
    for worker, keys in holding.items():
        for key in keys:
            holder[key] = worker
    plan: dict[PartitionKey, str | None] = {}
    for key, target in desired.items():
        previous = written.get(key)
        busy_elsewhere = holder.get(key, target) != target
        # A worker that was told to copy the partition may not have reported holding it yet:
        # unassign first in that case too, and wait for its report.
        told_elsewhere = previous is not None and previous != target and previous in holding
        plan[key] = None if busy_elsewhere or told_elsewhere else target
    return plan
