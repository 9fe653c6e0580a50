"""The balancer's exception tree: every failure a user can act on names what was wrong."""

from __future__ import annotations


class BalanceError(Exception):
    """Base of every balancer error. `retriable` says whether trying again may succeed."""

    retriable = False


class PlanError(BalanceError):
    """A plan file is malformed or does not fit the cluster."""


class StalePlanError(PlanError):
    """The cluster changed since the plan was made (a partition's replicas or dirs differ)."""


class CapacityError(BalanceError):
    """Disk capacities are missing where the plan needs them (e.g. dirs sharing one filesystem)."""


class ClusterError(BalanceError):
    """A Kafka admin call failed."""

    retriable = True


class ExecutionConflict(BalanceError):
    """Another execution is running on this cluster."""
