"""The ACL role data: well-formed for Kafka, least privilege, prefixes that match Strait's own names."""

from __future__ import annotations

import inspect
import re
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from strait.balancer import state
from strait.fencing import transactional_id
from strait.security import acls
from strait.worker.agent import checkpoint_group
from strait.worker.transactional_checkpoints import destination_group

Op = AclOperation
# What Kafka accepts per resource type (org.apache.kafka.common.acl.AclOperation docs).
SUPPORTED = {
    ResourceType.TOPIC: {
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    },
    ResourceType.GROUP: {Op.READ, Op.DESCRIBE, Op.DELETE},
    acls.CLUSTER: {
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    },
    ResourceType.TRANSACTIONAL_ID: {Op.DESCRIBE, Op.WRITE},
}
ALL_PERMISSIONS = [(role.name, p) for role in acls.ROLES for p in role.permissions]


@pytest.mark.parametrize(("role", "permission"), ALL_PERMISSIONS, ids=lambda v: getattr(v, "name", None) or str(v))
def test_every_permission_is_one_kafka_accepts(role: str, permission: acls.Permission) -> None:
    assert permission.operation in SUPPORTED[permission.resource], (role, permission)
    assert permission.pattern in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED)
    assert permission.why.strip() and permission.name
    if permission.resource is acls.CLUSTER:
        assert (permission.name, permission.pattern) == ("kafka-cluster", ResourcePatternType.LITERAL)
    if permission.pattern is ResourcePatternType.PREFIXED:
        assert permission.name not in ("*", "") and "*" not in permission.name


def test_roles_hold_no_broad_or_dangerous_grant() -> None:
    for role, p in ALL_PERMISSIONS:
        assert p.operation not in (Op.ALL, Op.DELETE, Op.CLUSTER_ACTION, Op.ANY), (role, p)
        # Only topics are open to every name: groups and transactional ids are Strait's own.
        if p.name == acls.ANY_TOPIC:
            assert p.resource is ResourceType.TOPIC and p.pattern is ResourcePatternType.LITERAL, (role, p)
        if p.resource in (ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID):
            assert p.pattern is ResourcePatternType.PREFIXED and p.name.startswith("strait"), (role, p)


def test_no_role_lists_a_grant_twice() -> None:
    for role in acls.ROLES:
        keys = [p.key for p in role.permissions]
        assert len(keys) == len(set(keys)), role.name


def test_prefixes_cover_the_names_strait_gives_its_resources() -> None:
    for route in ("src-dst", "billing.eu", "a"):
        assert checkpoint_group(route).startswith(acls.SOURCE_GROUP_PREFIX)
        assert destination_group(route).startswith(acls.DESTINATION_GROUP_PREFIX)
        for pipeline in ("realtime", "catchup"):
            assert transactional_id(route, "host.example.com", pipeline).startswith(acls.TRANSACTIONAL_ID_PREFIX)
    assert state.TOPIC.startswith(acls.INTERNAL_TOPIC_PREFIX)
    reader = re.search(r'"group\.id":\s*"([^"]+)"', inspect.getsource(state.StateStore.read_all))
    assert reader is not None and reader.group(1).startswith(acls.BALANCER_READER_GROUP_PREFIX)


def test_each_role_has_what_its_work_needs() -> None:
    def has(role: acls.Role, resource: ResourceType, name: str, operation: AclOperation) -> bool:
        return any((p.resource, p.name, p.operation) == (resource, name, operation) for p in role.permissions)

    source, destination, balancer = acls.REPLICATOR_SOURCE, acls.REPLICATOR_DESTINATION, acls.BALANCER
    assert has(source, ResourceType.TOPIC, "*", Op.READ)
    assert has(source, ResourceType.GROUP, "strait-", Op.READ)
    assert not has(source, ResourceType.TOPIC, "*", Op.WRITE)  # a source is only read
    assert has(destination, ResourceType.TOPIC, "*", Op.CREATE) and has(destination, ResourceType.TOPIC, "*", Op.ALTER)
    assert has(destination, acls.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)
    assert has(destination, ResourceType.TRANSACTIONAL_ID, "strait.", Op.WRITE)
    assert has(destination, ResourceType.GROUP, "strait.", Op.READ)
    for operation in (Op.ALTER, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS):
        assert has(balancer, acls.CLUSTER, "kafka-cluster", operation)
    assert has(balancer, ResourceType.TOPIC, "__strait", Op.WRITE)
    assert not has(balancer, ResourceType.TOPIC, "*", Op.WRITE)  # the balancer never writes anyone's data


def test_bindings_are_the_union_once_each_for_the_principal() -> None:
    made = acls.bindings("User:strait", acls.ROLES)
    assert len(made) == len({p.key for _, p in ALL_PERMISSIONS}) == 21
    assert {b.principal for b in made} == {"User:strait"}
    assert {b.host for b in made} == {"*"}
    assert {b.permission_type for b in made} == {AclPermissionType.ALLOW}
    with pytest.raises(ValueError, match="User:<name>"):
        acls.bindings("strait", acls.ROLES)


class FakeAdmin:
    """create_acls/describe_acls of an AdminClient; ``refuse`` names operations the cluster rejects."""

    def __init__(self, refuse: tuple[AclOperation, ...] = ()) -> None:
        self.refuse = refuse
        self.created: list[Any] = []

    def create_acls(self, bindings: list[Any], request_timeout: float) -> dict[Any, Future[None]]:
        futures: dict[Any, Future[None]] = {}
        for binding in bindings:
            future: Future[None] = Future()
            if binding.operation in self.refuse:
                future.set_exception(RuntimeError("SECURITY_DISABLED"))
            else:
                self.created.append(binding)
                future.set_result(None)
            futures[binding] = future
        return futures

    def describe_acls(self, _filter: Any, request_timeout: float) -> Future[list[Any]]:
        future: Future[list[Any]] = Future()
        future.set_result(list(self.created))
        return future


def test_grant_creates_every_binding_and_waits_until_listed() -> None:
    admin = FakeAdmin()
    assert acls.grant(admin, "User:strait", [acls.BALANCER]) == len(acls.BALANCER.permissions)
    assert len(admin.created) == len(acls.BALANCER.permissions)


def test_grant_names_every_refused_binding() -> None:
    with pytest.raises(acls.GrantError, match=r"1 of 10 ACL\(s\) for User:b refused: IDEMPOTENT_WRITE on Cluster"):
        acls.grant(FakeAdmin(refuse=(Op.IDEMPOTENT_WRITE,)), "User:b", [acls.REPLICATOR_DESTINATION])


def test_markdown_shows_every_role_and_reason() -> None:
    text = acls.markdown()
    for role, permission in ALL_PERMISSIONS:
        assert f"**{role}**" in text and permission.why in text
    assert "| Cluster | `kafka-cluster` | literal | IDEMPOTENT_WRITE |" in text
