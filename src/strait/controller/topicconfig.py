"""Destination topics' settings follow their source topics', continuously.

A worker creates a destination topic with its source topic's own settings (the overrides set on
the topic, see :mod:`strait.worker.destination`); after that, the source may change: a team
raises ``retention.ms``, turns on compaction, lowers ``max.message.bytes``. The leading
controller (one writer) compares, every ``controller.refresh_interval_s``, each replicated
topic's overrides on the source with its destination topic's and applies the difference with an
incremental config change: a key set or changed on the source is set on the destination, and a
key the source no longer overrides is removed from the destination (it falls back to the
destination cluster's default, as the source's fell back to its own). Keys the route excludes
(``topic_config.exclude``, by default ``min.insync.replicas`` and
``unclean.leader.election.enable``) and the keys of :data:`ALWAYS_UNFOLLOWED_CONFIGS` keep the
destination's values either way.

It also keeps each route's offset map (``__strait_offsets.<route>``, routes with ``offset_map``)
as long as the data it translates (:mod:`strait.offsetmap.retention`), whether or not the
route follows its source's settings.

It runs in its own thread (:meth:`TopicConfigFollower.run`) so a slow cluster never delays the
assignment loop; standby controllers do nothing. The decisions are pure functions
(:func:`plan_change`, :func:`strait.offsetmap.retention.plan_map_settings`), tested without Kafka.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

# confluent-kafka re-exports these without listing them in __all__, which strict mypy rejects.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from strait import clients
from strait.config import ALWAYS_UNFOLLOWED_CONFIGS, RouteConfig, StraitConfig
from strait.coordination.model import TopicSpec
from strait.offsetmap.codec import map_topic
from strait.offsetmap.retention import (
    BROKER_RETENTION_SETTINGS,
    created_retention_ms,
    lifetime_ms,
    plan_map_settings,
)

log = logging.getLogger(__name__)

TIMEOUT_S = 15.0
DEFAULTS_TTL_S = 600.0  # how long a cluster's default retention read from its brokers is trusted
_MISSING = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID)

__all__ = ["ALWAYS_UNFOLLOWED_CONFIGS", "Change", "TopicConfigFollower", "overrides", "plan_change"]


# --- pure decisions ---------------------------------------------------------------------------


def overrides(entries: Iterable[ConfigEntry]) -> dict[str, str]:
    """The settings made on the topic itself (not broker or built-in defaults), readable ones only."""
    own: dict[str, str] = {}
    for entry in entries:
        # describe_configs reports the source as a plain int, not as the ConfigSource enum.
        source = getattr(entry.source, "value", entry.source)
        if source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value or entry.is_default:
            continue
        if entry.is_sensitive or entry.is_read_only or entry.value is None:
            continue
        own[entry.name] = entry.value
    return own


@dataclass(frozen=True)
class Change:
    """What to do to one destination topic's settings."""

    topic: str  # the destination topic
    set: dict[str, str]  # key -> the source's value
    delete: frozenset[str]  # overrides the source no longer has

    @property
    def empty(self) -> bool:
        return not self.set and not self.delete

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.set.items())] + [f"-{k}" for k in sorted(self.delete)]
        return ", ".join(parts)


def plan_change(
    topic: str, source: Mapping[str, str], destination: Mapping[str, str], excluded: Callable[[str], bool]
) -> Change:
    """Pure: the change that makes ``destination``'s overrides those of ``source`` on every key
    not ``excluded``; excluded keys are never touched, whatever either side holds."""
    wanted = {k: v for k, v in source.items() if not excluded(k) and destination.get(k) != v}
    stale = frozenset(k for k in destination if k not in source and not excluded(k))
    return Change(topic, wanted, stale)


def _value(entries: Mapping[str, ConfigEntry], key: str, default: str) -> str:
    entry = entries.get(key)
    return default if entry is None or entry.value is None else str(entry.value)


# --- state reported -----------------------------------------------------------------------------


@dataclass
class RouteState:
    rounds: int = 0
    changes: int = 0  # destination topics changed since this controller led
    errors: int = 0
    last_round: float | None = None  # wall clock of the last complete round
    failing: dict[str, str] = field(default_factory=dict)  # destination topic -> last error


