"""Strait's configuration: one typed model, loaded from YAML, overridable by environment.

Every node of a Strait deployment (controllers and workers) reads the same file, so that
no node can drift from the others (MirrorMaker's per-node whitelists did). Topics are not
in the file: they live in the coordination store (ZooKeeper or a Kafka cluster) and change
through the controller's REST API.

Environment variables override the file (read by pydantic-settings):
``STRAIT_COORDINATION__ZOOKEEPER__CONNECT=host:2181`` sets ``coordination.zookeeper.connect``; a
double underscore separates levels. Values are
text converted to the key's type, so ``STRAIT_CONTROLLER__REFRESH_INTERVAL_S=2`` is a
number; ``null`` unsets an optional value.

Any text value may reference a secret, ``${env:NAME}`` or ``${file:/path}`` (see
:mod:`strait.secrets`), resolved at load and again at each reload (:mod:`strait.reload`);
secret values are masked in logs and errors.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource

from strait.balancer.settings import BalanceConfig
from strait.secrets import SecretError, redact, resolve

ENV_PREFIX = "STRAIT_"

# Route names become ZooKeeper node names and consumer-group suffixes.
_ROUTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ConfigError(ValueError):
    """The configuration is unusable; the message names the offending key."""


class _Model(BaseModel):
    # Unknown keys are typos more often than not: refuse them so they are noticed.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ZookeeperConfig(_Model):
    """Where the coordination state lives."""

    connect: str = Field(
        default="127.0.0.1:2181", description="ZooKeeper's connection string: comma-separated host:port pairs."
    )
    root: str = Field(
        default="/strait",
        description="The znode under which Strait keeps its state; fleets that share an ensemble need roots of "
        "their own.",
    )
    # How soon a dead worker's partitions move (the session expires this long after its last
    # heartbeat), and how long a live process may stall without being declared dead: 4 s had no
    # false expiration under a 2 s SIGSTOP or a CPU hog on every core, 3 s had (the failure
    # detection design page, docs/design/failure-detection.md). The server must grant it: stock
    # ZooKeeper's minimum is 2 x tickTime.
    session_timeout_s: float = Field(default=4.0, gt=0)

    @field_validator("root")
    @classmethod
    def _absolute_root(cls, value: str) -> str:
        if not value.startswith("/") or (len(value) > 1 and value.endswith("/")):
            raise ValueError("must be an absolute path without a trailing '/', e.g. /strait")
        return value


class KafkaCoordinationConfig(_Model):
    """Coordination on a Kafka cluster of `clusters:` (see strait.coordination.kafka)."""

    cluster: str = Field(description="The cluster (a name under `clusters:`) whose topics hold the coordination state.")
    # Names the two coordination topics (<prefix>.state, <prefix>.live) and the leader's
    # transactional id (<prefix>-leader); fleets sharing a cluster need prefixes of their own.
    prefix: str = "__strait"
    # As zookeeper.session_timeout_s: a worker or leader whose heartbeats stop this long is gone.
    session_timeout_s: float = Field(default=4.0, gt=0)

    @field_validator("prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        if not _TOPIC_CHARS.match(value) or len(value) > 200:
            raise ValueError(f"{value!r}: use up to 200 letters, digits, '.', '_' or '-' (it names topics)")
        return value


class CoordinationConfig(_Model):
    """Where the coordination state lives: exactly one of `kafka` and `zookeeper`."""

    kafka: KafkaCoordinationConfig | None = None
    zookeeper: ZookeeperConfig | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CoordinationConfig:
        if (self.kafka is None) == (self.zookeeper is None):
            raise ValueError("give exactly one of kafka and zookeeper")
        return self

    @property
    def session_timeout_s(self) -> float:
        section = self.kafka or self.zookeeper
        assert section is not None  # validated: exactly one
        return section.session_timeout_s


_legacy_zookeeper_warned = False


def _warn_legacy_zookeeper() -> None:
    global _legacy_zookeeper_warned
    if not _legacy_zookeeper_warned:
        _legacy_zookeeper_warned = True
        logging.getLogger(__name__).warning(
            "the top-level zookeeper section is deprecated: write it as coordination: {zookeeper: {...}}"
        )


class GroupSyncConfig(_Model):
    """Continuous consumer-group offset sync of a route (see strait.controller.groupsync)."""

    # Source consumer groups whose names match (re.fullmatch) an include and no exclude pattern;
    # Strait's own groups are never synced.
    include: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(
        default_factory=list,
        description="Consumer groups (`re.fullmatch`) never synced, even when an include matches.",
    )
    interval_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="How often the leading controller translates and commits the groups' offsets.",
    )

    @field_validator("include", "exclude")
    @classmethod
    def _valid_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        return patterns


# Characters Kafka allows in a topic name; a name has at most 249 of them.
_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
_TOPIC_MAX = 249
# What a naming template may use; {topic} (the source topic's name) is required.
NAMING_FIELDS = ("topic", "route", "source_cluster", "destination_cluster")


class NamingConfig(_Model):
    """How a route names its destination topics: the source's name (default), ``prefix`` + name,
    or a ``template`` such as ``"{source_cluster}.{topic}"`` (fields: ``topic``, ``route``,
    ``source_cluster``, ``destination_cluster``). A topic added through the API with its own
    ``destination_topic`` keeps that name."""

    prefix: str | None = Field(
        default=None, min_length=1, description="Destination topic name = this prefix + the source topic's name."
    )
    template: str | None = Field(
        default=None,
        min_length=1,
        description="Destination topic name from a template with the fields `topic` (required), `route`, "
        '`source_cluster` and `destination_cluster`, such as "{source_cluster}.{topic}".',
    )

    @field_validator("prefix")
    @classmethod
    def _valid_prefix(cls, value: str | None) -> str | None:
        if value is not None and not _TOPIC_CHARS.match(value):
            raise ValueError(f"prefix {value!r}: use letters, digits, '.', '_' or '-' (a topic name's characters)")
        return value

    @field_validator("template")
    @classmethod
    def _valid_template(cls, value: str | None) -> str | None:
        if value is None:
            return value
        fields = []
        try:
            parts = list(string.Formatter().parse(value))
        except ValueError as exc:
            raise ValueError(f"template {value!r}: {exc}") from exc
        for literal, name, spec, conversion in parts:
            if literal and not _TOPIC_CHARS.match(literal):
                raise ValueError(f"template {value!r}: {literal!r} holds characters a topic name cannot have")
            if name is None:
                continue
            if name not in NAMING_FIELDS or spec or conversion:
                raise ValueError(f"template {value!r}: unknown field {{{name}}} (fields: {', '.join(NAMING_FIELDS)})")
            fields.append(name)
        if "topic" not in fields:
            raise ValueError(f"template {value!r} must contain {{topic}} (two source topics would get one name)")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> NamingConfig:
        if self.prefix is not None and self.template is not None:
            raise ValueError("give either prefix or template, not both")
        return self

    @property
    def renames(self) -> bool:
        return self.prefix is not None or self.template is not None

    def _template(self) -> str:
        if self.template is not None:
            return self.template
        return (self.prefix or "").replace("{", "{{").replace("}", "}}") + "{topic}"

    def destination_topic(self, topic: str, *, route: str, source: str, destination: str) -> str:
        """The destination name of source topic ``topic``."""
        return self._template().format(topic=topic, route=route, source_cluster=source, destination_cluster=destination)

    def source_topic(self, name: str, *, route: str, source: str, destination: str) -> str | None:
        """The source topic whose copy this naming calls ``name``; None if no name maps to it."""
        pattern, topic_seen = "", False
        for literal, field, _spec, _conversion in string.Formatter().parse(self._template()):
            pattern += re.escape(literal)
            if field == "topic":
                pattern += "(?P=topic)" if topic_seen else "(?P<topic>.+)"
                topic_seen = True
            elif field is not None:
                values = {"route": route, "source_cluster": source, "destination_cluster": destination}
                pattern += re.escape(values[field])
        match = re.fullmatch(pattern, name)
        return match.group("topic") if match else None


# Topic settings never followed: the copy needs CreateTime timestamps it sets itself, and the
# replication throttles are managed per cluster by reassignment tools.
ALWAYS_UNFOLLOWED_CONFIGS = (
    "message.timestamp.type",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)


class TopicConfigFollow(_Model):
    """The destination topics' settings follow their source topics' (see strait.controller.topicconfig)."""

    # The leading controller compares every refresh_interval_s and applies what changed.
    follow: bool = True
    # Keys (re.fullmatch patterns) the destination keeps its own values for: neither copied when
    # the topic is created nor followed. Besides these, the keys of ALWAYS_UNFOLLOWED_CONFIGS are never followed.
    exclude: list[str] = Field(default_factory=lambda: ["min.insync.replicas", "unclean.leader.election.enable"])

    @field_validator("exclude")
    @classmethod
    def _valid_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        return patterns

    def excluded(self, key: str) -> bool:
        """Whether the destination keeps its own value of ``key``."""
        return key in ALWAYS_UNFOLLOWED_CONFIGS or any(re.fullmatch(p, key) for p in self.exclude)


class RouteConfig(_Model):
    """Copy topics from one cluster to another."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(
        description="The route's name: 1-100 letters, digits, '.', '_' or '-'. It names the route's checkpoint "
        "groups (`strait-<route>`, `strait.<route>`), its offset map topic and its transactional ids."
    )
    source: str = Field(description="The cluster (a name under `clusters:`) the route copies from.")
    destination: str = Field(description="The cluster (a name under `clusters:`) the route copies to.")
    include: list[str] = Field(
        default_factory=list,
        description="Regular expressions (`re.fullmatch`) of source topics the route picks up by itself; topics "
        "can also be added through the API. Kafka-internal topics (`__*`) are never picked up by pattern.",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="Regular expressions (`re.fullmatch`) of source topics never picked up by pattern.",
    )
    replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Replication factor of the destination topics Strait creates; unset, three where the "
        "destination has three brokers or more, else one per broker.",
    )
    # at-least-once: idempotent producer, checkpoints in the source group after acks (a killed
    # worker's successor may copy some records again). exactly-once: transactional producer,
    # checkpoints committed inside the destination transaction (docs/guides/exactly-once.md).
    delivery: Literal["at-least-once", "exactly-once"] = "at-least-once"
    # batch (the default): copy whole record batches without decompressing them
    # (strait.worker.batch) while a partition lags (catchup_lag_threshold below; record by record
    # once it keeps up), each partition whose batches cannot pass unchanged (compacted gaps,
    # a destination compression.type other than the source's codec, old message formats) record
    # by record, with the reason in its stats. record: every partition record by record.
    # Active-active exactly-once routes copy record by record whatever this says (the reason is
    # in their stats too; see strait.worker.agent.copy_mode); other exactly-once routes copy
    # whole batches inside their transactions (with the offset map's runs), other active-active
    # routes whole batches told apart by producer id.
    # (`copy` in the file; `copy_mode` in code, as pydantic models have a copy() method.)
    copy_mode: Literal["record", "batch"] = Field(default="batch", alias="copy")
    # Partitions more than this many records behind are copied by the route's catch-up pipeline,
    # the others by its realtime pipeline (a backlog cannot hold up a partition that keeps up).
    # copy: batch routes copy the lagging partitions in batch mode and the caught-up ones record
    # by record (their source batches hold a few records each); back to the realtime pipeline
    # at a quarter of it. null: one pipeline for every partition (copy: batch: all in batch mode).
    catchup_lag_threshold: int | None = Field(default=10_000, ge=1)
    # copy: batch routes with a threshold: how caught-up partitions are copied. record: record
    # by record through librdkafka, which sends one produce request per partition. batch: whole
    # batches in a realtime batch pipeline of their own (never paced by a backlog), a
    # partition's small uncompressed batches merged into one, the partitions of one destination
    # broker sharing requests (the destination broker's CPU at 10,000 records/s over 8
    # partitions: ~27 % instead of ~46 %; the worker's own CPU at 1,000 records/s doubled: see
    # docs/design/copy-modes.md); small compressed batches still go record by record. auto (the default): batch
    # while the route's caught-up partitions on a worker receive over 5,000 records/s together,
    # record below 2,500 (strait.worker.moves).
    realtime_copy: Literal["record", "batch", "auto"] = "auto"
    # exactly-once only: a transaction is committed at least this often (and sooner when
    # transaction_max_bytes were produced in it).
    transaction_interval_ms: int = Field(default=100, ge=10, le=60_000)
    transaction_linger_ms: int = Field(
        default=20,
        ge=0,
        le=60_000,
        description="Exactly-once only: a transaction whose pipeline has copied all its source holds commits once "
        "it is this old, before `transaction_interval_ms` is up (longer: fewer, larger "
        "transactions; shorter: records visible sooner).",
    )
    transaction_max_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Exactly-once only: a transaction is committed once this many bytes were produced in it, "
        "before `transaction_interval_ms` is up.",
    )
    # Publish which source offsets landed at which destination offsets (runs of consecutive
    # records) to `__strait_offsets.<route>` on the destination, for exact consumer failover.
    offset_map: bool = True
    # Two-way replication (A->B and B->A over the same topics): what came from this route's
    # destination is not copied back (no loops). Whole-batch copies are told by their producer
    # ids, published in the destination's __strait_producers topic before use; record-mode
    # copies carry the header strait.origin naming the cluster a record was first written to
    # (strait.worker.batch.provenance). Cluster names must be the same in both routes'
    # configurations.
    active_active: bool = False
    # The worker pools this route's partitions may run on (`worker.pool`); None: every pool.
    # With no live worker in any of them, the route waits (reported), never borrows another pool.
    pools: list[str] | None = Field(default=None, min_length=1)
    # The leader translates matching source groups' committed offsets through the offset map and
    # commits them to the same groups on the destination while they have no members there.
    groups: GroupSyncConfig | None = None
    # Destination topic names: identity (default), `prefix: "A."` or `template: "{source_cluster}.{topic}"`.
    naming: NamingConfig = Field(default_factory=NamingConfig)
    # Destination topic settings follow the source's, except the excluded keys.
    topic_config: TopicConfigFollow = Field(default_factory=TopicConfigFollow)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _ROUTE_NAME.match(value):
            raise ValueError("must be 1-100 characters of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("pools")
    @classmethod
    def _valid_pools(cls, pools: list[str] | None) -> list[str] | None:
        for pool in pools or []:
            if not _ROUTE_NAME.match(pool):
                raise ValueError(f"invalid pool name {pool!r}: use 1-100 letters, digits, '.', '_' or '-'")
        return pools

    @field_validator("include", "exclude")
    @classmethod
    def _valid_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        return patterns

    @model_validator(mode="after")
    def _groups_need_the_map(self) -> RouteConfig:
        if self.groups is not None and not self.offset_map:
            raise ValueError("groups: consumer-group sync translates through the offset map; set offset_map: true")
        return self

    @model_validator(mode="after")
    def _names_are_topic_names(self) -> RouteConfig:
        sample = self.destination_topic("t")
        if not _TOPIC_CHARS.match(sample) or len(sample) > _TOPIC_MAX:
            raise ValueError(
                f"naming: gives {sample!r} for source topic 't' (cluster names used in a template must be "
                "letters, digits, '.', '_' or '-')"
            )
        return self

    def destination_topic(self, topic: str) -> str:
        """The destination name this route gives source topic ``topic`` (see :class:`NamingConfig`)."""
        return self.naming.destination_topic(topic, route=self.name, source=self.source, destination=self.destination)

    def matches(self, topic: str) -> bool:
        """Whether a source topic is picked up by this route's patterns."""
        if topic.startswith("__"):  # Kafka-internal topics are never replicated by pattern
            return False
        included = any(re.fullmatch(p, topic) for p in self.include)
        return included and not any(re.fullmatch(p, topic) for p in self.exclude)


class TlsConfig(_Model):
    """HTTPS for an endpoint Strait serves: its certificate and key (PEM files), and the authority
    Strait's own clients trust for it."""

    cert: Path = Field(description="The server certificate (PEM file).")
    key: Path = Field(description="The server certificate's private key (PEM file).")
    ca: Path | None = Field(
        default=None,
        description="The certificate authority Strait's own clients (the CLI, workers calling the controller) "
        "trust for this endpoint; unset, the system's trust store.",
    )

    @model_validator(mode="after")
    def _readable(self) -> TlsConfig:
        for name in ("cert", "key", "ca"):
            file = getattr(self, name)
            if file is not None and not Path(file).is_file():
                raise ValueError(f"{name}: no such file {file}")
        return self

    def client_verify(self) -> str | bool:
        """What an HTTP client passes as ``verify=``."""
        return str(self.ca) if self.ca is not None else True


class ControllerConfig(_Model):
    """The controller's REST API and control loop."""

    listen: str = Field(
        default="127.0.0.1:9000", description="host:port of the controller's REST API, dashboard and metrics."
    )
    api_token: str | None = Field(
        default=None,
        description="When set, calls that change something need `Authorization: Bearer <token>` (compared in "
        "constant time). Reference it as a secret: `${file:/path}` or `${env:NAME}`.",
    )
    refresh_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="How often the leading controller lists the source clusters for topics its routes' patterns "
        "match, and compares destination topic settings with the source's.",
    )
    # Workers that left (or died) stay listed this long, then are forgotten.
    forget_left_workers_s: float = Field(default=3600.0, gt=0)
    # POST /topics/{topic} asks the source this long for a topic it does not know yet (one created
    # a moment ago reaches the brokers' metadata asynchronously) before answering 404.
    new_topic_wait_s: float = Field(default=5.0, ge=0)
    # HTTPS for the REST API, the dashboard and /metrics (and the workers' /metrics).
    tls: TlsConfig | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        """Where this controller's API is reached by default."""
        return f"{self.scheme}://{self.listen}"

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9000")
        return value

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


