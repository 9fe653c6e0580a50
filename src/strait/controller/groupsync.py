"""Continuous consumer-group offset sync: the leader keeps source groups ready to fail over.

For every route with ``groups:``, every ``interval_s`` the leading controller lists the source
consumer groups matching the route's include/exclude patterns, translates their committed
offsets exactly through the route's offset map (:mod:`strait.offsetmap.translate`) and commits
them to the same group on the destination, under the destination topics. A group is left alone
while it has members on the destination (it runs there: its own commits rule), and an offset is
never moved backwards (a group that consumed further on the destination keeps its position).

It runs in its own thread (:meth:`GroupSync.run`) so a slow cluster never delays the assignment
loop; standby controllers do nothing. The decisions are pure functions
(:func:`select_groups`, :func:`decide`), tested without Kafka.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strait import clients
from strait.config import GroupSyncConfig, RouteConfig, StraitConfig
from strait.offsetmap.failover import PartitionFailover, next_records, translate_group
from strait.offsetmap.follow import MapFollower

log = logging.getLogger(__name__)

TIMEOUT_S = 15.0
# Strait's own groups (checkpoints `strait-<route>`, exactly-once `strait.<route>`, readers).
OWN_GROUP = re.compile(r"^strait[-.]")
_IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)


# --- pure decisions ---------------------------------------------------------------------------


def select_groups(names: Iterable[str], settings: GroupSyncConfig) -> list[str]:
    """The groups to sync: matching an include and no exclude pattern, never Strait's own."""
    chosen = set()
    for name in names:
        if OWN_GROUP.match(name):
            continue
        if any(re.fullmatch(p, name) for p in settings.include) and not any(
            re.fullmatch(p, name) for p in settings.exclude
        ):
            chosen.add(name)
    return sorted(chosen)


@dataclass(frozen=True)
class Decision:
    """What to do with one group in one round."""

    group: str
    write: list[PartitionFailover]  # partitions to commit (each moves forward)
    skipped: str | None  # why nothing is written at all (None: the group is in sync after ``write``)
    kept: int = 0  # partitions not written: already at or past the translation, or no exact answer
    active: bool = False  # members on the destination: left alone
    untranslated: int = 0  # partitions with no exact answer (offset older than the map): not written


def decide(group: str, partitions: list[PartitionFailover], members_on_destination: int) -> Decision:
    """Pure: a group with members on the destination is not touched; otherwise every partition
    whose exact translation is ahead of the group's destination offset is written, never one
    that would move it backwards."""
    if members_on_destination:
        return Decision(group, [], f"{members_on_destination} active member(s) on the destination", active=True)
    if not partitions:
        return Decision(group, [], "no committed offsets on the route's copied partitions")
    write = [p for p in partitions if p.writes]
    untranslated = sum(1 for p in partitions if p.destination_offset is None)
    return Decision(group, write, None, kept=len(partitions) - len(write), untranslated=untranslated)


# --- state reported as metrics ----------------------------------------------------------------


@dataclass
class GroupState:
    route: str
    group: str
    last_synced: float | None = None  # wall clock of the last round that left it in sync
    active: bool = False  # skipped in the last round: members on the destination
    partitions: int = 0
    untranslated: int = 0  # partitions of the last round with no exact answer
    written: int = 0  # partition offsets committed so far


@dataclass
class RouteState:
    groups: dict[str, GroupState] = field(default_factory=dict)
    rounds: int = 0
    errors: int = 0
    written: int = 0  # partition offsets committed, over every group, since this controller led


