"""Everything the balancer asks of a live Kafka cluster, in one place.

This is the only balancer module that talks to brokers for placement (the execution state has
its own store in `strait.balancer.state`). It uses kafka-python's admin client, because
librdkafka has no KIP-455 reassignment or KIP-113 log-dir calls; the client comes from
`strait.clients`. Everything above it works on plain values, so the executor can be driven by a
fake gateway in unit tests and by a real cluster in integration tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from strait import access_errors, clients
from strait.balancer.capacity import Capacities
from strait.balancer.errors import ClusterError
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition, PartitionKey
from strait.secrets import redact

ReplicaKey = tuple[str, int, int]  # topic, partition, broker
_UNKNOWN_TOPIC = 3
_LEADER_NOT_AVAILABLE = 5
# How long the first contact may take before the cluster counts as unreachable.
PROBE_TIMEOUT_S = 15.0
# kafka-python's authorization errors -> what they refuse, as strait.access_errors says it.
_REFUSED = {
    "ClusterAuthorizationFailedError": "cluster",
    "TopicAuthorizationFailedError": "topic",
    "GroupAuthorizationFailedError": "consumer group",
    "TransactionalIdAuthorizationFailedError": "transactional id",
}


def probe(props: Mapping[str, Any], timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Reach the cluster with librdkafka before kafka-python does.

    kafka-python meets a wrong password, an untrusted certificate or a missing client
    certificate with "Unable to bootstrap" after 30 s; librdkafka reports the refusal itself at
    once (`strait.access_errors`), so the error can name the cluster, the principal and the cause.
    """
    from confluent_kafka import KafkaError, KafkaException

    started = time.monotonic()
    dropped: list[str] = []

    def on_error(error: KafkaError) -> None:
        access_errors.on_client_error(props, error)
        # A broker that requires a client certificate drops a handshake without one: librdkafka
        # calls that a transport failure, whose text names the certificate.
        if error.code() == KafkaError._TRANSPORT and "certificate" in error.str():
            dropped.append(error.str())

    # Log level 0: the refusal is said once, by the error raised below.
    admin = clients.admin(props, log_level=0, error_cb=on_error)
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except KafkaException as exc:
            refused = access_errors.recent_refusal(props, since=started)
            if refused is None and dropped:
                who = f"{access_errors.cluster_label(props)} refused {access_errors.principal(props)}"
                refused = redact(f"{who}: TLS failed: {dropped[-1]}")
            if refused is not None or time.monotonic() - started > timeout_s:
                raise ClusterError(
                    refused or f"cannot reach {access_errors.cluster_label(props)}: {exc.args[0].str()}"
                ) from exc


class _Refusals:
    """kafka-python's admin client, whose ACL refusals name the cluster, the principal and the call."""

    def __init__(self, admin: Any, props: Mapping[str, Any]) -> None:
        self._admin = admin
        self._props = props

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._admin, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except Exception as exc:
                kind = _REFUSED.get(type(exc).__name__)
                if kind is None:
                    raise
                code = getattr(exc, "message", type(exc).__name__)
                raise ClusterError(
                    f"{access_errors.cluster_label(self._props)} refused {access_errors.principal(self._props)}: "
                    f"no ACL allows {name} on the {kind} ({code}); the balancer role's ACLs are in the ACL "
                    "reference (docs/reference/acls.md)"
                ) from exc

        return call


@dataclass(frozen=True)
class ReplicaDirs:
    """Where a replica lives now and, during an intra-broker move, where it is being copied."""

    current: str | None
    future: str | None = None
    future_size: int = 0


