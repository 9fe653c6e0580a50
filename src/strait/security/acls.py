"""The Kafka ACLs each Strait role needs, as data, and granting them.

A role is what one part of Strait does on one cluster: a replicator reading a route's source,
a replicator writing a route's destination, the disk balancer, the coordination store on Kafka.
Each permission carries why Strait needs it, so this module is the single answer to "what must
the platform team grant?": the documentation's ACL reference is rendered from it
(:func:`markdown`) and the sandbox grants exactly these (the union of all roles, since a sandbox
cluster can be either end of a route, be balanced and coordinate too). Topic permissions use the wildcard ``*``: which
topics a route replicates is decided at run time through the REST API. Everything Strait names
itself (groups, transactional ids, internal topics) is matched by prefix, so nothing else is
opened up.

In Kafka's ACL model READ, WRITE, ALTER and DELETE imply DESCRIBE, and ALTER_CONFIGS implies
DESCRIBE_CONFIGS; DESCRIBE is still listed where a role needs it on its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

# The names Strait gives its own resources (checked against the code that makes them in tests).
SOURCE_GROUP_PREFIX = "strait-"  # strait-<route>: checkpoints on the source (worker.agent.checkpoint_group)
TRANSACTIONAL_ID_PREFIX = "strait."  # strait.<route>.<worker>.<pipeline> (fencing.transactional_id)
DESTINATION_GROUP_PREFIX = "strait."  # strait.<route>: exactly-once checkpoints on the destination
INTERNAL_TOPIC_PREFIX = "__strait"  # __strait_balance: the balancer's state topic
BALANCER_READER_GROUP_PREFIX = "strait-balance"  # the state topic's reader carries a group.id
# strait-coordination.<prefix>.leader and .reader (coordination.kafka: the leader's id, the readers' group)
COORDINATION_PREFIX = "strait-coordination"
ANY_TOPIC = "*"
# librdkafka calls Kafka's CLUSTER resource type BROKER (both are code 4); its one name is fixed.
CLUSTER = ResourceType.BROKER
CLUSTER_NAME = "kafka-cluster"

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
LITERAL = ResourcePatternType.LITERAL
PREFIXED = ResourcePatternType.PREFIXED
Op = AclOperation


@dataclass(frozen=True)
class Permission:
    """One ALLOW ACL: ``operation`` on the resources ``resource``/``name``/``pattern`` match."""

    resource: ResourceType
    name: str
    pattern: ResourcePatternType
    operation: AclOperation
    why: str

    @property
    def key(self) -> tuple[int, str, int, int]:
        """What makes two permissions the same grant (``why`` aside)."""
        return (self.resource.value, self.name, self.pattern.value, self.operation.value)


@dataclass(frozen=True)
class Role:
    """A part of Strait on one cluster, and every permission it needs there."""

    name: str
    summary: str
    permissions: tuple[Permission, ...]


def _topics(operation: AclOperation, why: str) -> Permission:
    return Permission(TOPIC, ANY_TOPIC, LITERAL, operation, why)


def _internal(operation: AclOperation, why: str) -> Permission:
    return Permission(TOPIC, INTERNAL_TOPIC_PREFIX, PREFIXED, operation, why)


def _cluster(operation: AclOperation, why: str) -> Permission:
    return Permission(CLUSTER, CLUSTER_NAME, LITERAL, operation, why)


REPLICATOR_SOURCE = Role(
    "replicator-source",
    "workers and controllers on a route's source cluster",
    (
        _topics(Op.READ, "fetch the records of every replicated topic (and, on two-way routes, __strait_producers)"),
        _topics(Op.DESCRIBE, "metadata, and the earliest/latest offsets (ListOffsets) for start positions and lag"),
        _topics(Op.DESCRIBE_CONFIGS, "copy a topic's configs when its destination topic is created"),
        Permission(
            GROUP,
            SOURCE_GROUP_PREFIX,
            PREFIXED,
            Op.READ,
            "commit and read the checkpoints in strait-<route> (READ covers the DESCRIBE an offset fetch needs)",
        ),
    ),
)

REPLICATOR_DESTINATION = Role(
    "replicator-destination",
    "workers and controllers on a route's destination cluster",
    (
        _topics(Op.CREATE, "create a missing destination topic with the source's partitions and configs"),
        _topics(
            Op.WRITE, "produce the copied records (and, on two-way routes, publish producer ids in __strait_producers)"
        ),
        _topics(Op.DESCRIBE, "metadata and DescribeTopics while waiting for a new topic's leaders"),
        _topics(Op.ALTER, "add partitions when the source topic grew (CreatePartitions)"),
        _topics(Op.DESCRIBE_CONFIGS, "compare a destination topic's configs with the source's (config sync)"),
        _topics(Op.ALTER_CONFIGS, "bring a destination topic's configs in line with the source's (config sync)"),
        _topics(Op.READ, "exactly-once checkpoints: TxnOffsetCommit checks READ on the topics it commits offsets of"),
        _cluster(Op.IDEMPOTENT_WRITE, "InitProducerId of the idempotent producer (brokers before 2.8 ask for it)"),
        Permission(
            TRANSACTIONAL_ID,
            TRANSACTIONAL_ID_PREFIX,
            PREFIXED,
            Op.WRITE,
            "exactly-once pipelines' transactional producers, and fencing a dead worker's ids (init_transactions)",
        ),
        Permission(
            GROUP,
            DESTINATION_GROUP_PREFIX,
            PREFIXED,
            Op.READ,
            "exactly-once checkpoints committed inside the transaction to strait.<route>, and read back",
        ),
    ),
)

BALANCER = Role(
    "balancer",
    "the disk balancer (CLI, REST and its executor) on the cluster it balances",
    (
        _cluster(Op.ALTER, "move replicas (AlterPartitionReassignments, AlterReplicaLogDirs) and elect leaders"),
        _cluster(Op.DESCRIBE, "list reassignments in progress and describe every broker's log dirs"),
        _cluster(Op.ALTER_CONFIGS, "set and remove the brokers' replication throttle rates"),
        _cluster(Op.DESCRIBE_CONFIGS, "read the brokers' throttle rates"),
        _topics(Op.DESCRIBE, "every topic's replicas and leaders, to build the cluster model"),
        _topics(Op.ALTER_CONFIGS, "set and remove a moving partition's throttled-replica lists"),
        _topics(Op.DESCRIBE_CONFIGS, "read the throttled-replica lists"),
        _internal(Op.CREATE, "create the execution state topic __strait_balance"),
        _internal(Op.WRITE, "record plans and progress in the state topic"),
        _internal(Op.READ, "read plans and progress back (status, cancel)"),
        Permission(
            GROUP,
            BALANCER_READER_GROUP_PREFIX,
            PREFIXED,
            Op.DESCRIBE,
            "the state topic's reader has a group.id, whose coordinator librdkafka looks up (it commits nothing)",
        ),
    ),
)

COORDINATOR = Role(
    "coordinator",
    "controllers and workers on the cluster named in coordination.kafka (its prefix starting with __strait)",
    (
        _internal(Op.CREATE, "create the coordination topics <prefix>.state and <prefix>.live"),
        _internal(Op.WRITE, "write heartbeats, worker records, topics, drain requests and the assignment"),
        _internal(Op.READ, "read the coordination topics back into views, and their end offsets"),
        _cluster(Op.IDEMPOTENT_WRITE, "InitProducerId of the idempotent producer (brokers before 2.8 ask for it)"),
        Permission(
            TRANSACTIONAL_ID,
            COORDINATION_PREFIX,
            PREFIXED,
            Op.WRITE,
            "the leader's transactional producer; a new leader's init_transactions fences the previous one",
        ),
        Permission(
            GROUP,
            COORDINATION_PREFIX,
            PREFIXED,
            Op.DESCRIBE,
            "the coordination readers have a group.id, whose coordinator librdkafka looks up (they commit nothing)",
        ),
    ),
)

ROLES = (REPLICATOR_SOURCE, REPLICATOR_DESTINATION, BALANCER, COORDINATOR)


def permissions(roles: Iterable[Role]) -> list[Permission]:
    """The union of ``roles``' permissions, each grant once, in a stable order."""
    seen: dict[tuple[int, str, int, int], Permission] = {}
    for role in roles:
        for permission in role.permissions:
            seen.setdefault(permission.key, permission)
    return sorted(seen.values(), key=lambda p: p.key)


