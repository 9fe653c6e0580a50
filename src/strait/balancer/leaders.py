"""Preferred leaders: even out their counts, then the write rate they lead (leader bytes in).

Both reorder replica lists; no data moves. Counts come first and, with traffic measured, a
swap may not push a broker's leader bytes in or net out out of its band (`strait.balancer.loads`).
Then leader bytes in are evened by handing the hottest broker's partitions to followers leading
less, as long as every broker's leader count stays within one of where the count phase left
the extremes (or of even).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left

from strait.balancer.loads import GAIN
from strait.balancer.planner import Workspace

_EPSILON = 1e-9


def balance_leaders(ws: Workspace) -> None:
    """Even out preferred leaders over brokers by reordering replica lists (no data moves)."""
    brokers = [b for b in ws.model.brokers if b not in ws.excluded]
    if len(brokers) < 2:
        return
    loads = ws.loads
    if loads is not None:
        loads.freeze_band()
    led: dict[int, list[int]] = {b: [] for b in ws.model.brokers}
    for pidx, reps in enumerate(ws.replicas):
        if len(reps) > 1:
            led.setdefault(reps[0], []).append(pidx)
    count = {b: len(v) for b, v in led.items()}
    most = [(-count[b], b) for b in brokers]
    least = [(count[b], b) for b in brokers]
    heapq.heapify(most)
    heapq.heapify(least)

    def top(heap: list[tuple[int, int]], sign: int) -> int | None:
        # Entries go stale when a count changes; the current one was pushed at that time.
        while heap and sign * heap[0][0] != count[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    # Per broker, how far its led list has been tried. A partition that found no follower with
    # few enough leaders is not tried again for that broker: the broker's own count only falls,
    # so it would mostly fail again, and re-scanning made this phase quadratic.
    cursor: dict[int, int] = {}
    brokers_set = set(brokers)  # live, not drained: the brokers that may lead
    while True:
        b_max, b_min = top(most, -1), top(least, 1)
        if b_max is None or b_min is None or count[b_max] - count[b_min] <= 1:
            break
        candidates = led[b_max]
        i = cursor.get(b_max, 0)
        moved = False
        while i < len(candidates):
            pidx = candidates[i]
            followers = [x for x in ws.replicas[pidx][1:] if x in brokers_set]
            if loads is not None:  # a leader swap may not push a broker's traffic out of its band
                followers = [x for x in followers if loads.allows_lead(pidx, b_max, x)]
            best = min(followers, key=lambda x: (count[x], x)) if followers else None
            if best is not None and count[best] < count[b_max] - 1:
                del candidates[i]
                _lead_with(ws, pidx, best, led, count)
                for b in (b_max, best):
                    heapq.heappush(most, (-count[b], b))
                    heapq.heappush(least, (count[b], b))
                moved = True
                break
            i += 1
        cursor[b_max] = i
        if not moved:
            # No partition led here has a follower with fewer leaders: this broker is done.
            heapq.heappop(most)


def _lead_with(ws: Workspace, pidx: int, new: int, led: dict[int, list[int]], count: dict[int, int]) -> None:
    reps = ws.replicas[pidx]
    old = reps[0]
    if new == old:
        return
    j = reps.index(new)
    reps[0], reps[j] = reps[j], reps[0]
    disks = ws.disks[pidx]
    disks[0], disks[j] = disks[j], disks[0]
    if ws.loads is not None:
        ws.loads.led(pidx, old, new)
    led.setdefault(new, []).append(pidx)
    count[old] -= 1
    count[new] = count.get(new, 0) + 1
    ws.touched.add(pidx)


def balance_leader_traffic(ws: Workspace) -> None:
    """Hand leadership of written partitions from the broker leading most bytes in to followers.

    A step either hands one partition to a follower (when the leader counts allow it) or
    exchanges two: the hot broker hands a partition to a follower and takes back a lighter one
    that broker leads, so counts stay. Each step lowers the larger leader bytes in of the two.
    """
    loads = ws.loads
    if loads is None or len(loads.kept) < 2:
        return
    kept = set(loads.kept)
    count = dict.fromkeys(loads.kept, 0)
    led: dict[int, list[int]] = {b: [] for b in loads.kept}  # partitions with followers, per leader
    written: dict[int, set[int]] = {b: set() for b in loads.kept}  # those of them written
    for pidx, reps in enumerate(ws.replicas):
        if reps and reps[0] in kept:
            count[reps[0]] += 1
            if len(reps) > 1:
                led[reps[0]].append(pidx)
                if loads.write[pidx] > 0:
                    written[reps[0]].add(pidx)
    mean = sum(count.values()) / len(count)
    most = max(max(count.values()), -(-sum(count.values()) // len(count)) + 1)
    least = min(min(count.values()), int(mean) - 1)
    band_hi = loads.bands["net_out"][1]
    goal = ws.goals.traffic_threshold * loads.mean("leader_in")
    given_up: set[int] = set()
    for _ in range(4 * len(loads.hot) + 16):
        ranked = sorted((b for b in loads.kept if b not in given_up), key=lambda b: (loads.leader_in[b], b))
        if len(ranked) < 2:
            break
        hot = ranked[-1]
        if loads.leader_in[hot] - loads.leader_in[ranked[0]] <= goal + _EPSILON:
            break
        hi_out = max(band_hi, loads.net_out[hot])
        heavy = sorted(written[hot], key=lambda p: (-loads.write[p], p))[:64]
        best: tuple[float, int, int, int] | None = None  # score, follower, handed, taken back (-1: none)
        # Followers of the heavy partitions, least loaded first; the first three are searched for exchanges.
        followers = sorted(
            {f for p in heavy for f in ws.replicas[p][1:] if f in kept},
            key=lambda f: (loads.leader_in[f], f),
        )
        for rank, f in enumerate(followers):
            if loads.leader_in[f] >= loads.leader_in[hot] - _EPSILON:
                break
            half = (loads.leader_in[hot] - loads.leader_in[f]) / 2
            back = sorted((loads.write[q], q) for q in led[f] if hot in ws.replicas[q]) if rank < 3 else []
            for pidx in heavy:
                if f not in ws.replicas[pidx]:
                    continue
                w = loads.write[pidx]
                options = []
                if count[hot] - 1 >= least and count[f] + 1 <= most:
                    options.append((0.0, -1))
                if back:
                    # The one to take back that leaves the two closest: weight near w - half.
                    i = bisect_left(back, (w - half, -1))
                    options.extend(back[j] for j in (i - 1, i) if 0 <= j < len(back))
                for wq, qidx in options:
                    d = w - wq
                    if d <= _EPSILON or d > 2 * half * (1 - GAIN):
                        continue
                    o = loads.out(pidx) - (loads.out(qidx) if qidx >= 0 else 0.0)
                    if loads.net_out[f] + o > hi_out or loads.net_out[hot] - o > hi_out:
                        continue
                    score = abs(d - half)
                    if best is None or (score, f, pidx, qidx) < best:
                        best = (score, f, pidx, qidx)
        if best is None:
            given_up.add(hot)
            continue
        _, f, pidx, qidx = best
        _hand(led, written, loads.write, pidx, hot, f)
        _swap(ws, pidx, f)
        if qidx >= 0:
            _hand(led, written, loads.write, qidx, f, hot)
            _swap(ws, qidx, hot)
        else:
            count[hot] -= 1
            count[f] += 1


def _hand(
    led: dict[int, list[int]], written: dict[int, set[int]], write: list[float], pidx: int, old: int, new: int
) -> None:
    led[old].remove(pidx)
    led[new].append(pidx)
    if write[pidx] > 0:
        written[old].discard(pidx)
        written[new].add(pidx)


def _swap(ws: Workspace, pidx: int, new: int) -> None:
    reps = ws.replicas[pidx]
    old = reps[0]
    j = reps.index(new)
    reps[0], reps[j] = reps[j], reps[0]
    disks = ws.disks[pidx]
    disks[0], disks[j] = disks[j], disks[0]
    if ws.loads is not None:
        ws.loads.led(pidx, old, new)
    ws.touched.add(pidx)