class BatchSharingConfig(_Model):
    """How a `copy: batch` route's backlog shares a worker with the route's realtime partitions
    (strait.worker.batch.budget). The backlog's batch pipeline runs in a process of its own, at
    ``nice``; while realtime partitions copy records next to it, its fetch rate is paced.

    ``pace: latency`` (the default) sets the rate from the realtime partitions' own end-to-end
    p99 on this worker (strait.worker.batch.pace): it grows while the p99 stays within the
    budget and is cut (by up to half) when it goes over, between ``floor_mb_s`` and ``ceiling_mb_s``. The
    budget is ``latency_budget_ms``, or, unset, ``budget_ratio`` times the p99 the worker saw
    while no backlog drained. ``pace: fixed`` fetches at ``fixed_mb_s``.
    """

    enabled: bool = Field(
        default=True,
        description="Whether a backlog's fetch rate is paced while the route's realtime partitions copy "
        "records on the same worker.",
    )
    pace: Literal["latency", "fixed"] = Field(
        default="latency",
        description="`latency`: the fetch rate follows the realtime partitions' p99; `fixed`: `fixed_mb_s`.",
    )
    fixed_mb_s: float = Field(default=32.0, gt=0, description="The fetch rate of `pace: fixed`, in MB/s.")
    start_mb_s: float = Field(default=16.0, gt=0, description="The latency pace's first rate, in MB/s.")
    floor_mb_s: float = Field(
        default=2.0, gt=0, description="The latency pace's lowest rate, in MB/s (a backlog always drains)."
    )
    ceiling_mb_s: float = Field(default=64.0, gt=0, description="The latency pace's highest rate, in MB/s.")
    latency_budget_ms: float | None = Field(
        default=None,
        gt=0,
        description="The realtime p99 the latency pace keeps within; unset, `budget_ratio` times the p99 the "
        "worker saw while no backlog drained.",
    )
    budget_ratio: float = Field(
        default=2.0,
        gt=1,
        description="The budget as a multiple of the realtime p99 without a backlog, when `latency_budget_ms` "
        "is unset.",
    )
    # So the scheduler serves the realtime copy loop and the brokers first while they need the CPU;
    # an idle core is the backlog's all the same.
    nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How much nicer than the worker its backlog processes run (0: as nice as the worker).",
    )

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> BatchSharingConfig:
        if self.floor_mb_s > self.ceiling_mb_s:
            raise ValueError("floor_mb_s must not exceed ceiling_mb_s")
        return self


