"""The planning engine: moves replicas on a working copy of the model until the goals hold.

Phases run in order of how hard their rule is: drain (replicas on brokers being emptied must
go), racks (a partition with two replicas under one rack switch is fixed before anything else),
disks (spread usage over every disk of every broker, inter- and intra-broker moves chosen from
the same candidates; with traffic measured, no disk move pushes a broker's traffic out of its
band), then the phases of `strait.balancer.loads` (network in), `strait.balancer.leaders`
(leader counts, leader bytes in) and `strait.balancer.tiers` (hot replicas on SSD dirs). Every
phase checks the same three hard rules for each step: no rack violation is created, no disk
goes past the capacity limit, and a broker never holds two replicas of one partition.

Scale: disks live in two heaps (fullest / emptiest) with lazy invalidation, and each disk keeps
its replicas in a sorted list of packed (size, partition) integers, so one step costs about
O(log disks + a bounded scan) instead of a scan of the cluster.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice, repeat
from typing import TYPE_CHECKING

from strait.balancer.goals import Goals
from strait.balancer.model import ClusterModel, Partition, PartitionKey, max_per_rack

if TYPE_CHECKING:
    from strait.balancer.loads import Loads

# How many replicas of one source disk are examined for one destination before giving up on it;
# a bound that keeps one step cheap on disks holding thousands of replicas. Destinations in
# another rack get an eighth of it: there the rack rule rejects most replicas.
_SCAN_LIMIT = 64


@dataclass
class Outcome:
    """The changed placements plus what could not be achieved."""

    partitions: dict[PartitionKey, Partition]
    warnings: list[str] = field(default_factory=list)


class Workspace:
    """Mutable, integer-indexed placement state for one planning run."""

    def __init__(self, model: ClusterModel, goals: Goals, excluded: Collection[int] = ()) -> None:
        self.model = model
        self.goals = goals
        self.excluded = frozenset(excluded)
        racks = sorted(model.racks(), key=lambda r: (r is None, r or ""))
        rack_index = {r: i for i, r in enumerate(racks)}
        self.rack_count = len(racks)
        self.broker_rack = {b.id: rack_index[b.rack] for b in model.brokers.values()}
        parts = list(model.partitions.values())
        # Every replica's broker and dir, flat, in partition order: the per-replica work below is
        # done by C-level maps over these instead of a Python loop per partition (1M replicas).
        flat_brokers = [b for p in parts for b in p.replicas]
        flat_dirs = [d for p in parts for d in p.dirs]
        # Lists indexed by broker id: the rule checks run millions of times on big clusters.
        # Replicas on brokers missing from the model (offline) count as rack 0's: conservative.
        top_id = max(max(model.brokers, default=0), max(flat_brokers, default=0))
        self.rack_by_id = [0] * (top_id + 1)
        for b, r in self.broker_rack.items():
            self.rack_by_id[b] = r

        self.disk_broker: list[int] = []
        self.disk_path: list[str] = []
        self.disk_cap: list[int] = []
        self.disk_used: list[int] = []
        self.disk_limit: list[int] = []
        self.broker_disks: dict[int, list[int]] = {b: [] for b in model.brokers}
        disk_index: dict[tuple[int, str], int] = {}
        for d in model.all_dirs():
            i = len(self.disk_broker)
            disk_index[(d.broker, d.path)] = i
            self.disk_broker.append(d.broker)
            self.disk_path.append(d.path)
            self.disk_cap.append(d.capacity)
            self.disk_used.append(d.used)
            self.disk_limit.append(int(d.capacity * goals.capacity_limit))
            self.broker_disks[d.broker].append(i)
        self.disk_version = [0] * len(self.disk_broker)
        self.disk_ok = [
            cap > 0 and b not in self.excluded for b, cap in zip(self.disk_broker, self.disk_cap, strict=True)
        ]
        self.disk_rack = [self.rack_by_id[b] for b in self.disk_broker]

        self.keys: list[PartitionKey] = list(model.partitions)
        self.n = n = max(len(self.keys), 1)
        self.size: list[int] = [p.size for p in parts]
        self.replicas: list[list[int]] = [list(p.replicas) for p in parts]
        counts = list(map(len, self.replicas))
        # Where each replica is, as a disk index; -1 for a dir the model does not know (offline
        # dir, unknown broker): such a replica cannot be planned around, so it stays in place and
        # out of every index.
        placed = list(map(disk_index.get, zip(flat_brokers, flat_dirs, strict=True), repeat(-1)))
        self.disks: list[list[int]] = [placed[end - k : end] for end, k in zip(accumulate(counts), counts, strict=True)]
        # Each disk's replicas as sorted packed (size, partition) integers. A replica on no known
        # disk (-1) lands in the extra last list, dropped afterwards.
        items: list[list[int]] = [[] for _ in range(len(self.disk_broker) + 1)]
        packed = chain.from_iterable(map(repeat, [size * n + pidx for pidx, size in enumerate(self.size)], counts))
        deque(map(list.append, map(items.__getitem__, placed), packed), maxlen=0)
        items.pop()
        for lst in items:
            lst.sort()
        self.items = items
        self.touched: set[int] = set()
        # Broker traffic (`strait.balancer.loads`), when measured; `guarded` makes `can_host`
        # refuse moves that would push a broker's traffic out of its band (the disk phase).
        self.loads: Loads | None = None
        self.guarded = False

    # ---- measures -------------------------------------------------------------------------

    def ratio(self, d: int) -> float:
        cap = self.disk_cap[d]
        return self.disk_used[d] / cap if cap > 0 else 1.0

    def usable(self, d: int) -> bool:
        return self.disk_ok[d]

    def mean(self, disks: Collection[int] | None = None) -> float:
        """The usage ratio every usable disk (of `disks`, default all) would have if even; data on
        drained brokers' disks counts, since it has to land on the rest."""
        cap = used = 0
        for d in range(len(self.disk_broker)) if disks is None else disks:
            used += self.disk_used[d]
            if self.usable(d):
                cap += self.disk_cap[d]
        return used / cap if cap else 0.0

    # ---- rules ----------------------------------------------------------------------------

    def can_host(self, pidx: int, from_broker: int, to_disk: int) -> bool:
        """Whether the replica of `pidx` on `from_broker` may move to `to_disk` (all hard rules)."""
        if not self.fits(pidx, to_disk):
            return False
        to_broker = self.disk_broker[to_disk]
        return to_broker == from_broker or self.may_join(pidx, from_broker, to_broker)

    def fits(self, pidx: int, to_disk: int) -> bool:
        """Whether `to_disk` is usable and can take `pidx` under the capacity limit."""
        return self.disk_ok[to_disk] and self.disk_used[to_disk] + self.size[pidx] <= self.disk_limit[to_disk]

    def may_join(self, pidx: int, from_broker: int, to_broker: int) -> bool:
        """The rules of broker `to_broker` taking the replica of `pidx` from another broker: it holds
        none yet, the rack rule holds, and (while `guarded`) both brokers' traffic stays in its band."""
        reps = self.replicas[pidx]
        if to_broker in reps:
            return False
        racks = self.rack_by_id
        rack = racks[to_broker]
        same = 1
        for b in reps:
            if b != from_broker and racks[b] == rack:
                same += 1
        if same > -(-len(reps) // self.rack_count):
            return False
        return not self.guarded or self.loads is None or self.loads.allows_move(pidx, from_broker, to_broker)

    def move(self, pidx: int, from_broker: int, to_disk: int) -> None:
        reps = self.replicas[pidx]
        slot = reps.index(from_broker)
        from_disk = self.disks[pidx][slot]
        size = self.size[pidx]
        packed = size * self.n + pidx
        if from_disk >= 0:
            lst = self.items[from_disk]
            i = bisect_right(lst, packed) - 1
            del lst[i]
            self.disk_used[from_disk] -= size
            self.disk_version[from_disk] += 1
        lst = self.items[to_disk]
        lst.insert(bisect_right(lst, packed), packed)
        self.disk_used[to_disk] += size
        self.disk_version[to_disk] += 1
        if self.loads is not None and self.disk_broker[to_disk] != from_broker:
            self.loads.moved(pidx, slot, from_broker, self.disk_broker[to_disk])
        reps[slot] = self.disk_broker[to_disk]
        self.disks[pidx][slot] = to_disk
        self.touched.add(pidx)

    # ---- result ---------------------------------------------------------------------------

    def outcome(self, warnings: list[str]) -> Outcome:
        parts: dict[PartitionKey, Partition] = {}
        partitions, keys, paths = self.model.partitions, self.keys, self.disk_path
        for pidx in sorted(self.touched):
            key = keys[pidx]
            old = partitions[key]
            reps = tuple(self.replicas[pidx])
            placed = self.disks[pidx]
            if -1 not in placed:
                dirs = tuple([paths[d] for d in placed])
            else:  # a replica on a dir the model does not know stays where it is
                dirs = tuple(
                    paths[d] if d >= 0 else old.dirs[old.replicas.index(b)] for b, d in zip(reps, placed, strict=True)
                )
            leader = old.leader if old.leader in reps else reps[0]
            parts[key] = Partition(old.topic, old.partition, reps, dirs, old.size, leader)
        return Outcome(parts, warnings)


class _DiskHeap:
    """Disks ordered by usage ratio (ascending, or descending with `fullest`), lazily refreshed.

    A disk whose usage changes is pushed again with its new version; the old entry stays until it
    surfaces (`_clean`) or the heap is compacted, so an update costs O(log n).
    """

    def __init__(self, ws: Workspace, disks: list[int], *, fullest: bool) -> None:
        self.ws = ws
        self.sign = -1.0 if fullest else 1.0
        self.members = set(disks)
        self.heap = [(self.sign * ws.ratio(d), d, ws.disk_version[d]) for d in disks]
        heapq.heapify(self.heap)

    def push(self, d: int) -> None:
        if d in self.members:
            heapq.heappush(self.heap, (self.sign * self.ws.ratio(d), d, self.ws.disk_version[d]))
            if len(self.heap) > 4 * len(self.members) + 64:
                self._compact()

    def _compact(self) -> None:
        versions, members = self.ws.disk_version, self.members
        self.heap = [e for e in self.heap if e[1] in members and e[2] == versions[e[1]]]
        heapq.heapify(self.heap)

    def _clean(self) -> None:
        heap, versions, members, pop = self.heap, self.ws.disk_version, self.members, heapq.heappop
        while heap:
            _, d, version = heap[0]
            if d in members and version == versions[d]:
                return
            pop(heap)

    def peek(self) -> int | None:
        self._clean()
        return self.heap[0][1] if self.heap else None

    def drop(self, d: int) -> None:
        """Stop offering `d`."""
        self.members.discard(d)

    def walk(self) -> Iterator[int]:
        """Current disks in heap order, lazily, without changing the heap: a best-first walk of
        the heap's tree, so the first k cost O(k log k) whatever the heap's size. The heap must
        not change while a walk is used."""
        self._clean()
        heap, versions, members = self.heap, self.ws.disk_version, self.members
        if not heap:
            return
        size = len(heap)
        frontier = [(heap[0], 0)]
        while frontier:
            entry, i = heapq.heappop(frontier)
            d = entry[1]
            if d in members and entry[2] == versions[d]:
                yield d
            child = 2 * i + 1
            if child < size:
                heapq.heappush(frontier, (heap[child], child))
                if child + 1 < size:
                    heapq.heappush(frontier, (heap[child + 1], child + 1))

    def take(self, k: int) -> list[int]:
        """Up to k current disks in heap order; they stay in the heap."""
        return list(islice(self.walk(), k))

    def ordered(self) -> list[int]:
        """All current disks in heap order (a full sort; for rare, exhaustive searches)."""
        return sorted(self.members, key=lambda d: (self.sign * self.ws.ratio(d), d))


def _place(ws: Workspace, emptiest: _DiskHeap, pidx: int, from_broker: int) -> int | None:
    """The emptiest disk on another broker that may take the replica of `pidx` now on `from_broker`."""
    for d in emptiest.take(ws.goals.max_candidates):
        if ws.disk_broker[d] != from_broker and ws.can_host(pidx, from_broker, d):
            return d
    for d in emptiest.ordered():
        if ws.disk_broker[d] != from_broker and ws.can_host(pidx, from_broker, d):
            return d
    return None


def drain(ws: Workspace, warnings: list[str]) -> None:
    """Move every replica off the excluded brokers, biggest first, each to the emptiest disk allowed."""
    emptiest = _DiskHeap(ws, [d for d in range(len(ws.disk_broker)) if ws.usable(d)], fullest=False)
    work = [(-ws.size[pidx], pidx, b) for pidx, reps in enumerate(ws.replicas) for b in reps if b in ws.excluded]
    work.sort()
    for _, pidx, b in work:
        target = _place(ws, emptiest, pidx, b)
        if target is None:
            warnings.append(
                f"cannot move {name(ws, pidx)} off broker {b}: no disk fits it without breaking "
                "the rack rule or the capacity limit"
            )
            continue
        ws.move(pidx, b, target)
        emptiest.push(target)


def fix_racks(ws: Workspace, warnings: list[str]) -> None:
    """Move replicas out of racks that hold too many replicas of one partition."""
    emptiest = _DiskHeap(ws, [d for d in range(len(ws.disk_broker)) if ws.usable(d)], fullest=False)
    racks = ws.rack_by_id
    for pidx, reps in enumerate(ws.replicas):
        if len({racks[b] for b in reps}) == len(reps):
            continue  # one replica per rack at most: nothing is crowded (the common case, made cheap)
        limit = max_per_rack(len(reps), ws.rack_count)
        while True:
            counts: dict[int, int] = {}
            for b in reps:
                r = ws.broker_rack.get(b, 0)
                counts[r] = counts.get(r, 0) + 1
            crowded = sorted(r for r, c in counts.items() if c > limit)
            if not crowded:
                break
            # Move the crowded rack's replica on the fullest disk: it helps the disk goal too.
            movers = sorted(
                (b for b in reps if ws.broker_rack.get(b, 0) == crowded[0]),
                key=lambda b: (
                    -ws.ratio(ws.disks[pidx][reps.index(b)]) if ws.disks[pidx][reps.index(b)] >= 0 else 0.0,
                    b,
                ),
            )
            moved = False
            for b in movers:
                target = _place(ws, emptiest, pidx, b)
                if target is not None:
                    ws.move(pidx, b, target)
                    emptiest.push(target)
                    moved = True
                    break
            if not moved:
                warnings.append(
                    f"rack rule broken for {name(ws, pidx)} and cannot be fixed: no broker in another "
                    "rack has room for it"
                )
                break


def spread_disks(
    ws: Workspace,
    warnings: list[str],
    *,
    destinations: Collection[int] | None = None,
    within: Collection[int] | None = None,
) -> None:
    """Move replicas from the fullest disks to the emptiest until the spread is within threshold.

    `destinations` limits which brokers may receive data (used to fill new brokers only);
    `within` limits the disks taking part, data moving only among them (one storage tier).
    """
    group = range(len(ws.disk_broker)) if within is None else sorted(within)
    usable = [d for d in group if ws.usable(d)]
    if destinations is None:
        sinks = usable
        sources = usable
    else:
        allowed = set(destinations)
        sinks = [d for d in usable if ws.disk_broker[d] in allowed]
        sources = [d for d in usable if ws.disk_broker[d] not in allowed]
    if not sinks or not sources:
        return
    if ws.loads is not None:
        ws.loads.freeze_band()
    ws.guarded = ws.loads is not None
    try:
        _spread(ws, warnings, sinks, sources, destinations is not None, ws.mean(None if within is None else group))
    finally:
        ws.guarded = False


def _spread(
    ws: Workspace, warnings: list[str], sinks: list[int], sources: list[int], filling: bool, mean: float
) -> None:
    goals = ws.goals
    fullest = _DiskHeap(ws, sources, fullest=True)
    emptiest = _DiskHeap(ws, sinks, fullest=False)
    # With as many racks as replicas, inter-rack moves are mostly forbidden; the emptiest disks
    # of the source's own rack are always offered too, so a step does not search in vain.
    by_rack: dict[int, list[int]] = {}
    for d in sinks:
        by_rack.setdefault(ws.broker_rack.get(ws.disk_broker[d], 0), []).append(d)
    rack_emptiest = {r: _DiskHeap(ws, ds, fullest=False) for r, ds in by_rack.items()}
    budget = 4 * sum(len(r) for r in ws.replicas) + 1000
    # Filling stops once the new brokers hold a fair share; it does not rebalance the others.
    floor = mean - goals.threshold / 2 if filling else None
    while budget > 0:
        budget -= 1
        s = fullest.peek()
        e = emptiest.peek()
        if s is None or e is None:
            break
        if ws.ratio(e) >= floor if floor is not None else ws.ratio(s) - ws.ratio(e) <= goals.threshold:
            break
        local = rack_emptiest.get(ws.broker_rack.get(ws.disk_broker[s], 0))
        step = _best_step(ws, s, emptiest, local, mean)
        if step is None:
            fullest.drop(s)
            continue
        pidx, target = step
        ws.move(pidx, ws.disk_broker[s], target)
        # Only the heaps holding `s` or `target` change: a disk is in its own rack's heap alone.
        fullest.push(s)
        fullest.push(target)
        emptiest.push(s)
        emptiest.push(target)
        for d in (s, target):
            rack_heap = rack_emptiest.get(ws.broker_rack.get(ws.disk_broker[d], 0))
            if rack_heap is not None:
                rack_heap.push(d)
    if floor is not None:
        low = min(sinks, key=lambda d: (ws.ratio(d), d))
        if ws.ratio(low) < floor - 1e-9:
            warnings.append(
                f"broker {ws.disk_broker[low]} dir {ws.disk_path[low]} stays at {ws.ratio(low):.3f} usage, "
                f"below the fair share {mean:.3f}: no more replicas can move there without breaking "
                "the rack rule or the capacity limit"
            )
        return
    ratios = [ws.ratio(d) for d in sinks] + [ws.ratio(d) for d in sources]
    if ratios and max(ratios) - min(ratios) > goals.threshold + 1e-9:
        worst = max(sources, key=lambda d: (ws.ratio(d), -d))
        warnings.append(
            f"disk spread {max(ratios) - min(ratios):.3f} is above the threshold {goals.threshold:.3f}: "
            f"broker {ws.disk_broker[worst]} dir {ws.disk_path[worst]} cannot shed more without breaking "
            "the rack rule or the capacity limit, or its replicas are too large to move usefully"
        )


def _best_step(
    ws: Workspace, s: int, emptiest: _DiskHeap, local: _DiskHeap | None, mean: float
) -> tuple[int, int] | None:
    """A replica on disk `s` and the disk it should go to, or None if nothing helps.

    Disks of the source's own rack that are below the mean are tried first: there the rack rule
    rarely says no. Then the emptiest disks anywhere, with a shorter search each, because when
    partitions span every rack a move to another rack is mostly forbidden.
    """
    rs = ws.ratio(s)
    k = ws.goals.max_candidates
    rack = ws.disk_rack[s]
    # Destinations are walked lazily: the first one mostly takes a replica, so the rest are
    # never looked at (taking k from each heap every step was most of a big plan's time).
    near_walk = islice(local.walk(), k // 3 + 1) if local is not None else iter(())
    tried: set[int] = set()
    for d in near_walk:
        if d == s or ws.ratio(d) >= mean:
            continue
        tried.add(d)
        if ws.ratio(d) >= rs:
            break
        pidx = _pick_replica(ws, s, d, mean, _SCAN_LIMIT)
        if pidx is not None:
            return pidx, d
    for d in near_walk:  # the rest of the near ones are not offered again below
        if d != s and ws.ratio(d) < mean:
            tried.add(d)
    for d in islice(emptiest.walk(), k):
        if d == s or d in tried:
            continue
        if ws.ratio(d) >= rs:
            break
        pidx = _pick_replica(ws, s, d, mean, _SCAN_LIMIT if ws.disk_rack[d] == rack else _SCAN_LIMIT // 8)
        if pidx is not None:
            return pidx, d
    return None


def _pick_replica(ws: Workspace, s: int, d: int, mean: float, scan_limit: int) -> int | None:
    """The largest replica on `s` that moves no more than both disks need; failing that, the
    smallest larger one that still lowers the fullest of the two below where `s` is now."""
    cap_s, cap_d = ws.disk_cap[s], ws.disk_cap[d]
    used_s, used_d = ws.disk_used[s], ws.disk_used[d]
    room = ws.disk_limit[d] - used_d
    if room <= 0:
        return None
    excess = used_s - mean * cap_s
    deficit = mean * cap_d - used_d
    ideal = int(min(excess, deficit, room))
    items = ws.items[s]
    n = ws.n
    broker = ws.disk_broker[s]
    pos = bisect_right(items, ideal * n + n - 1) if ideal > 0 else 0
    for i in range(pos - 1, max(pos - 1 - scan_limit, -1), -1):
        size, pidx = divmod(items[i], n)
        if size == 0:
            break
        if ws.can_host(pidx, broker, d):
            return pidx
    rs, rd = used_s / cap_s, used_d / cap_d
    for packed in items[pos : pos + scan_limit]:
        size, pidx = divmod(packed, n)
        if size == 0:
            continue
        # Sizes only grow from here, so the first size that stops helping ends the search.
        if size > room or (used_d + size) / cap_d >= rs or size * (1 / cap_s + 1 / cap_d) >= 2 * (rs - rd):
            break
        if ws.can_host(pidx, broker, d):
            return pidx
    return None


def name(ws: Workspace, pidx: int) -> str:
    topic, partition = ws.keys[pidx]
    return f"{topic}-{partition}"
