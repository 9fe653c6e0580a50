"""Broker traffic inside a planning run: the loads a workspace carries, their bands, and the
network-in phase.

Loads are those of `strait.balancer.traffic` (net in, net out, leader bytes in, bytes/s per
broker), kept up to date as the planner moves replicas and leaders. Each resource has a band,
fixed when a phase starts: a broker's load may not rise above max(the highest load now, the
lowest + B) nor fall below min(the lowest now, the highest - B), where B is `traffic_threshold`
times the mean load of the brokers that stay. Phases that do not aim at traffic (the disk spread,
leader counts) keep to the band, so the max-min spread of every resource ends no wider than
before or 2B, whichever is more; the traffic phases only narrow it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice

from strait.balancer.planner import Workspace
from strait.balancer.traffic import Traffic

_EPSILON = 1e-9
# A traffic step must take at least this share of the gap between two brokers off the hotter
# one; a rate close to the whole gap would only swap which of the two is hot.
GAIN = 0.1


class Loads:
    """Per-broker traffic of a workspace's current placement."""

    def __init__(self, ws: Workspace, traffic: Traffic, threshold: float) -> None:
        self.ws = ws
        self.threshold = threshold
        rates = list(map(traffic.rates.get, ws.keys))
        self.write = [0.0 if r is None else r.bytes_in for r in rates]
        self.read = [0.0 if r is None else r.bytes_read for r in rates]
        # What each partition's leader sends (`out`): a move keeps a partition's replica count,
        # so this holds for the whole run.
        self.outs = [w * (len(reps) - 1) + r for w, r, reps in zip(self.write, self.read, ws.replicas, strict=True)]
        self.hot = [pidx for pidx, w in enumerate(self.write) if w > 0 or self.read[pidx] > 0]
        self.kept = [b for b in ws.model.brokers if b not in ws.excluded]
        self.kept_set = frozenset(self.kept)
        brokers = set(ws.model.brokers)
        for pidx in self.hot:
            brokers.update(ws.replicas[pidx])
        # Per broker, its replicas of written partitions as sorted (write rate, partition) pairs.
        self.on_broker: dict[int, list[tuple[float, int]]] = {b: [] for b in brokers}
        self.net_in = dict.fromkeys(brokers, 0.0)
        self.leader_in = dict.fromkeys(brokers, 0.0)
        self.net_out = dict.fromkeys(brokers, 0.0)
        net_in, on_broker = self.net_in, self.on_broker
        for pidx in self.hot:
            reps = ws.replicas[pidx]
            w = self.write[pidx]
            entry = (w, pidx)
            for b in reps:
                net_in[b] += w
                if w > 0:
                    on_broker[b].append(entry)
            if reps:
                self.leader_in[reps[0]] += w
                self.net_out[reps[0]] += self.outs[pidx]
        for lst in self.on_broker.values():
            lst.sort()
        self.resources = {"net_in": self.net_in, "net_out": self.net_out, "leader_in": self.leader_in}
        self.bands: dict[str, tuple[float, float]] = {}
        self.freeze_band()

    def out(self, pidx: int) -> float:
        """What the leader of `pidx` sends: its writes to every follower, and what consumers read."""
        return self.outs[pidx]

    def by_resource(self) -> dict[str, dict[int, float]]:
        return self.resources

    def freeze_band(self) -> None:
        """Fix each resource's band from the loads now (see the module docstring)."""
        self.bands = {}
        for res, loads in self.by_resource().items():
            values = [loads.get(b, 0.0) for b in self.kept] or [0.0]
            lo, hi = min(values), max(values)
            room = self.threshold * sum(values) / len(values)
            self.bands[res] = (min(lo, hi - room) - _EPSILON, max(hi, lo + room) + _EPSILON)

    def _fits(self, res: str, gainer: int, loser: int, amount: float) -> bool:
        if amount <= 0:
            return True
        loads = self.resources[res]
        lo, hi = self.bands[res]
        kept = self.kept_set
        up = gainer not in kept or loads.get(gainer, 0.0) + amount <= hi
        down = loser not in kept or loads.get(loser, 0.0) - amount >= lo
        return up and down

    def allows_move(self, pidx: int, from_broker: int, to_broker: int) -> bool:
        """Whether moving the replica of `pidx` keeps both brokers within every band."""
        w = self.write[pidx]
        if w <= 0 and self.read[pidx] <= 0:
            return True
        if not self._fits("net_in", to_broker, from_broker, w):
            return False
        if self.ws.replicas[pidx][0] != from_broker:
            return True
        return self.allows_lead(pidx, from_broker, to_broker)

    def allows_lead(self, pidx: int, old: int, new: int) -> bool:
        """Whether `new` leading `pidx` instead of `old` keeps both within the leader bands."""
        return self._fits("leader_in", new, old, self.write[pidx]) and self._fits("net_out", new, old, self.out(pidx))

    def moved(self, pidx: int, slot: int, from_broker: int, to_broker: int) -> None:
        w = self.write[pidx]
        if w <= 0 and self.read[pidx] <= 0:
            return
        self.net_in[from_broker] = self.net_in.get(from_broker, 0.0) - w
        self.net_in[to_broker] = self.net_in.get(to_broker, 0.0) + w
        if w > 0:
            entry = (w, pidx)
            lst = self.on_broker.setdefault(from_broker, [])
            i = bisect_left(lst, entry)
            if i < len(lst) and lst[i] == entry:
                del lst[i]
            insort(self.on_broker.setdefault(to_broker, []), entry)
        if slot == 0:
            self.led(pidx, from_broker, to_broker)

    def led(self, pidx: int, old: int, new: int) -> None:
        w, o = self.write[pidx], self.out(pidx)
        self.leader_in[old] = self.leader_in.get(old, 0.0) - w
        self.leader_in[new] = self.leader_in.get(new, 0.0) + w
        self.net_out[old] = self.net_out.get(old, 0.0) - o
        self.net_out[new] = self.net_out.get(new, 0.0) + o

    def mean(self, res: str) -> float:
        loads = self.by_resource()[res]
        return sum(loads.get(b, 0.0) for b in self.kept) / len(self.kept) if self.kept else 0.0