def bindings(principal: str, roles: Iterable[Role], *, host: str = "*") -> list[AclBinding]:
    """confluent-kafka ALLOW bindings giving ``principal`` (``User:strait``) everything ``roles`` need."""
    return [_binding(principal, p, host) for p in permissions(roles)]


def _binding(principal: str, permission: Permission, host: str) -> AclBinding:
    if not principal.startswith("User:") or principal == "User:":
        raise ValueError(f"principal must look like User:<name>, got {principal!r}")
    p = permission
    return AclBinding(p.resource, p.name, p.pattern, principal, host, p.operation, AclPermissionType.ALLOW)


class GrantError(Exception):
    """Some ACLs could not be created; the message names each one and the broker's reason."""


def grant(admin: Any, principal: str, roles: Iterable[Role], *, timeout_s: float = 30.0) -> int:
    """Create the ACLs ``roles`` need for ``principal`` with ``admin`` (a super user's AdminClient).

    Returns once a broker lists them all: the controller acknowledges an ACL before brokers
    apply it, and ``principal``'s first request must not race that. Creating an ACL that exists
    already succeeds, so granting twice is harmless. Returns how many bindings were sent;
    raises GrantError naming every binding the cluster refused.
    """
    wanted = {_binding(principal, p, "*"): p for p in permissions(roles)}
    futures = admin.create_acls(list(wanted), request_timeout=timeout_s)
    failures = []
    for binding, permission in wanted.items():
        try:
            futures[binding].result(timeout=timeout_s)
        except Exception as exc:
            failures.append(f"{_label(permission)}: {exc}")
    if failures:
        raise GrantError(f"{len(failures)} of {len(wanted)} ACL(s) for {principal} refused: " + "; ".join(failures))
    _await_visible(admin, principal, set(wanted), timeout_s)
    return len(wanted)


