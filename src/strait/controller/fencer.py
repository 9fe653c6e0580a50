"""Fencing the last writer of exactly-once partitions before anyone else may write them.

A worker whose ZooKeeper session ended (or that healing gave up on) may still be alive: frozen,
cut off, about to wake up with records and an open transaction. Before the leader hands such a
worker's exactly-once partitions to a new owner, it bumps the epoch of that worker's
transactional ids on the destination (:func:`strait.fencing.fence`): the old producer's open
transaction is aborted and every later write of it fails. Until that succeeded, the partitions
stay written to their last owner (so a new leader, reading the same assignment, fences again);
fencing runs on its own threads, so the control loop never waits for a slow destination.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from strait.coordination.model import PartitionKey
from strait.fencing import fence, worker_transactional_ids

log = logging.getLogger(__name__)

FENCE_TIMEOUT_S = 15.0
RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0
# A worker fenced while live (healing gave up on it) is not fenced again sooner than this.
REFENCE_AFTER_S = 60.0

FenceFunction = Callable[[Mapping[str, Any], Iterable[str], float], None]


class Fencer:
    """Fences (worker, route) pairs in the background; :meth:`fenced` says when one is done.

    ``destinations`` maps each exactly-once route to its destination cluster's properties.
    ``wake`` is called when a fence finishes, so the loop publishes the new owners at once.
    """

    def __init__(
        self,
        destinations: Mapping[str, Mapping[str, Any]],
        wake: Callable[[], None],
        *,
        fence_fn: FenceFunction = fence,
    ) -> None:
        self._destinations = dict(destinations)
        self._wake = wake
        self._fence = fence_fn
        self._lock = threading.Lock()
        self._done: dict[tuple[str, str], float] = {}  # pair -> when its fence began
        self._live_before: set[str] = set()
        self._returned: dict[str, float] = {}  # worker -> when it was last seen coming back to life
        self._handed: dict[tuple[str, str], float] = {}  # pair -> when the worker was last given a partition
        self._running: dict[tuple[str, str], Future[None]] = {}
        self._retry: dict[tuple[str, str], tuple[float, float]] = {}  # (next attempt, backoff)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="strait-fencer")
        self.failures = 0

    @property
    def routes(self) -> frozenset[str]:
        """The routes whose partitions need fencing before they move."""
        return frozenset(self._destinations)

    def fenced(self, worker: str, route: str) -> bool:
        """True once ``worker`` can write nothing more on ``route``; starts fencing it if needed."""
        pair = (worker, route)
        with self._lock:
            began = self._done.get(pair)
            if began is not None:
                since = max(self._returned.get(worker, float("-inf")), self._handed.get(pair, float("-inf")))
                if began >= since:
                    return True
                # Begun before the worker came back or was given a partition again: its producers
                # may have taken their ids back since (a new epoch), so this fence says nothing
                # about its later death.
                del self._done[pair]
            if pair in self._running:
                return False
            next_attempt, _ = self._retry.get(pair, (0.0, RETRY_MIN_S))
            if time.monotonic() < next_attempt:
                return False
            self._running[pair] = self._pool.submit(self._run, pair)
        return False

    def handed(self, worker: str, route: str) -> None:
        """``worker`` was just given a partition of ``route``: it may take its transactional ids
        back (a new epoch), so a fence begun before now no longer holds it."""
        if route not in self._destinations:
            return
        with self._lock:
            self._handed[(worker, route)] = time.monotonic()

    def forget(self, live_workers: Iterable[str]) -> None:
        """A worker that came back to life may own partitions again: a later death needs a new
        fence. One that stayed live (fenced because healing gave up on it) keeps its fence for
        ``REFENCE_AFTER_S``: forgetting it at once fenced such a worker again on every turn of
        the loop (a fence storm in the 30-minute chaos run, aborting each of its transactions)."""
        live = set(live_workers)
        now = time.monotonic()
        with self._lock:
            came_back = live - self._live_before
            for worker in came_back:
                # A fence still running, or finished after this, began too early to count.
                self._returned[worker] = now
            self._done = {
                pair: at
                for pair, at in self._done.items()
                if pair[0] not in live or (pair[0] not in came_back and now - at < REFENCE_AFTER_S)
            }
            self._live_before = live

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, pair: tuple[str, str]) -> None:
        worker, route = pair
        ids = worker_transactional_ids([route], worker)
        began = time.monotonic()
        try:
            self._fence(self._destinations[route], ids, FENCE_TIMEOUT_S)
        except Exception as exc:  # any failure (FenceError or else) means: not fenced, try again
            with self._lock:
                _, backoff = self._retry.get(pair, (0.0, RETRY_MIN_S))
                self._retry[pair] = (time.monotonic() + backoff, min(RETRY_MAX_S, backoff * 2))
                self._running.pop(pair, None)
                self.failures += 1
            log.error(
                "route %s: cannot fence worker %s yet, its partitions wait (retry in %.0fs): %s",
                route,
                worker,
                backoff,
                exc,
            )
            return
        with self._lock:
            self._done[pair] = began
            self._retry.pop(pair, None)
            self._running.pop(pair, None)
        log.info("route %s: worker %s fenced; its partitions can move", route, worker)
        self._wake()


def park_until_fenced(
    plan: Mapping[PartitionKey, str | None],
    written: Mapping[PartitionKey, str | None],
    trusted_from: Mapping[PartitionKey, str | None],
    live: set[str],
    fencer: Fencer,
    *,
    releasing: Mapping[PartitionKey, str] | None = None,
    untrusted_holders: Mapping[PartitionKey, str] | None = None,
    unknown_last_writers: Collection[str] = (),
) -> tuple[dict[PartitionKey, str | None], int]:
    """Keep exactly-once partitions with their last writer until that writer is fenced.

    A partition needs a fence when it moves away from a writer the loop no longer trusts to have
    let go: one that is not live, or whose claim healing voided (``trusted_from`` no longer names
    it). Such partitions stay written to the old writer meanwhile.

    A partition written as unowned (``None``) is being handed over: ``releasing`` names its last
    writer, as far as this leader knows. Written ``None``, the assignment no longer says who
    that was, and the 30-minute chaos run found the gap: the last writer's session ended (or
    healing stopped waiting for it) while it still copied, and the partition went to a new
    owner unfenced, two writers at once. So it too is fenced first when it is not live, or when
    it still holds the partition but the loop stopped waiting for it (``untrusted_holders``).
    Where the leader does not know the last writer (it was elected in the middle of the
    hand-over), every worker in ``unknown_last_writers`` (those not live) is fenced first.
    Returns the plan and how many partitions are parked.
    """
    routes = fencer.routes
    result = dict(plan)
    parked = 0
    for key, target in plan.items():
        if key.route not in routes:
            continue
        previous = written.get(key)
        if previous is None:
            last = (releasing or {}).get(key)
            if last is None:
                if target is None or (untrusted_holders or {}).get(key) is not None:
                    continue
                waiting = [w for w in sorted(unknown_last_writers) if not fencer.fenced(w, key.route)]
                if waiting:
                    result[key] = None
                    parked += 1
                continue
            if last == target:
                continue
            if last in live and (untrusted_holders or {}).get(key) != last:
                continue  # it lets go by itself; the plan waits while it holds the partition
            if not fencer.fenced(last, key.route):
                result[key] = None
                parked += 1
            continue
        if previous == target:
            continue
        if previous in live and trusted_from.get(key) == previous:
            continue  # a clean hand-over: the old owner commits its transaction when it revokes
        if not fencer.fenced(previous, key.route):
            result[key] = previous
            parked += 1
    return result, parked
