"""How long a route's offset map keeps its runs: at least as long as the data they translate.

A run is needed while the destination may still hold a record it maps: a consumer group
positioned at that record can be translated only through it. Once the records are gone, so may
the run be (translation below the first run checks the source instead, see
:mod:`strait.offsetmap.translate`). Pure rules here; the leading controller applies them
(:mod:`strait.controller.topicconfig`).

How long a destination topic keeps a record (its *lifetime*):

- for ever when its ``cleanup.policy`` does not include ``delete`` (``compact`` alone, or none):
  a record no later one with its key replaces is never removed;
- for ever when ``retention.ms`` is -1, even with a ``retention.bytes`` limit (a quiet topic
  never reaches its size, so a record may stay for ever);
- else ``retention.ms`` (``compact,delete`` included). ``retention.bytes`` only ever removes
  records sooner than that, so it never makes a lifetime longer and is not looked at.

The map keeps its runs for the longest lifetime among the route's destination topics, -1 when
any keeps records for ever, and never less than the retention the map was created with (the
destination cluster's default for new topics): it is raised when the data lives longer and comes
back to that default when the data no longer does. The map is tiny next to the data, so erring
long costs little; erring short would lose translations.

Why ``retention.ms`` alone is enough: deletion goes by record timestamp, whole segments at a
time. The copy keeps the source records' timestamps, and a run is written once its records are
acknowledged, so a run is never older than the records it maps (unless a source producer set
timestamps in the future); with the same ``retention.ms`` the map drops a run no sooner than the
destination drops its records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

FOREVER = -1

# Settings the map topic always has: never compacted (its key is the source partition, so
# compaction would keep only each partition's last run), never cut by size.
MAP_SETTINGS: Mapping[str, str] = {"cleanup.policy": "delete", "retention.bytes": "-1"}

# The broker settings a topic's retention.ms defaults to, first one set wins, and their units.
_BROKER_RETENTION_UNITS = {"log.retention.ms": 1, "log.retention.minutes": 60_000, "log.retention.hours": 3_600_000}
BROKER_RETENTION_SETTINGS = tuple(_BROKER_RETENTION_UNITS)


def lifetime_ms(cleanup_policy: str, retention_ms: int) -> int:
    """How long a topic with these effective settings may keep a record (-1: for ever)."""
    policies = {p.strip().lower() for p in cleanup_policy.split(",")}
    if "delete" not in policies or retention_ms < 0:
        return FOREVER
    return retention_ms


def map_retention_ms(lifetimes: Iterable[int], created_ms: int) -> int | None:
    """The ``retention.ms`` a route's map should have, given its destination topics' lifetimes
    and the retention the map was created with; None when the route has no topic yet (leave
    the map as it is)."""
    found = list(lifetimes)
    if not found:
        return None
    if created_ms < 0 or any(t < 0 for t in found):
        return FOREVER
    return max(max(found), created_ms)


def created_retention_ms(synonyms: Iterable[tuple[str, str | None]]) -> int | None:
    """The ``retention.ms`` a new topic gets on a cluster, from broker settings ``(name, value)``
    in precedence order: the synonyms DescribeConfigs lists for a topic's ``retention.ms`` (only
    ``log.retention.ms``, and only when a broker sets it), or a broker's own
    ``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours`` (see
    :data:`BROKER_RETENTION_SETTINGS`); None if none is given."""
    for name, value in synonyms:
        unit = _BROKER_RETENTION_UNITS.get(name)
        if unit is None or value is None:
            continue
        amount = int(value)
        return FOREVER if amount < 0 else amount * unit
    return None


def plan_map_settings(current: Mapping[str, str], lifetimes: Iterable[int], created_ms: int) -> dict[str, str]:
    """The settings to change on a map topic whose effective settings are ``current``: those of
    :data:`MAP_SETTINGS` it lacks, and ``retention.ms`` (see :func:`map_retention_ms`)."""
    wanted = dict(MAP_SETTINGS)
    retention = map_retention_ms(lifetimes, created_ms)
    if retention is not None:
        wanted["retention.ms"] = str(retention)
    return {k: v for k, v in wanted.items() if not _same(k, current.get(k), v)}


def _same(key: str, current: str | None, wanted: str) -> bool:
    if current is None:
        return False
    if key == "cleanup.policy":
        return {p.strip().lower() for p in current.split(",")} == {wanted}
    try:
        # Any negative amount means "for ever", as -1 does.
        return int(current) == int(wanted) or (int(current) < 0 and int(wanted) < 0)
    except ValueError:
        return False