class TopicConfigFollower:
    """Follows the settings of every route with ``topic_config.follow`` and keeps the offset map
    of every route with ``offset_map``; :meth:`run` in a thread."""

    def __init__(
        self,
        config: StraitConfig,
        leading: Callable[[], bool],
        topics: Callable[[], Mapping[tuple[str, str], TopicSpec]],
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.routes = [r for r in config.routes if r.topic_config.follow]
        self.map_routes = [r for r in config.routes if r.offset_map]
        self.interval_s = interval_s if interval_s is not None else config.controller.refresh_interval_s
        self._leading = leading
        self._topics = topics
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._admins: dict[str, Any] = {}
        self._warned_shared: set[tuple[str, str]] = set()
        self._state: dict[str, RouteState] = {r.name: RouteState() for r in self.routes}
        self._map_failing: dict[str, str] = {}  # route -> why its map's settings cannot be set
        self._defaults: dict[str, tuple[int | None, float]] = {}  # cluster -> (default retention.ms, when read)

    def run(self) -> None:
        while not self._stop.is_set():
            if self._leading():
                try:
                    self.round()
                except Exception:  # a bad round must not end the thread: the next one tries again
                    log.exception("topic config follow: round failed")
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()

    def view(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {
                name: {
                    "rounds": s.rounds,
                    "changes": s.changes,
                    "errors": s.errors,
                    "last_round": s.last_round,
                    "failing": dict(s.failing),
                }
                for name, s in self._state.items()
            }

    def round(self) -> list[Change]:
        """Compare and apply once for every following route; returns the changes applied."""
        specs = self._topics()
        applied: list[Change] = []
        shared = self._shared(specs)
        for route in self.routes:
            mine = [
                s
                for s in specs.values()
                if s.route == route.name and (route.destination, s.destination_topic) not in shared
            ]
            try:
                applied += self._follow(route, mine)
            except KafkaException as exc:
                log.warning("topic config follow, route %s: %s", route.name, exc)
                with self._lock:
                    self._state[route.name].errors += 1
                continue
            with self._lock:
                state = self._state[route.name]
                state.rounds += 1
                state.last_round = self._clock()
        for route in self.map_routes:
            try:
                self._keep_map(route, [s for s in specs.values() if s.route == route.name])
            except KafkaException as exc:
                log.warning("route %s: offset map settings: %s", route.name, exc)
        return applied

    def _shared(self, specs: Mapping[tuple[str, str], TopicSpec]) -> set[tuple[str, str]]:
        """Destination topics (cluster, name) that several following source topics are copied
        into: their settings would flip between the sources every round, so none is followed."""
        destinations = {r.name: r.destination for r in self.routes}
        writers: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for spec in specs.values():
            if spec.route in destinations:
                writers.setdefault((destinations[spec.route], spec.destination_topic), set()).add(
                    (spec.route, spec.topic)
                )
        shared = {k for k, v in writers.items() if len(v) > 1}
        for key in sorted(shared - self._warned_shared):
            sources = ", ".join(f"{route}:{topic}" for route, topic in sorted(writers[key]))
            log.warning(
                "destination topic %s on %s is copied from %s: its settings are not followed", key[1], key[0], sources
            )
        self._warned_shared = shared
        return shared

    def _follow(self, route: RouteConfig, specs: list[TopicSpec]) -> list[Change]:
        if not specs:
            return []
        source = self._describe(route.source, {s.topic for s in specs})
        destination = self._describe(route.destination, {s.destination_topic for s in specs})
        applied = []
        for spec in sorted(specs, key=lambda s: s.topic):
            if spec.topic not in source or spec.destination_topic not in destination:
                continue  # gone from the source, or not created on the destination yet
            change = plan_change(
                spec.destination_topic,
                source[spec.topic],
                destination[spec.destination_topic],
                route.topic_config.excluded,
            )
            if change.empty:
                continue
            error = self._apply(route, change)
            with self._lock:
                state = self._state[route.name]
                before = state.failing.get(change.topic)
                if error is None:
                    state.changes += 1
                    state.failing.pop(change.topic, None)
                else:
                    state.errors += 1
                    state.failing[change.topic] = error
            if error is not None and error != before:  # said once, not every round
                log.warning(
                    "route %s: destination topic %s does not take %s: %s",
                    route.name,
                    change.topic,
                    change.describe(),
                    error,
                )
            if error is None:
                log.info(
                    "route %s: destination topic %s follows %s: %s",
                    route.name,
                    change.topic,
                    spec.topic,
                    change.describe(),
                )
                applied.append(change)
        return applied

    def _keep_map(self, route: RouteConfig, specs: list[TopicSpec]) -> dict[str, str]:
        """Give the route's offset map its settings: kept as long as its longest-lived data
        (see :mod:`strait.offsetmap.retention`). Returns what was set."""
        topic = map_topic(route.name)
        names = sorted({s.destination_topic for s in specs})
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in [topic, *names]]
        # librdkafka asks for the synonyms (the broker settings behind each value) itself.
        futures = self._admin(route.destination).describe_configs(resources, request_timeout=TIMEOUT_S)
        found: dict[str, dict[str, ConfigEntry]] = {}
        for resource, future in futures.items():
            try:
                found[resource.name] = clients.admin_result(future, TIMEOUT_S, f"configs of {resource.name}")
            except KafkaException as exc:
                if exc.args[0].code() in _MISSING:
                    continue  # no map yet (the first worker to copy creates it), or a topic not created yet
                raise
        entries = found.pop(topic, None)
        if entries is None:
            return {}
        lifetimes = [
            lifetime_ms(_value(e, "cleanup.policy", "delete"), int(_value(e, "retention.ms", "-1")))
            for e in found.values()
        ]
        current = {k: e.value for k, e in entries.items() if e.value is not None}
        created = self._created_retention(route.destination, [entries, *found.values()])
        if created is None and "retention.ms" in current:
            # The cluster's default is not reported: never shorten the map, only lengthen it.
            created = int(current["retention.ms"])
        wanted = plan_map_settings(current, lifetimes if created is not None else [], created or 0)
        if not wanted:
            return {}
        changes = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sorted(wanted.items())]
        error = self._alter(route.destination, topic, changes)
        described = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items()))
        if error is None:
            self._map_failing.pop(route.name, None)
            log.info("route %s: offset map %s keeps its runs as long as its data: %s", route.name, topic, described)
            return wanted
        if self._map_failing.get(route.name) != error:  # said once, not every round
            log.warning("route %s: offset map %s does not take %s: %s", route.name, topic, described, error)
        self._map_failing[route.name] = error
        return {}

    def _created_retention(self, cluster: str, described: list[dict[str, ConfigEntry]]) -> int | None:
        """The ``retention.ms`` a new topic gets on ``cluster`` (what the map was created with):
        the value of a topic that does not set its own, a broker-level synonym, or the broker's
        settings (None when they cannot be read, e.g. without DESCRIBE_CONFIGS on the cluster)."""
        for entries in described:
            entry = entries.get("retention.ms")
            if entry is None or entry.value is None:
                continue
            if getattr(entry.source, "value", entry.source) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
                return int(entry.value)
            synonyms = getattr(entry, "synonyms", None) or {}
            found = created_retention_ms((name, s.value) for name, s in synonyms.items())
            if found is not None:
                return found
        cached = self._defaults.get(cluster)
        if cached is not None and self._clock() - cached[1] < DEFAULTS_TTL_S:
            return cached[0]
        admin = self._admin(cluster)
        try:
            brokers = admin.list_topics(timeout=TIMEOUT_S).brokers
            resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
            future = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource]
            settings = clients.admin_result(future, TIMEOUT_S, f"broker configs of {cluster}")
        except (KafkaException, ValueError) as exc:
            log.info("cluster %s: the brokers' default retention is not readable (%s)", cluster, exc)
            return None
        value = created_retention_ms(
            (k, settings[k].value if k in settings else None) for k in BROKER_RETENTION_SETTINGS
        )
        self._defaults[cluster] = (value, self._clock())
        return value

    def _admin(self, cluster: str) -> Any:
        admin = self._admins.get(cluster)
        if admin is None:
            admin = self._admins[cluster] = clients.admin(self.config.clusters[cluster])
        return admin

    def _describe(self, cluster: str, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each existing topic's overrides on ``cluster`` (one request for all of them)."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in sorted(set(topics))]
        futures = self._admin(cluster).describe_configs(resources, request_timeout=TIMEOUT_S)
        found: dict[str, dict[str, str]] = {}
        for resource, future in futures.items():
            try:
                entries = clients.admin_result(future, TIMEOUT_S, f"configs of {resource.name} on {cluster}")
            except KafkaException as exc:
                if exc.args[0].code() in _MISSING:
                    continue
                raise
            found[resource.name] = overrides(entries.values())
        return found

    def _apply(self, route: RouteConfig, change: Change) -> str | None:
        """Apply one change; None when done, else why not. A refused key does not hold back the
        others: after a refusal each key is tried on its own."""
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in change.set.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in change.delete]
        error = self._alter(route.destination, change.topic, entries)
        if error is None or len(entries) == 1:
            return error
        refused = []
        for entry in entries:
            one = self._alter(route.destination, change.topic, [entry])
            if one is not None:
                refused.append(f"{entry.name}: {one}")
        return "; ".join(refused) or None

    def _alter(self, cluster: str, topic: str, entries: list[ConfigEntry]) -> str | None:
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        futures = self._admin(cluster).incremental_alter_configs([resource], request_timeout=TIMEOUT_S)
        try:
            clients.admin_result(futures[resource], TIMEOUT_S, f"changing the configs of {topic}")
        except KafkaException as exc:
            reason = exc.args[0]
            return str(reason.str()) if isinstance(reason, KafkaError) else str(exc)
        return None
