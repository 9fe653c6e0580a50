"""Moving a consumer group from a route's source cluster to its destination, exactly.

For every partition of the route's map where the group committed an offset on the source, the
committed offset is translated (:mod:`strait.offsetmap.translate`) and committed for the same
group on the destination, under the destination topic. It refuses while the group has members
on the destination (they would overwrite it, or already consume there), and it never moves a
destination offset backwards. The plan shows, per partition, the records the source still has
that were not replicated yet: what failing over now would leave behind.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaException, TopicPartition

from strait import clients
from strait.config import RouteConfig, StraitConfig
from strait.offsetmap.store import PartitionMap, read_map
from strait.offsetmap.translate import translate

log = logging.getLogger(__name__)

TIMEOUT_S = 15.0


class FailoverError(Exception):
    """A failover that cannot be done as asked; the message says why."""


class GroupActive(FailoverError):
    """The group has members on the destination cluster."""


class NothingToTranslate(FailoverError):
    """No offset map for the route yet, or no committed offsets of the group on its topics."""


@dataclass(frozen=True)
class PartitionFailover:
    """What failover does for one partition of the group."""

    topic: str
    partition: int
    destination_topic: str
    source_committed: int
    destination_offset: int | None  # None: no exact answer; nothing is written for it
    destination_before: int | None  # the group's offset on the destination before failover
    not_replicated: int
    exact: bool
    reason: str

    @property
    def writes(self) -> bool:
        """Whether failover commits this partition (only forward, only with an answer)."""
        if self.destination_offset is None:
            return False
        return self.destination_before is None or self.destination_offset > self.destination_before

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "writes": self.writes}


def plan(config: StraitConfig, route_name: str, group: str) -> list[PartitionFailover]:
    """The translation of ``group``'s committed source offsets; raises FailoverError."""
    route = _route(config, route_name)
    source, destination = config.clusters[route.source], config.clusters[route.destination]
    try:
        runs = read_map(destination, route.name, TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        raise FailoverError(f"cannot read the offset map of route {route.name!r}: {exc}") from exc
    if not runs:
        raise NothingToTranslate(
            f"route {route.name!r} has no offset map on cluster {route.destination!r} yet "
            "(offset_map disabled, or nothing copied)"
        )
    keys = sorted(runs)
    committed = _committed(source, group, [TopicPartition(t, p) for t, p in keys])
    present = {k: offset for k, offset in zip(keys, committed, strict=True) if offset is not None}
    if not present:
        raise NothingToTranslate(
            f"group {group!r} has no committed offsets on cluster {route.source!r} for route topics"
        )
    targets = [TopicPartition(runs[k].destination_topic, k[1]) for k in present]
    before = dict(zip(present, _committed(destination, group, targets), strict=True))
    return translate_group(runs, present, before, next_records(source, runs, present))


def translate_group(
    runs: Mapping[tuple[str, int], PartitionMap],
    source_committed: Mapping[tuple[str, int], int],
    destination_committed: Mapping[tuple[str, int], int | None],
    next_on_source: Mapping[tuple[str, int], int] | None = None,
) -> list[PartitionFailover]:
    """Pure: the translation of a group's committed source offsets (keyed by source topic and
    partition) through the merged map, next to what the group holds on the destination (keyed
    the same way). ``next_on_source``: for offsets below the map, the source offset of the next
    record still there (see :func:`next_records`). Partitions the map does not know are left out."""
    result = []
    for key, offset in sorted(source_committed.items()):
        if key not in runs:
            continue
        translation = translate(runs[key].runs, offset, (next_on_source or {}).get(key))
        result.append(
            PartitionFailover(
                topic=key[0],
                partition=key[1],
                destination_topic=runs[key].destination_topic,
                source_committed=offset,
                destination_offset=translation.destination,
                destination_before=destination_committed.get(key),
                not_replicated=translation.not_replicated,
                exact=translation.exact,
                reason=translation.reason,
            )
        )
    return result


def next_records(
    source: Mapping[str, Any],
    runs: Mapping[tuple[str, int], PartitionMap],
    committed: Mapping[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    """For each committed offset below its partition's map, the offset of the first record at or
    after it that the source still holds (what a source consumer resuming there reads first;
    read_committed, from the earliest offset if it was deleted). A compacted topic's first
    records may be gone before the copy began: the map starts at the first record it saw, and
    only the source can say that nothing lies between. Partitions without an answer are left out."""
    below = {k: c for k, c in committed.items() if k in runs and runs[k].runs and c < runs[k].runs[0].source}
    if not below:
        return {}
    settings = {
        "group.id": "strait-failover-peek",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
    }
    consumer = clients.consumer(source, **settings)
    found: dict[tuple[str, int], int] = {}
    try:
        for key, offset in below.items():
            consumer.assign([TopicPartition(key[0], key[1], offset)])
            for message in consumer.consume(1, TIMEOUT_S):
                position = message.offset()
                if message.error() is None and position is not None:
                    found[key] = position
    except KafkaException as exc:
        log.warning("cannot read the source records after committed offsets: %s", exc)
    finally:
        consumer.close()
    return found


def apply(config: StraitConfig, route_name: str, group: str, partitions: list[PartitionFailover]) -> int:
    """Commit the translated offsets for ``group`` on the destination; returns how many.

    Raises GroupActive while the group has members there, FailoverError if the commit fails.
    """
    route = _route(config, route_name)
    destination = config.clusters[route.destination]
    members_now = members(destination, group)
    if members_now:
        raise GroupActive(
            f"group {group!r} has {members_now} active member(s) on cluster {route.destination!r}: "
            "stop its consumers there first (failover would race them)"
        )
    written = commit(destination, group, partitions, cluster=route.destination)
    if written:
        log.info("group %s failed over to cluster %s: %d partition(s)", group, route.destination, written)
    return written


def commit(props: Mapping[str, Any], group: str, partitions: list[PartitionFailover], *, cluster: str) -> int:
    """Commit, for ``group`` on a cluster, the partitions that move forward; returns how many.

    The caller checks first that the group has no members there. Raises FailoverError.
    """
    offsets = [
        TopicPartition(p.destination_topic, p.partition, p.destination_offset)
        for p in partitions
        if p.writes and p.destination_offset is not None
    ]
    if not offsets:
        return 0
    committer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    try:
        results = committer.commit(offsets=offsets, asynchronous=False) or []
    except KafkaException as exc:
        raise FailoverError(f"committing group {group!r} on cluster {cluster!r} failed: {exc}") from exc
    finally:
        committer.close()
    failed = [tp for tp in results if tp.error is not None]
    if failed:
        raise FailoverError(
            f"committing group {group!r} on cluster {cluster!r} failed for "
            f"{failed[0].topic}/{failed[0].partition}: {failed[0].error}"
        )
    return len(offsets)


def _route(config: StraitConfig, name: str) -> RouteConfig:
    route = config.route(name)
    if route is None:
        names = ", ".join(r.name for r in config.routes)
        raise FailoverError(f"unknown route {name!r} (routes: {names})")
    return route


def _committed(props: Mapping[str, Any], group: str, tps: list[TopicPartition]) -> list[int | None]:
    consumer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    try:
        listed = clients.committed_offsets(consumer, tps, TIMEOUT_S)
    except KafkaException as exc:
        raise FailoverError(f"cannot read the committed offsets of group {group!r}: {exc}") from exc
    finally:
        consumer.close()
    return [tp.offset if tp.error is None and tp.offset >= 0 else None for tp in listed]


def members(props: Mapping[str, Any], group: str) -> int:
    """How many members ``group`` has on a cluster (at least 1 unless it is empty or unknown)."""
    admin = clients.admin(props)
    future = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group]
    try:
        description = clients.admin_result(future, TIMEOUT_S + 5, f"describing group {group}")
    except KafkaException as exc:
        raise FailoverError(f"cannot describe group {group!r} on the destination: {exc}") from exc
    if description.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN):
        return len(description.members or [])
    return max(1, len(description.members or []))