def _await_visible(admin: Any, principal: str, wanted: set[AclBinding], timeout_s: float) -> None:
    # None matches any resource name and any host (the stubs only admit strings).
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        principal,
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        listed = set(admin.describe_acls(everything, request_timeout=timeout_s).result(timeout=timeout_s))
        missing = wanted - listed
        if not missing:
            return
        if time.monotonic() > deadline:
            raise GrantError(f"{len(missing)} ACL(s) for {principal} created but not listed after {timeout_s:.0f}s")
        time.sleep(0.2)


def _label(permission: Permission) -> str:
    return (
        f"{permission.operation.name} on {_resource_label(permission.resource)} {permission.name!r} "
        f"({permission.pattern.name.lower()})"
    )


def _resource_label(resource: ResourceType) -> str:
    return "Cluster" if resource is CLUSTER else resource.name.replace("_", " ").title().replace(" ", "")


def markdown(roles: Iterable[Role] = ROLES) -> str:
    """A Markdown table per role: resource, name, pattern, operation and why (the ACL reference page)."""
    sections = []
    for role in roles:
        rows = [
            f"| {_resource_label(p.resource)} | `{p.name}` | {p.pattern.name.lower()} | {p.operation.name} | {p.why} |"
            for p in role.permissions
        ]
        sections.append(
            f"**{role.name}** ({role.summary})\n\n"
            "| resource | name | pattern | operation | why |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows)
        )
    return "\n\n".join(sections) + "\n"
