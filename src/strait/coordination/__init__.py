"""Coordination through ZooKeeper: leadership, worker registration, topics and assignment."""

from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    SessionState,
    TopicSpec,
    WorkerRecord,
    WorkerState,
)
from strait.coordination.retry import RetryExhausted, RetryPolicy
from strait.coordination.store import CoordinationError, CoordinationStore, StoreUnavailable, WorkerIdTaken


def connect(*, connect: str, root: str, session_timeout_s: float = 4.0) -> CoordinationStore:
    """A started coordination store (ZooKeeper) for the given ensemble and root."""
    from strait.coordination.zookeeper import ZooKeeperStore

    store = ZooKeeperStore(connect=connect, root=root, session_timeout_s=session_timeout_s)
    store.start()
    return store


__all__ = [
    "Assignment",
    "ClusterSnapshot",
    "CoordinationError",
    "CoordinationStore",
    "LeaderInfo",
    "PartitionKey",
    "RetryExhausted",
    "RetryPolicy",
    "SessionState",
    "StoreUnavailable",
    "TopicSpec",
    "WorkerIdTaken",
    "WorkerRecord",
    "WorkerState",
    "connect",
]