class GroupSync:
    """The sync of every route with ``groups:``; :meth:`run` in a thread of the controller."""

    def __init__(
        self,
        config: StraitConfig,
        leading: Callable[[], bool],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.routes = [r for r in config.routes if r.groups is not None]
        self._leading = leading
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._state: dict[str, RouteState] = {r.name: RouteState() for r in self.routes}
        self._followers: dict[str, MapFollower] = {}
        self._admins: dict[str, AdminClient] = {}

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Sync each route every ``interval_s`` while this controller leads; until :meth:`stop`."""
        due = {r.name: 0.0 for r in self.routes}
        try:
            while not self._stop.is_set():
                if not self._leading():
                    self._forget()
                    self._stop.wait(1.0)
                    continue
                now = time.monotonic()
                for route in self.routes:
                    if now >= due[route.name] and not self._stop.is_set():
                        assert route.groups is not None
                        due[route.name] = now + route.groups.interval_s
                        self.sync_route(route)
                wait = min(due.values()) - time.monotonic()
                self._stop.wait(max(0.05, min(wait, 1.0)))
        finally:
            for follower in self._followers.values():
                follower.close()

    def sync_route(self, route: RouteConfig) -> list[Decision]:
        """One round for one route; errors are logged and counted, never raised."""
        state = self._state[route.name]
        try:
            decisions = self._sync(route)
        except (KafkaException, TimeoutError) as exc:
            with self._lock:
                state.errors += 1
            log.warning("route %s: consumer-group sync failed: %s", route.name, exc)
            return []
        with self._lock:
            state.rounds += 1
        return decisions

    def view(self) -> dict[str, Any]:
        """For metrics: per route, its groups and how long ago each was last in sync."""
        now = self._clock()
        with self._lock:
            return {
                name: {
                    "rounds": state.rounds,
                    "errors": state.errors,
                    "written": state.written,
                    "groups": [
                        {
                            "group": g.group,
                            "synced": g.last_synced is not None,
                            "age_s": None if g.last_synced is None else max(0.0, now - g.last_synced),
                            "active": g.active,
                            "partitions": g.partitions,
                            "untranslated": g.untranslated,
                            "written": g.written,
                        }
                        for g in sorted(state.groups.values(), key=lambda g: g.group)
                    ],
                }
                for name, state in self._state.items()
            }

    # --- Kafka ----------------------------------------------------------------------------

    def _sync(self, route: RouteConfig) -> list[Decision]:
        assert route.groups is not None
        follower = self._followers.get(route.name)
        if follower is None:
            follower = self._followers[route.name] = MapFollower(
                self.config.clusters[route.destination], route.name, timeout_s=TIMEOUT_S
            )
        runs = follower.refresh()
        source, destination = self._admin(route.source), self._admin(route.destination)
        listed = clients.admin_result(
            source.list_consumer_groups(request_timeout=TIMEOUT_S), TIMEOUT_S + 5, "listing consumer groups"
        )
        groups = select_groups((g.group_id for g in listed.valid), route.groups)
        members = _members(destination, groups) if groups and runs else {}
        decisions = []
        for group in groups if runs else []:
            if members.get(group):
                decisions.append(decide(group, [], members[group]))
                continue
            committed = _committed(source, group, None)
            present = {key: offset for key, offset in committed.items() if key in runs}
            before = (
                _committed(destination, group, [TopicPartition(runs[k].destination_topic, k[1]) for k in present])
                if present
                else {}
            )
            # The destination answer is keyed by destination topic: key it by source partition.
            by_source = {k: before.get((runs[k].destination_topic, k[1])) for k in present}
            # Offsets below the map (a compacted topic's first records gone before the copy): the
            # source says whether any record lies between them and the first copy.
            below = next_records(self.config.clusters[route.source], runs, present)
            decisions.append(decide(group, translate_group(runs, present, by_source, below), 0))
        written = {d.group: self._write(route, destination, d) for d in decisions}
        self._record(route, groups, decisions, written)
        return decisions

    def _write(self, route: RouteConfig, admin: AdminClient, decision: Decision) -> int:
        if not decision.write:
            return 0
        offsets = [
            TopicPartition(p.destination_topic, p.partition, p.destination_offset)
            for p in decision.write
            if p.destination_offset is not None
        ]
        request = [ConsumerGroupTopicPartitions(decision.group, offsets)]
        future = admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[decision.group]
        # Refused by the broker if a member joined since it was described (the group is not
        # empty): it then runs on the destination and is left alone from the next round.
        result = clients.admin_result(future, TIMEOUT_S + 5, f"committing group {decision.group}")
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            raise KafkaException(failed[0].error)
        log.info(
            "route %s: group %s synced to cluster %s: %s",
            route.name,
            decision.group,
            route.destination,
            ", ".join(f"{p.destination_topic}/{p.partition}@{p.destination_offset}" for p in decision.write),
        )
        return len(offsets)

    def _record(
        self, route: RouteConfig, groups: list[str], decisions: list[Decision], written: Mapping[str, int]
    ) -> None:
        now = self._clock()
        with self._lock:
            state = self._state[route.name]
            for gone in set(state.groups) - set(groups):
                del state.groups[gone]
            for decision in decisions:
                active = decision.active
                if decision.skipped is not None and not active:
                    state.groups.pop(decision.group, None)  # nothing of the route to sync
                    continue
                entry = state.groups.setdefault(decision.group, GroupState(route.name, decision.group))
                entry.active = active
                if not active:
                    entry.last_synced = now
                    entry.partitions = len(decision.write) + decision.kept
                    entry.untranslated = decision.untranslated
                    entry.written += written.get(decision.group, 0)
            state.written += sum(written.values())

    def _forget(self) -> None:
        """Not leading: another controller syncs, report nothing."""
        with self._lock:
            for state in self._state.values():
                state.groups.clear()

    def _admin(self, cluster: str) -> AdminClient:
        if cluster not in self._admins:
            self._admins[cluster] = clients.admin(self.config.clusters[cluster])
        return self._admins[cluster]


def _members(admin: AdminClient, groups: list[str]) -> dict[str, int]:
    """Members per group on a cluster (a group unknown there has none)."""
    futures = admin.describe_consumer_groups(groups, request_timeout=TIMEOUT_S)
    out = {}
    for group, future in futures.items():
        description = clients.admin_result(future, TIMEOUT_S + 5, f"describing group {group}")
        count = len(description.members or [])
        out[group] = count if description.state in _IDLE_STATES else max(1, count)
    return out


def _committed(admin: AdminClient, group: str, partitions: list[TopicPartition] | None) -> dict[tuple[str, int], int]:
    """A group's committed offsets (all of them, or of ``partitions``), keyed by topic and partition."""
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    future = admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[group]
    result = clients.admin_result(future, TIMEOUT_S + 5, f"reading the offsets of group {group}")
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions or []
        if tp.error is None and tp.offset >= 0
    }