class Ranking:
    """Brokers in order of one load, kept sorted as loads change: a step that moves load between
    two brokers re-ranks those two (O(brokers) list shifts, no sort of every broker per step).

    `loads` is read live; call `moved(b, old)` with a broker's value before each change of it.
    """

    def __init__(self, loads: Mapping[int, float], brokers: Iterable[int]) -> None:
        self.loads = loads
        self.order = sorted((loads[b], b) for b in brokers)

    def __len__(self) -> int:
        return len(self.order)

    def last(self) -> int:
        return self.order[-1][1]

    def first(self, k: int) -> list[int]:
        """The k least loaded brokers, least first."""
        return [b for _, b in self.order[:k]]

    def brokers(self) -> Iterator[int]:
        """Every broker, least loaded first."""
        return (b for _, b in self.order)

    def _remove(self, b: int, value: float) -> bool:
        i = bisect_left(self.order, (value, b))
        if i < len(self.order) and self.order[i] == (value, b):
            del self.order[i]
            return True
        return False

    def moved(self, b: int, old: float) -> None:
        """Broker `b`'s load changed from `old` to what `loads` says now."""
        if self._remove(b, old):
            insort(self.order, (self.loads[b], b))

    def drop(self, b: int) -> None:
        """Leave `b` out from now on (nothing more can be done for it)."""
        self._remove(b, self.loads[b])


def attach(ws: Workspace, traffic: Traffic | None) -> Loads | None:
    """Give `ws` the loads of `traffic` (nothing when no traffic was measured)."""
    if traffic is None or not traffic.rates:
        return None
    ws.loads = Loads(ws, traffic, ws.goals.traffic_threshold)
    return ws.loads


