"""What Strait needs from a secured Kafka cluster: the ACLs of each of its roles."""

from strait.security.acls import BALANCER, REPLICATOR_DESTINATION, REPLICATOR_SOURCE, ROLES, Permission, Role, grant

__all__ = ["BALANCER", "REPLICATOR_DESTINATION", "REPLICATOR_SOURCE", "ROLES", "Permission", "Role", "grant"]
