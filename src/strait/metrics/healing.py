"""Healing stuck partitions: which to move and where, with bounded retries. Pure.

A stuck partition is moved away from the worker that holds it: that worker is *avoided* for the
partition for `cooldown_s`. After `max_moves` moves that did not help, the partition is
flagged for a person instead (the problem is probably not the worker: a deleted destination, a
broken source partition). A partition that is healthy again for `cooldown_s` is forgotten.

A move away from a hung worker cannot wait for that worker to hand the partition over (it will
not): `steer` also voids the hung worker's claim, so the new owner starts at once from the last
committed checkpoint. The hung worker may copy a few records again when it wakes up, before it
sees the new assignment (at-least-once); nothing is lost, because checkpoints only ever cover
records the destination acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class HealingPolicy:
    stuck_after_s: float = 60.0
    max_moves: int = 3
    cooldown_s: float = 600.0


@dataclass(frozen=True)
class Healing:
    """The healing record of one partition."""

    moves: int = 0
    avoid: frozenset[str] = frozenset()
    last_move: float = 0.0
    healthy_since: float | None = None
    flagged: str | None = None  # why a person must look at it


@dataclass(frozen=True)
class Decision(Generic[K]):
    """The outcome of one healing round: the new records, and what happened this round."""

    records: dict[K, Healing]
    moved: dict[K, str] = field(default_factory=dict)  # partition -> worker it was moved away from
    flagged: dict[K, str] = field(default_factory=dict)


def heal(
    records: Mapping[K, Healing],
    stuck_on: Mapping[K, str],
    workers: Collection[str],
    now: float,
    policy: HealingPolicy,
) -> Decision[K]:
    """Decide this round. `stuck_on`: stuck partition -> its owner; `workers`: assignable workers."""
    out: dict[K, Healing] = {}
    moved: dict[K, str] = {}
    flagged: dict[K, str] = {}
    for key, record in records.items():
        if key in stuck_on:
            continue
        healthy_since = record.healthy_since if record.healthy_since is not None else now
        if now - healthy_since >= policy.cooldown_s and now - record.last_move >= policy.cooldown_s:
            continue  # healthy long enough: forget it, retries start again from zero
        out[key] = replace(record, healthy_since=healthy_since, flagged=None)
    for key, owner in stuck_on.items():
        record = records.get(key, Healing())
        record = replace(record, healthy_since=None)
        if record.flagged is not None or (record.moves and now - record.last_move < policy.stuck_after_s):
            # Flagged already, or moved moments ago: the new owner gets a full period first.
            out[key] = record
            continue
        others = [w for w in workers if w != owner and w not in record.avoid]
        if record.moves >= policy.max_moves:
            reason = f"still stuck after {record.moves} moves (last on {owner})"
        elif not others:
            reason = f"stuck on {owner} and no other worker can take it"
        else:
            out[key] = Healing(record.moves + 1, record.avoid | {owner}, now, None, None)
            moved[key] = owner
            continue
        out[key] = replace(record, flagged=reason)
        flagged[key] = reason
    return Decision(out, moved, flagged)


def avoided(records: Mapping[K, Healing], now: float, policy: HealingPolicy) -> dict[K, frozenset[str]]:
    """Partition -> workers it must not be given to (moves younger than the cooldown)."""
    return {k: r.avoid for k, r in records.items() if r.avoid and now - r.last_move < policy.cooldown_s}


def steer(
    desired: Mapping[K, str],
    written: Mapping[K, str | None],
    holding: Mapping[str, frozenset[K]],
    avoid: Mapping[K, frozenset[str]],
    workers: Collection[str],
    hung: Collection[str] = (),
    allowed: Callable[[K, str], bool] | None = None,
    clean: Callable[[K], bool] | None = None,
) -> tuple[dict[K, str], dict[K, str | None], dict[str, frozenset[K]]]:
    """Adjust one control cycle's inputs so that avoided and hung workers get nothing new.

    Returns (desired, written, holding) to plan the hand-over from. A partition whose desired
    owner it must avoid goes to the eligible worker with the fewest partitions; a partition may
    not *newly* go to a hung worker (one that stopped reporting) either. Claims of avoided
    workers are dropped from `written` and `holding` so that the new owner starts at once.
    `allowed(key, worker)` says whether a worker's pool may run the partition (route pools).
    `clean(key)` marks partitions that must be handed over cleanly (exactly-once routes): an
    avoided worker that still reports (not hung) keeps its claim, so the partition is first
    unassigned and moves only once that worker released it. Dropping the claim would rely on
    fencing the worker, and a live worker fenced a while ago may have started a new producer
    since (a CI chaos run saw two writers for 0.8 s and 630 duplicates that way).
    """
    counts: dict[str, int] = {w: 0 for w in workers}
    for owner in desired.values():
        counts[owner] = counts.get(owner, 0) + 1
    hung_set = set(hung)
    new_desired = dict(desired)
    for key in sorted(desired, key=repr):
        owner = desired[key]
        banned = set(avoid.get(key, frozenset()))
        newly_to_hung = owner in hung_set and written.get(key) != owner
        if owner not in banned and not newly_to_hung:
            continue
        banned |= hung_set
        candidates = [w for w in workers if w not in banned and (allowed is None or allowed(key, w))]
        if not candidates:
            continue
        previous = written.get(key)
        # Back to where it is copied now, if that is allowed: no move at all.
        target = previous if previous in candidates else min(candidates, key=lambda w: (counts.get(w, 0), w))
        assert target is not None
        counts[owner] -= 1
        counts[target] = counts.get(target, 0) + 1
        new_desired[key] = target

    def dropped(key: K, worker: str) -> bool:
        if worker not in avoid.get(key, frozenset()):
            return False
        return clean is None or not clean(key) or worker in hung_set

    new_written = {k: (None if w is not None and dropped(k, w) else w) for k, w in written.items()}
    new_holding = {w: frozenset(k for k in keys if not dropped(k, w)) for w, keys in holding.items()}
    return new_desired, new_written, new_holding