def balance_net_in(ws: Workspace, warnings: list[str]) -> None:
    """Move replicas (followers first) from the broker taking in most to those taking in least.

    A step moves a replica whose write rate is below 90% of the gap between the two brokers (so
    the hotter of the two really cools), the one closest to half the gap, to the emptiest disk of
    the cooler broker that keeps the hard rules and the disk band: no disk ends above
    max(fullest now, emptiest now + threshold) nor below min(emptiest now, fullest now -
    threshold), so the disk spread stays within its goal or where it was.
    """
    loads = ws.loads
    if loads is None or len(loads.kept) < 2:
        return
    usable = [d for d in range(len(ws.disk_broker)) if ws.usable(d)]
    if not usable:
        return
    ratios = [ws.ratio(d) for d in usable]
    top, bottom = max(ratios), min(ratios)
    disk_hi = max(top, bottom + ws.goals.threshold) + _EPSILON
    disk_lo = min(bottom, top - ws.goals.threshold) - _EPSILON
    goal = ws.goals.traffic_threshold * loads.mean("net_in")
    ranked = Ranking(loads.net_in, loads.kept)
    room = _RackRoom(ws, loads)
    for _ in range(4 * len(loads.hot) + 16):
        if len(ranked) < 2:
            break
        hot = ranked.last()
        if loads.net_in[hot] - loads.net_in[ranked.first(1)[0]] <= goal + _EPSILON:
            break
        # The coolest few brokers, and the coolest few of the hot one's rack (where the rack rule
        # sends a replica when partitions span every rack): past them a move helps little and
        # the search costs much.
        rack = ws.broker_rack.get(hot, 0)
        local = list(islice((b for b in ranked.brokers() if b != hot and ws.broker_rack.get(b, 0) == rack), 4))
        coolest = list(dict.fromkeys([*ranked.first(min(4, len(ranked) - 1)), *local]))
        coolest.sort(key=lambda b: (loads.net_in[b], b))
        for cold in coolest:
            if not room.any_to(hot, ws.rack_by_id[cold]):
                continue  # the rack rule lets none of `hot`'s written replicas into that rack
            was_hot, was_cold = loads.net_in[hot], loads.net_in[cold]
            if _step(ws, loads, room, hot, cold, disk_lo, disk_hi):
                ranked.moved(hot, was_hot)
                ranked.moved(cold, was_cold)
                break
        else:
            ranked.drop(hot)
    kept = loads.kept
    left = max(loads.net_in[b] for b in kept) - min(loads.net_in[b] for b in kept)
    if left > goal + _EPSILON and goal > 0:
        warnings.append(
            f"network-in spread {left:.0f} B/s stays above the traffic threshold ({goal:.0f} B/s): "
            "no replica can move without breaking the rack rule, the capacity limit or the disk spread"
        )


def _step(ws: Workspace, loads: Loads, room: _RackRoom, hot: int, cold: int, disk_lo: float, disk_hi: float) -> bool:
    gap = loads.net_in[hot] - loads.net_in[cold]
    if gap <= _EPSILON:
        return False
    sinks = sorted(ws.broker_disks.get(cold, ()), key=lambda d: (ws.ratio(d), d))
    for pidx in _closest(ws, loads.on_broker.get(hot, []), hot, cold, gap):
        leads = ws.replicas[pidx][0] == hot
        if leads and not loads.allows_lead(pidx, hot, cold):
            continue
        src = ws.disks[pidx][ws.replicas[pidx].index(hot)]
        size = ws.size[pidx]
        if src >= 0 and ws.disk_cap[src] > 0 and (ws.disk_used[src] - size) / ws.disk_cap[src] < disk_lo:
            continue
        if not ws.may_join(pidx, hot, cold):
            continue  # the rack rule or a replica already there: no disk of `cold` will do
        for d in sinks:
            cap = ws.disk_cap[d]
            if cap <= 0 or (ws.disk_used[d] + size) / cap > disk_hi or not ws.fits(pidx, d):
                continue
            room.change(pidx, -1)
            ws.move(pidx, hot, d)
            room.change(pidx, 1)
            return True
    return False


