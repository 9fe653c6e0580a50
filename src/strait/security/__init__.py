"""What Strait needs from a secured Kafka cluster: the ACLs of each of its roles."""

from strait.security.acls import (
    BALANCER,
    COORDINATOR,
    REPLICATOR_DESTINATION,
    REPLICATOR_SOURCE,
    ROLES,
    Permission,
    Role,
    grant,
)

__all__ = [
    "BALANCER",
    "COORDINATOR",
    "REPLICATOR_DESTINATION",
    "REPLICATOR_SOURCE",
    "ROLES",
    "Permission",
    "Role",
    "grant",
]
