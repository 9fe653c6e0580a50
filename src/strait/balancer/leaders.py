"""Preferred leaders: even out their counts, then the write rate they lead (leader bytes in).

Both reorder replica lists; no data moves. Counts come first and, with traffic measured, a
swap may not push a broker's leader bytes in or net out out of its band (`strait.balancer.loads`).
Then leader bytes in are evened by handing the hottest broker's partitions to followers leading
less, as long as every broker's leader count stays within one of where the count phase left it
(or of even). Without traffic the counts end as even as the replicas allow where any two brokers
may share a partition (`tests/unit/test_balancer_leaders.py` checks against the best choice).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import defaultdict

from strait.balancer.loads import GAIN, Ranking
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
    # A broker whose partitions all failed is set aside for the rest of a pass, yet brokers that
    # hand partitions away later may fall two below it; another pass, over those brokers only,
    # picks them up. With traffic bands most refusals stay refusals, so one pass is made there.
    again = brokers
    for _ in range(1 if loads is not None else _PASSES):
        again = _pass(ws, brokers, again, led, count)
        if not again:
            break


# Passes without traffic: the generated clusters of the tests reach the best counts in 3 or fewer.
_PASSES = 4


def _pass(
    ws: Workspace, brokers: list[int], givers: list[int], led: dict[int, list[int]], count: dict[int, int]
) -> list[int]:
    """One pass of handing partitions from the broker leading most (of `givers`, and of those
    that receive meanwhile) to followers leading at least two fewer. Returns the brokers set aside
    that some broker handing later fell two below: the ones another pass may still help."""
    loads = ws.loads
    # Brokers set aside: (count then, number of hand-overs then); and each hand-over's giver count.
    aside: dict[int, tuple[int, int]] = {}
    fell: list[int] = []
    most = [(-count[b], b) for b in givers]
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
    replicas = ws.replicas
    allows = loads.allows_lead if loads is not None else None
    while True:
        b_max, b_min = top(most, -1), top(least, 1)
        if b_max is None or b_min is None or count[b_max] - count[b_min] <= 1:
            break
        candidates = led[b_max]
        i = cursor.get(b_max, 0)
        moved = False
        ceiling = count[b_max] - 1
        while i < len(candidates):
            pidx = candidates[i]
            # The follower with the fewest leaders that may lead (a leader swap may not push a
            # broker's traffic out of its band), if it has fewer than this broker by two or more.
            best = None
            followers = [(count[x], x) for x in replicas[pidx][1:] if x in brokers_set and count[x] < ceiling]
            if len(followers) > 1:
                followers.sort()
            for _, x in followers:
                if allows is None or allows(pidx, b_max, x):
                    best = x
                    break
            if best is not None:
                del candidates[i]
                _lead_with(ws, pidx, best, led, count)
                for b in (b_max, best):
                    heapq.heappush(most, (-count[b], b))
                    heapq.heappush(least, (count[b], b))
                fell.append(count[b_max])
                moved = True
                break
            i += 1
        cursor[b_max] = i
        if not moved:
            # No partition led here has a follower with fewer leaders: done for this pass.
            heapq.heappop(most)
            aside[b_max] = (count[b_max], len(fell))
    # The lowest giver count after each hand-over (none after the last: nobody fell).
    lowest = [*fell, max(count.values())]
    for k in range(len(fell) - 1, -1, -1):
        lowest[k] = min(lowest[k], lowest[k + 1])
    return [b for b, (c, at) in aside.items() if count[b] == c and c >= lowest[at] + 2]


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
    The hot broker's `_HEAVY` most written partitions are the candidates, each offered to its
    followers; the score is how far the weight handed over is from half the two brokers' gap.
    """
    loads = ws.loads
    if loads is None or len(loads.kept) < 2:
        return
    kept = set(loads.kept)
    led = _Leadership(ws, loads.write, kept)
    count = led.count
    mean = sum(count.values()) / len(count)
    even_low, even_high = int(mean), -(-sum(count.values()) // len(count))
    floor = {b: min(c, even_low) - 1 for b, c in count.items()}
    ceiling = {b: max(c, even_high) + 1 for b, c in count.items()}
    band_hi = loads.bands["net_out"][1]
    goal = ws.goals.traffic_threshold * loads.mean("leader_in")
    ranked = Ranking(loads.leader_in, loads.kept)
    leader_in, net_out, write, outs = loads.leader_in, loads.net_out, loads.write, loads.outs
    for _ in range(4 * len(loads.hot) + 16):
        if len(ranked) < 2:
            break
        hot = ranked.last()
        if leader_in[hot] - leader_in[ranked.first(1)[0]] <= goal + _EPSILON:
            break
        hi_out = max(band_hi, net_out[hot])
        best: tuple[float, int, int, int] | None = None  # score, follower, handed, taken back (-1: none)
        # Per follower of the heavy partitions, the ones it follows (heaviest first); followers
        # least loaded first, the first three searched for exchanges.
        followed: dict[int, list[int]] = {}
        for p in led.heavy(hot, _HEAVY):
            for f in ws.replicas[p][1:]:
                if f in kept:
                    followed.setdefault(f, []).append(p)
        followers = sorted(followed, key=lambda f: (leader_in[f], f))
        hot_in, hot_out = leader_in[hot], net_out[hot]
        for rank, f in enumerate(followers):
            if leader_in[f] >= hot_in - _EPSILON:
                break
            half = (hot_in - leader_in[f]) / 2
            most_handed = 2 * half * (1 - GAIN)
            f_out = net_out[f]
            back = led.back(f, hot) if rank < 3 else []
            handing = count[hot] - 1 >= floor[hot] and count[f] + 1 <= ceiling[f]
            for pidx in followed[f]:
                w = write[pidx]
                if back:
                    # The one to take back that leaves the two closest: weight near w - half
                    # (the entries just below and at that weight; order does not matter below).
                    i = bisect_left(back, (w - half, -1))
                    options = back[max(i - 1, 0) : i + 1]
                    if handing:
                        options.append((0.0, -1))
                elif handing:
                    options = [(0.0, -1)]
                else:
                    continue
                for wq, qidx in options:
                    d = w - wq
                    if d <= _EPSILON or d > most_handed:
                        continue
                    o = outs[pidx] - (outs[qidx] if qidx >= 0 else 0.0)
                    if f_out + o > hi_out or hot_out - o > hi_out:
                        continue
                    score = abs(d - half)
                    if best is None or (score, f, pidx, qidx) < best:
                        best = (score, f, pidx, qidx)
        if best is None:
            ranked.drop(hot)
            continue
        _, f, pidx, qidx = best
        was_hot, was_f = leader_in[hot], leader_in[f]
        led.hand(pidx, f)
        if qidx >= 0:
            led.hand(qidx, hot)
        ranked.moved(hot, was_hot)
        ranked.moved(f, was_f)


# How many of the hot broker's most written partitions a leader-traffic step considers. More finds
# a weight closer to half a gap, but mostly in many small steps between the hottest brokers; a
# 1,000-broker cluster took four times as many steps with 64 for the same end spread.
_HEAVY = 16


class _Leadership:
    """Who leads which partition with followers, during the leader-traffic phase, and the two
    lookups its search repeats: a leader's most written partitions, and the partitions one broker
    leads with another as a follower. Each is built for a broker the first time it is asked and
    kept up to date by `hand`, so a step costs no scan of a broker's partitions."""

    def __init__(self, ws: Workspace, write: list[float], kept: set[int]) -> None:
        self.ws, self.write = ws, write
        self.count = count = dict.fromkeys(sorted(kept), 0)
        self.led: dict[int, set[int]] = {b: set() for b in count}
        # leader -> (-write, partition) of the written partitions it leads, heaviest first; made
        # in the same pass (one sort per leader), kept up to date by `hand`.
        self._heavy: dict[int, list[tuple[float, int]]] = {b: [] for b in count}
        led, heavy = self.led, self._heavy
        for pidx, reps in enumerate(ws.replicas):
            if reps and reps[0] in kept:
                first = reps[0]
                count[first] += 1
                if len(reps) > 1:
                    led[first].add(pidx)
                    if write[pidx] > 0:
                        heavy[first].append((-write[pidx], pidx))
        for entries in heavy.values():
            entries.sort()
        self._with: dict[int, dict[int, list[tuple[float, int]]]] = {}  # leader -> follower -> (write, partition)

    def heavy(self, leader: int, k: int) -> list[int]:
        """The `k` most written partitions `leader` leads (ties by partition)."""
        return [p for _, p in self._heavy[leader][:k]]

    def back(self, leader: int, follower: int) -> list[tuple[float, int]]:
        """(write rate, partition) of the partitions `leader` leads with `follower` among their
        replicas, sorted."""
        index = self._with.get(leader)
        if index is None:
            index = self._with[leader] = defaultdict(list)
            write, replicas = self.write, self.ws.replicas
            for q in self.led[leader]:
                entry = (write[q], q)
                for x in replicas[q][1:]:
                    index[x].append(entry)
            for entries in index.values():
                entries.sort()
        return index.get(follower, [])

    def hand(self, pidx: int, new: int) -> None:
        """Make follower `new` the preferred leader of `pidx`."""
        reps = self.ws.replicas[pidx]
        old = reps[0]
        w = self.write[pidx]
        self.led[old].remove(pidx)
        self.led[new].add(pidx)
        self.count[old] -= 1
        self.count[new] += 1
        if w > 0:
            for leader, add in ((old, False), (new, True)):
                heavy = self._heavy.get(leader)
                if heavy is not None:
                    _update(heavy, (-w, pidx), add)
        index = self._with.get(old)
        if index is not None:
            for x in reps[1:]:
                _update(index[x], (w, pidx), False)
        _swap(self.ws, pidx, new)
        index = self._with.get(new)
        if index is not None:
            for x in reps[1:]:
                _update(index.setdefault(x, []), (w, pidx), True)


def _update(entries: list[tuple[float, int]], entry: tuple[float, int], add: bool) -> None:
    if add:
        insort(entries, entry)
        return
    i = bisect_left(entries, entry)
    if i < len(entries) and entries[i] == entry:
        del entries[i]


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