class _RackRoom:
    """Per broker and rack, how many of the broker's written replicas the rack rule would let
    move to a broker of that rack: with partitions spread over every rack (the common case), a
    cooler broker in another rack than the hot one can take none of them, and is skipped
    without a search. A broker's counts are made the first time it is asked about and kept up
    to date through `change`, around each move of the network-in phase (the only moves while
    it is used)."""

    def __init__(self, ws: Workspace, loads: Loads) -> None:
        self.ws, self.loads = ws, loads
        self.rows: dict[int, list[int]] = {}

    def _open(self, pidx: int) -> list[bool]:
        """Per rack, whether a replica of `pidx` from another rack may join it."""
        ws = self.ws
        reps, racks = ws.replicas[pidx], ws.rack_by_id
        counts = [0] * ws.rack_count
        for b in reps:
            counts[racks[b]] += 1
        most = -(-len(reps) // ws.rack_count)
        return [c < most for c in counts]

    def any_to(self, broker: int, rack: int) -> bool:
        """Whether some written replica on `broker` may move to a broker of `rack` (another rack)."""
        if self.ws.rack_by_id[broker] == rack:
            return True  # within a rack the rule depends on the partition; not counted
        row = self.rows.get(broker)
        if row is None:
            row = self.rows[broker] = [0] * self.ws.rack_count
            for _, pidx in self.loads.on_broker.get(broker, ()):
                for r, ok in enumerate(self._open(pidx)):
                    row[r] += ok
        return row[rack] > 0

    def change(self, pidx: int, sign: int) -> None:
        """Take `pidx`'s replicas out of the counts (-1, before it moves) or back in (1, after)."""
        if not self.rows or self.loads.write[pidx] <= 0:
            return
        opened = None
        for b in self.ws.replicas[pidx]:
            row = self.rows.get(b)
            if row is not None:
                opened = opened or self._open(pidx)
                for r, ok in enumerate(opened):
                    row[r] += sign * ok


def _closest(ws: Workspace, on: list[tuple[float, int]], hot: int, cold: int, gap: float, limit: int = 64) -> list[int]:
    """Of the `limit` of `hot`'s written partitions (`on`, sorted by rate) written at less than
    90% of `gap`, without a replica on `cold` and with rates closest to half the gap, those the
    rack rule lets move to `cold`: closest first, followers before leaders between equals.

    The rack rule is checked here, inline, because it refuses most of them when `cold` is in
    another rack than `hot` (partitions spread over every rack): the step's other checks then
    run only for partitions that may move at all.
    """
    half = gap / 2
    below = bisect_left(on, (half, -1)) - 1
    above = below + 1
    end = bisect_left(on, (gap * (1 - GAIN), -1))
    racks = ws.rack_by_id
    rack = racks[cold]
    rack_count = ws.rack_count
    found: list[tuple[float, bool, int]] = []
    seen = 0
    while seen < limit and (below >= 0 or above < end):
        take_below = above >= end or (below >= 0 and half - on[below][0] <= on[above][0] - half)
        w, pidx = on[below] if take_below else on[above]
        if take_below:
            below -= 1
        else:
            above += 1
        reps = ws.replicas[pidx]
        if w > 0 and cold not in reps:
            seen += 1
            same = 1  # `cold`'s own replica, once moved
            for b in reps:
                if b != hot and racks[b] == rack:
                    same += 1
            if same <= -(-len(reps) // rack_count):
                found.append((abs(w - half), reps[0] == hot, pidx))
    found.sort()
    return [pidx for _, _, pidx in found]