@dataclass(frozen=True)
class Reassignment:
    """A partition reassignment in progress (KIP-455), ours or another tool's."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class Gateway(Protocol):
    """The admin operations the executor needs."""

    def load_model(self) -> ClusterModel: ...

    def replicas(self, topics: Iterable[str]) -> dict[PartitionKey, tuple[int, ...]]: ...

    def leaders(self, topics: Iterable[str]) -> dict[PartitionKey, int]: ...

    def reassignments(self) -> dict[PartitionKey, Reassignment]: ...

    def replica_dirs(self, brokers: Iterable[int], topics: Iterable[str]) -> dict[ReplicaKey, ReplicaDirs]: ...

    def disk_usage(self, brokers: Iterable[int]) -> dict[tuple[int, str], int]: ...

    def reassign(self, targets: Mapping[PartitionKey, tuple[int, ...] | None]) -> dict[PartitionKey, str | None]: ...

    def move_dirs(self, targets: Mapping[ReplicaKey, str]) -> dict[ReplicaKey, str | None]: ...

    def elect_preferred(self, partitions: Iterable[PartitionKey]) -> None: ...

    def topic_configs(self, topic: str, keys: Iterable[str]) -> dict[str, str]: ...

    def broker_configs(self, broker: int, keys: Iterable[str]) -> dict[str, str]: ...

    def alter_topic_configs(self, topic: str, ops: Mapping[str, tuple[str, str | None]]) -> None: ...

    def alter_broker_configs(self, broker: int, ops: Mapping[str, tuple[str, str | None]]) -> None: ...


class KafkaGateway:
    """`Gateway` over kafka-python's KafkaAdminClient.

    `capacities` sizes disks the broker cannot size (or sizes them differently, as in the
    sandbox where every log dir shares one filesystem): rules as in `strait.balancer.capacity`
    ("*", a path glob, a broker id, "broker:path"); without a match the dir's total bytes from
    DescribeLogDirs v4+ are used. The reported total and free bytes are kept on every `LogDir`.
    """

    def __init__(self, props: Mapping[str, Any], capacities: Capacities | Mapping[str, int] | None = None) -> None:
        self.props = dict(props)
        self.capacities = Capacities.of(capacities)
        try:
            clients.kafka_python_options(self.props)  # refuses what kafka-python cannot honour, before any I/O
        except (clients.UnsupportedProperty, OSError) as exc:  # a setting, or a TLS file it names
            where = access_errors.cluster_label(self.props)
            raise ClusterError(f"cannot use the properties of {where}: {exc}") from exc
        # A refused login or certificate, or a client speaking the wrong security.protocol for
        # the listener (a plaintext client at a TLS port too), is said at once, not after a timeout.
        probe(self.props)
        try:
            self._admin = _Refusals(clients.legacy_admin(self.props, client_id="strait-balancer"), self.props)
        except Exception as exc:
            raise ClusterError(f"cannot reach {access_errors.cluster_label(self.props)}: {exc}") from exc

    def close(self) -> None:
        self._admin.close()

    # ---- reading ------------------------------------------------------------------------------

    def cluster(self) -> tuple[str, list[Broker]]:
        meta = self._admin.describe_cluster()
        # kafka-python asks for fenced brokers too (KIP-1073): a fenced broker is not live (a dead
        # one stays registered, fenced), so it hosts nothing and no move may target it.
        brokers = [Broker(int(b["broker_id"]), b.get("rack")) for b in meta["brokers"] if not b.get("is_fenced")]
        return str(meta.get("cluster_id") or ""), brokers

    def _topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        wanted = None if topics is None else sorted(set(topics))
        found = []
        for t in self._admin.describe_topics(wanted):
            code = t.get("error_code") or 0
            if code == _UNKNOWN_TOPIC:
                continue  # deleted, or not yet known to the broker we asked: no partitions to report
            if code not in (0, _LEADER_NOT_AVAILABLE):
                raise ClusterError(f"cannot describe topic {t.get('name')}: error code {code}")
            found.append(t)
        return found

    def replicas(self, topics: Iterable[str]) -> dict[PartitionKey, tuple[int, ...]]:
        return {
            (t["name"], int(p["partition_index"])): tuple(int(r) for r in p["replica_nodes"])
            for t in self._topics(topics)
            for p in t["partitions"]
        }

    def leaders(self, topics: Iterable[str]) -> dict[PartitionKey, int]:
        return {
            (t["name"], int(p["partition_index"])): int(p["leader_id"])
            for t in self._topics(topics)
            for p in t["partitions"]
        }

    def _log_dirs(self, brokers: Iterable[int], topics: Iterable[str] | None) -> list[dict[str, Any]]:
        spec = None if topics is None else sorted(set(topics))
        try:
            entries = list(self._admin.describe_log_dirs(topic_partitions=spec, brokers=sorted(set(brokers))))
        except ClusterError:
            raise
        except Exception as exc:
            raise ClusterError(f"DescribeLogDirs failed: {exc}") from exc
        # Every broker has a log dir; one answering none is how DescribeLogDirs says "not
        # authorized" (kafka-python drops the response's error code), not an empty broker.
        silent = sorted(int(e["broker"]) for e in entries if not e.get("log_dirs"))
        if silent:
            raise ClusterError(
                f"{access_errors.cluster_label(self.props)} refused {access_errors.principal(self.props)}: "
                f"broker(s) {', '.join(map(str, silent))} described no log dirs, which is DescribeLogDirs' "
                "answer without DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); "
                "the balancer role's ACLs are in the ACL reference (docs/reference/acls.md)"
            )
        return entries

    def replica_dirs(self, brokers: Iterable[int], topics: Iterable[str]) -> dict[ReplicaKey, ReplicaDirs]:
        found: dict[ReplicaKey, ReplicaDirs] = {}
        for entry in self._log_dirs(brokers, topics):
            broker = int(entry["broker"])
            for d in entry["log_dirs"]:
                for t in d["topics"]:
                    for p in t["partitions"]:
                        key = (t["name"], int(p["partition_index"]), broker)
                        was = found.get(key, ReplicaDirs(None))
                        if p["is_future_key"]:
                            found[key] = ReplicaDirs(was.current, d["log_dir"], int(p["partition_size"]))
                        else:
                            found[key] = ReplicaDirs(d["log_dir"], was.future, was.future_size)
        return found

    def load_model(self) -> ClusterModel:
        """Brokers with racks, every log dir with capacity and usage, every partition's placement."""
        cluster_id, brokers = self.cluster()
        topics = self._topics()
        ids = [b.id for b in brokers]
        dirs: list[LogDir] = []
        where: dict[ReplicaKey, str] = {}
        sizes: dict[PartitionKey, int] = {}
        for entry in self._log_dirs(ids, None):
            broker = int(entry["broker"])
            for d in entry["log_dirs"]:
                if d.get("error_code"):
                    raise ClusterError(
                        f"broker {broker} log dir {d.get('log_dir')} is offline (error code {d['error_code']})"
                    )
                used = 0
                for t in d["topics"]:
                    for p in t["partitions"]:
                        size = int(p["partition_size"])
                        used += size
                        if p["is_future_key"]:
                            continue
                        key = (t["name"], int(p["partition_index"]))
                        where[(key[0], key[1], broker)] = d["log_dir"]
                        sizes[key] = max(sizes.get(key, 0), size)
                dirs.append(self._log_dir(broker, d, used))
        partitions = []
        for t in topics:
            for p in t["partitions"]:
                key = (t["name"], int(p["partition_index"]))
                reps = tuple(int(r) for r in p["replica_nodes"])
                placed = tuple(where.get((key[0], key[1], b), "") for b in reps)
                leader = int(p["leader_id"]) if p.get("leader_id", -1) >= 0 else None
                partitions.append(Partition(key[0], key[1], reps, placed, sizes.get(key, 0), leader))
        return ClusterModel.build(brokers, dirs, partitions, cluster_id)

    def _log_dir(self, broker: int, d: Mapping[str, Any], used: int) -> LogDir:
        path = str(d["log_dir"])
        total = int(d.get("total_bytes", -1))
        free = int(d.get("usable_bytes", -1))
        configured = self.capacities.size_for(broker, path)
        if configured is not None:
            return LogDir(broker, path, configured, used, total, free, configured=True)
        if total <= 0:
            raise ClusterError(
                f"broker {broker} did not report the size of log dir {path} (DescribeLogDirs < v4); "
                "give it with --capacity or under balance.capacities in the configuration file"
            )
        return LogDir(broker, path, total, used, total, free)

    def disk_usage(self, brokers: Iterable[int]) -> dict[tuple[int, str], int]:
        """Bytes on each log dir of `brokers` now, partial copies (future replicas) included."""
        usage: dict[tuple[int, str], int] = {}
        for entry in self._log_dirs(brokers, None):
            broker = int(entry["broker"])
            for d in entry["log_dirs"]:
                usage[(broker, str(d["log_dir"]))] = sum(
                    int(p["partition_size"]) for t in d["topics"] for p in t["partitions"]
                )
        return usage

    def reassignments(self) -> dict[PartitionKey, Reassignment]:
        found = self._admin.list_partition_reassignments()
        return {
            (tp.topic, int(tp.partition)): Reassignment(
                tuple(r["replicas"]), tuple(r["adding_replicas"]), tuple(r["removing_replicas"])
            )
            for tp, r in found.items()
        }

    # ---- acting -------------------------------------------------------------------------------

    def reassign(self, targets: Mapping[PartitionKey, tuple[int, ...] | None]) -> dict[PartitionKey, str | None]:
        """Start (replica list) or cancel (None) reassignments; per-partition error text or None."""
        from kafka.structs import TopicPartition

        if not targets:
            return {}
        request = {TopicPartition(t, p): (list(r) if r is not None else None) for (t, p), r in targets.items()}
        try:
            result = self._admin.alter_partition_reassignments(request)
        except Exception as exc:
            raise ClusterError(f"AlterPartitionReassignments failed: {exc}") from exc
        return {(tp.topic, int(tp.partition)): (None if err is None else err.__name__) for tp, err in result.items()}

    def move_dirs(self, targets: Mapping[ReplicaKey, str]) -> dict[ReplicaKey, str | None]:
        """Send replicas to log dirs (KIP-113); per-replica error class name or None."""
        from kafka.errors import NoError
        from kafka.structs import TopicPartitionReplica

        if not targets:
            return {}
        request = {TopicPartitionReplica(t, p, b): path for (t, p, b), path in targets.items()}
        try:
            result = self._admin.alter_replica_log_dirs(request)
        except Exception as exc:
            raise ClusterError(f"AlterReplicaLogDirs failed: {exc}") from exc
        return {
            (r.topic, int(r.partition), int(r.broker_id)): (None if err is NoError else err.__name__)
            for r, err in result.items()
        }

    def elect_preferred(self, partitions: Iterable[PartitionKey]) -> None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        if by_topic:
            self._admin.elect_leaders(0, by_topic, raise_errors=False)

    def topic_configs(self, topic: str, keys: Iterable[str]) -> dict[str, str]:
        return self._configs("TOPIC", topic, keys, "DYNAMIC_TOPIC_CONFIG")

    def broker_configs(self, broker: int, keys: Iterable[str]) -> dict[str, str]:
        return self._configs("BROKER", str(broker), keys, "DYNAMIC_BROKER_CONFIG")

    def _configs(self, kind: str, name: str, keys: Iterable[str], source: str) -> dict[str, str]:
        from kafka.admin import ConfigResource, ConfigResourceType

        wanted = sorted(set(keys))
        resource = ConfigResource(ConfigResourceType[kind], name, wanted)
        result = self._admin.describe_configs([resource], config_filter="modified")
        entries = result.get(kind.lower(), {}).get(name, {})
        return {
            k: str(v["value"])
            for k, v in entries.items()
            if k in wanted and v.get("config_source") == source and v.get("value") is not None
        }

    def alter_topic_configs(self, topic: str, ops: Mapping[str, tuple[str, str | None]]) -> None:
        self._alter("TOPIC", topic, ops)

    def alter_broker_configs(self, broker: int, ops: Mapping[str, tuple[str, str | None]]) -> None:
        self._alter("BROKER", str(broker), ops)

    def _alter(self, kind: str, name: str, ops: Mapping[str, tuple[str, str | None]]) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        if not ops:
            return
        configs = {k: (AlterConfigOp[op], value) for k, (op, value) in ops.items()}
        resource = ConfigResource(ConfigResourceType[kind], name, configs)
        result = self._admin.alter_configs([resource], incremental=True, raise_on_unknown=False)
        outcome = result.get(kind.lower(), {}).get(name)
        if outcome != "OK":
            raise ClusterError(f"changing configs {sorted(ops)} of {kind.lower()} {name} failed: {outcome}")
