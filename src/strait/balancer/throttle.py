"""Replication throttles (KIP-73) for the moves in flight, and only for them.

Kafka throttles in two halves: per topic, which replicas are throttled
(`leader.replication.throttled.replicas` lists the replicas that serve the copy,
`follower.replication.throttled.replicas` the ones being built), and per broker, the rate
(`leader/follower.replication.throttled.rate`). Moves between disks of one broker are throttled by
`replica.alter.log.dirs.io.max.bytes.per.second` on that broker.

The ledger remembers exactly which entries and rates this run added. Topic entries are added and
removed with incremental APPEND / SUBTRACT so entries set by someone else survive; a broker rate
someone else set is left alone, and one we set is deleted only if it still holds our value. The
ledger is saved with the execution state, so a `cancel` from another process can clean up.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from strait.balancer.errors import ClusterError
from strait.balancer.gateway import Gateway
from strait.balancer.plan import InterBrokerMove, Move

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_KEYS = (LEADER_RATE, FOLLOWER_RATE, DIR_RATE)
TOPIC_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


@dataclass
class Wanted:
    """The throttle configuration a set of moves in flight needs."""

    topics: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    brokers: dict[int, dict[str, str]] = field(default_factory=dict)


def wanted(moves: Iterable[Move], rate: int | None, live: Collection[int] | None = None) -> Wanted:
    """Pure: the throttle entries and broker rates for `moves`; nothing when `rate` is None.

    With `live` (the brokers the cluster lists), no rate is asked of a broker outside it: a
    gone broker being drained serves no copy and would refuse the request.
    """
    out = Wanted()
    if rate is None:
        return out
    value = str(rate)
    for m in moves:
        if isinstance(m, InterBrokerMove):
            if not m.adding:
                continue  # a reorder copies nothing
            entries = out.topics.setdefault(m.topic, {LEADER_REPLICAS: set(), FOLLOWER_REPLICAS: set()})
            # Any current replica may be leader while the copy runs, so all of them are throttled.
            entries[LEADER_REPLICAS].update(f"{m.partition}:{b}" for b in m.source)
            entries[FOLLOWER_REPLICAS].update(f"{m.partition}:{b}" for b in m.adding)
            for b in m.source:
                if live is None or b in live:
                    out.brokers.setdefault(b, {})[LEADER_RATE] = value
            for b in m.adding:
                out.brokers.setdefault(b, {})[FOLLOWER_RATE] = value
        else:
            out.brokers.setdefault(m.broker, {})[DIR_RATE] = value
    return out


@dataclass
class Ledger:
    """What this execution set, so it can take back exactly that."""

    topics: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    brokers: dict[int, dict[str, str]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not any(any(v for v in t.values()) for t in self.topics.values()) and not any(self.brokers.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "topics": {t: {k: sorted(v) for k, v in e.items() if v} for t, e in sorted(self.topics.items())},
            "brokers": {str(b): dict(v) for b, v in sorted(self.brokers.items()) if v},
        }

    @classmethod
    def from_dict(cls, data: Any) -> Ledger:
        data = data or {}
        return cls(
            topics={t: {k: set(v) for k, v in e.items()} for t, e in dict(data.get("topics") or {}).items()},
            brokers={int(b): dict(v) for b, v in dict(data.get("brokers") or {}).items()},
        )


class Throttles:
    """Keeps the cluster's throttles equal to what the moves in flight need, touching only ours."""

    def __init__(self, gateway: Gateway, ledger: Ledger | None = None, live: Collection[int] | None = None) -> None:
        self.gateway = gateway
        self.ledger = ledger or Ledger()
        self.live = None if live is None else frozenset(live)

    def sync(self, moves: Iterable[Move], rate: int | None) -> None:
        want = wanted(moves, rate, self.live)
        self._sync_topics(want)
        self._sync_brokers(want)

    def clear(self) -> None:
        """Remove every throttle this execution set."""
        self._sync_topics(Wanted())
        self._sync_brokers(Wanted())

    def _sync_topics(self, want: Wanted) -> None:
        for topic in sorted(set(want.topics) | set(self.ledger.topics)):
            try:
                self._sync_topic(topic, want)
            except ClusterError:
                # A topic deleted mid-run took its throttle configs with it; anything else is real.
                if self.gateway.replicas([topic]):
                    raise
                self.ledger.topics.pop(topic, None)

    def _sync_topic(self, topic: str, want: Wanted) -> None:
        mine = self.ledger.topics.setdefault(topic, {k: set() for k in TOPIC_KEYS})
        need = want.topics.get(topic, {})
        adds = {k: need.get(k, set()) - mine.get(k, set()) for k in TOPIC_KEYS}
        drops = {k: mine.get(k, set()) - need.get(k, set()) for k in TOPIC_KEYS}
        ops: dict[str, tuple[str, str | None]] = {}
        if any(adds.values()):
            current = self.gateway.topic_configs(topic, TOPIC_KEYS)
            for k, entries in adds.items():
                present = {e.strip() for e in current.get(k, "").split(",") if e.strip()}
                if "*" in present:
                    continue  # someone throttles every replica of this topic already
                # Entries someone else set stay theirs: we neither add nor later remove them.
                fresh = entries - present
                if fresh:
                    ops[k] = ("APPEND", ",".join(sorted(fresh)))
                    mine.setdefault(k, set()).update(fresh)
        if any(drops.values()):
            current = self.gateway.topic_configs(topic, TOPIC_KEYS)
            for k, entries in drops.items():
                if not entries:
                    continue
                present = {e.strip() for e in current.get(k, "").split(",") if e.strip()}
                # Delete the key when only our entries are in it, so no empty override stays
                # behind; otherwise take out just ours. One request cannot APPEND and
                # SUBTRACT the same key, so removals go on their own.
                op = ("DELETE", None) if not present - entries else ("SUBTRACT", ",".join(sorted(entries)))
                self.gateway.alter_topic_configs(topic, {k: op})
                mine[k] -= entries
        if ops:
            self.gateway.alter_topic_configs(topic, ops)
        if not any(mine.values()):
            del self.ledger.topics[topic]

    def _sync_brokers(self, want: Wanted) -> None:
        for broker in sorted(set(want.brokers) | set(self.ledger.brokers)):
            mine = self.ledger.brokers.setdefault(broker, {})
            need = want.brokers.get(broker, {})
            current: dict[str, str] | None = None
            ops: dict[str, tuple[str, str | None]] = {}
            for key in BROKER_KEYS:
                if key in need and key not in mine:
                    current = current if current is not None else self.gateway.broker_configs(broker, BROKER_KEYS)
                    if key in current:
                        continue  # an operator's rate: theirs to keep
                    ops[key] = ("SET", need[key])
                    mine[key] = need[key]
                elif key in need and mine.get(key) != need[key]:
                    ops[key] = ("SET", need[key])
                    mine[key] = need[key]
                elif key not in need and key in mine:
                    current = current if current is not None else self.gateway.broker_configs(broker, BROKER_KEYS)
                    if current.get(key) == mine[key]:
                        ops[key] = ("DELETE", None)
                    del mine[key]
            if ops:
                self.gateway.alter_broker_configs(broker, ops)
            if not mine:
                del self.ledger.brokers[broker]