class WorkerConfig(_Model):
    """Options shared by every worker; the worker id comes from the command line."""

    # The pool this worker joins (`strait worker --pool` overrides it); routes name their pools.
    pool: str = "default"
    commit_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="The longest a worker leaves acknowledged progress uncommitted (at-least-once routes): "
        "a fault makes the next owner copy again what was acknowledged since the last commit.",
    )
    commit_after_records: int = Field(
        default=1_000,
        gt=0,
        description="Commit at once, before the interval ends, when a partition's checkpoint moved this many "
        "records past its last commit (a backlog's batches): one request at a time, on a thread of its own.",
    )
    stats_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often a worker publishes its stats report (lag, rates, copy modes).",
    )
    drain_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a draining worker waits for the controller to move its partitions before it "
        "releases them itself (committing what was acknowledged) and leaves.",
    )
    revoke_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a worker waits for a partition it gives up to settle what it has in flight.",
    )
    batch_sharing: BatchSharingConfig = Field(default_factory=BatchSharingConfig)
    # Connections to each destination broker for a batch pipeline's produce requests, each
    # partition pinned to one (strait.worker.batch.link). More than one helped in plaintext
    # (4 lanes: 1.4-1.6x one lane) but not reliably over TLS.
    batch_produce_lanes: int = Field(default=1, ge=1, le=16)

    @field_validator("pool")
    @classmethod
    def _valid_pool(cls, value: str) -> str:
        if not _ROUTE_NAME.match(value):
            raise ValueError("must be 1-100 characters of letters, digits, '.', '_' or '-'")
        return value


class ObservabilityConfig(_Model):
    """Metrics, stuck-partition healing and slow-worker detection."""

    # Where each worker serves its Prometheus `/metrics`; port 0 picks a free port (several
    # workers per host), and the controller lists the real addresses at `/metrics/targets`.
    worker_metrics_listen: str | None = "127.0.0.1:0"
    # When set, every `/metrics` (the workers' and the controllers') and `/metrics/targets` need
    # `Authorization: Bearer <metrics_token>`; a token of its own, so Prometheus can read but not act.
    metrics_token: str | None = None
    sample_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often the leading controller samples the fleet for the dashboard, healing and metrics.",
    )
    # A lagging partition whose checkpoint has not moved this long is stuck.
    stuck_after_s: float = Field(default=60.0, gt=0)
    heal: bool = Field(
        default=True, description="Whether the leading controller moves stuck partitions away from their worker."
    )
    max_moves: int = Field(
        default=3, ge=0, description="Moves of a stuck partition that did not help before it is flagged for a person."
    )
    cooldown_s: float = Field(
        default=600.0,
        gt=0,
        description="How long a worker is avoided for a partition moved away from it, and how long a partition "
        "must stay healthy to be forgotten.",
    )
    slow_worker_ratio: float = Field(
        default=0.25,
        gt=0,
        lt=1,
        description="A worker is slow when its bytes/s per backlogged partition is below this share of its peers' "
        "median.",
    )


class StraitConfig(_Model):
    """The whole configuration file."""

    coordination: CoordinationConfig = Field(default_factory=lambda: CoordinationConfig(zookeeper=ZookeeperConfig()))
    # The ZooKeeper settings in use, or the defaults when coordination is on Kafka. In a file, the
    # deprecated spelling of coordination.zookeeper.
    zookeeper: ZookeeperConfig = Field(default_factory=ZookeeperConfig)
    clusters: dict[str, dict[str, Any]] = Field(
        description="The Kafka clusters, by name: each a mapping of librdkafka client properties "
        "(`bootstrap.servers`, `security.protocol`, `sasl.*`, `ssl.*`, ...) passed to every client Strait makes "
        "for that cluster. Values are text, numbers or true/false; `null` unsets a property."
    )
    routes: list[RouteConfig] = Field(
        min_length=1, description="The replication routes, at least one, with unique names."
    )
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    balance: BalanceConfig = Field(default_factory=BalanceConfig)

    @model_validator(mode="before")
    @classmethod
    def _coordination_section(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        coordination = data.get("coordination")
        if "zookeeper" in data:
            if coordination is not None:
                raise ValueError(
                    "zookeeper: the top-level zookeeper section is the old spelling of coordination.zookeeper; "
                    "give coordination alone"
                )
            _warn_legacy_zookeeper()
            return {**data, "coordination": {"zookeeper": data["zookeeper"]}}
        if isinstance(coordination, Mapping) and coordination.get("zookeeper") is not None:
            return {**data, "zookeeper": coordination["zookeeper"]}
        return data

    @field_validator("clusters")
    @classmethod
    def _scalar_properties(cls, clusters: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        # librdkafka turns any value into text, so a YAML list of brokers would silently become
        # the host "['a:9092', 'b:9092']"; refuse it here, naming the property. null (in the file
        # or as an environment override) unsets a property: librdkafka's default applies.
        kept: dict[str, dict[str, Any]] = {}
        for name, props in clusters.items():
            kept[name] = {}
            for key, value in props.items():
                if value is None:
                    continue
                if not isinstance(value, str | int | float | bool):
                    raise ValueError(
                        f"{name}.{key}: a client property must be text, a number or true/false, "
                        f"not {type(value).__name__} (write lists as 'a:9092,b:9092')"
                    )
                kept[name][key] = value
        return kept

    @model_validator(mode="after")
    def _consistent_routes(self) -> StraitConfig:
        seen: set[str] = set()
        for index, route in enumerate(self.routes):
            if route.name in seen:
                raise ValueError(f"routes.{index}.name: duplicate route name {route.name!r}")
            seen.add(route.name)
            for role in ("source", "destination"):
                cluster = getattr(route, role)
                if cluster not in self.clusters:
                    raise ValueError(
                        f"routes.{index}.{role}: unknown cluster {cluster!r} "
                        f"(clusters: {', '.join(sorted(self.clusters)) or 'none'})"
                    )
        return self

    @model_validator(mode="after")
    def _known_coordination_cluster(self) -> StraitConfig:
        kafka = self.coordination.kafka
        if kafka is not None and kafka.cluster not in self.clusters:
            raise ValueError(
                f"coordination.kafka.cluster: unknown cluster {kafka.cluster!r} "
                f"(clusters: {', '.join(sorted(self.clusters)) or 'none'})"
            )
        return self

    @model_validator(mode="after")
    def _known_balance_clusters(self) -> StraitConfig:
        unknown = self.balance.unknown_clusters(self.clusters)
        if unknown:
            raise ValueError(
                f"balance.capacities/disk_classes/clusters: unknown cluster(s) {', '.join(unknown)} "
                f"(clusters: {', '.join(sorted(self.clusters)) or 'none'})"
            )
        return self

    def route(self, name: str) -> RouteConfig | None:
        return next((r for r in self.routes if r.name == name), None)


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> StraitConfig:
    """Read, override from the environment, and validate a configuration file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return parse_config(raw, os.environ if environ is None else environ, origin=str(path))


def parse_config(raw: Mapping[str, Any], environ: Mapping[str, str], origin: str = "config") -> StraitConfig:
    """Validate an already-parsed configuration mapping after applying environment overrides."""
    data = _apply_env(dict(raw), environ)
    try:
        data = resolve(data, environ)
    except SecretError as exc:
        raise ConfigError(f"{origin}: {exc}") from exc
    try:
        return StraitConfig.model_validate(data)
    except ValidationError as exc:
        # pydantic quotes the offending input: mask any secret in it.
        raise ConfigError(redact(f"{origin}: " + "; ".join(_describe(e) for e in exc.errors()))) from None


def _describe(error: Any) -> str:
    location = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{location}: {message}" if location else message


@functools.cache
def _environment_shape() -> type[BaseSettings]:
    # pydantic-settings reads the STRAIT_* variables against the configuration's own sections
    # (prefix, `__` between levels, any case, `null` for None). Other STRAIT_* variables
    # (STRAIT_CACHE, the sandbox's jar cache; STRAIT_CHAOS_SEED) name no section and are left alone.
    fields: dict[str, Any] = {name: (field.annotation, None) for name, field in StraitConfig.model_fields.items()}
    return create_model("StraitEnvironment", __base__=BaseSettings, **fields)


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    source = EnvSettingsSource(
        _environment_shape(), env_prefix=ENV_PREFIX, env_nested_delimiter="__", env_parse_none_str="null"
    )
    # `null` is turned into None here, not by the source: it only does that for the variables it
    # reads from os.environ itself, so a given `environ` kept "null" as text (an API token of
    # "null", a budget that failed to parse as a number).
    source.env_vars = {
        name.lower(): None if text == "null" else text for name, text in environ.items() if name.startswith(ENV_PREFIX)
    }
    _merge(data, source())
    return data


def _merge(data: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(data.get(key), Mapping):
            # A copy of the section it changes: the caller's mapping stays as it was.
            data[key] = dict(data[key])
            _merge(data[key], value)
        else:
            # Text stays text: pydantic converts "2" or "true" for typed fields, whereas YAML
            # would turn a token such as "12:30" into a (sexagesimal) number.
            data[key] = dict(value) if isinstance(value, Mapping) else value
