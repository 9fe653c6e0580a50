"""Coordination through ZooKeeper or a Kafka cluster: leadership, worker registration, topics and assignment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from strait.config import StraitConfig


def connect(*, connect: str, root: str, session_timeout_s: float = 4.0) -> CoordinationStore:
    """A started coordination store (ZooKeeper) for the given ensemble and root."""
    from strait.coordination.zookeeper import ZooKeeperStore

    store = ZooKeeperStore(connect=connect, root=root, session_timeout_s=session_timeout_s)
    store.start()
    return store


def connect_kafka(
    *, props: Mapping[str, Any], prefix: str = "__strait", session_timeout_s: float = 4.0
) -> CoordinationStore:
    """A started coordination store on the Kafka cluster reached with client properties `props`."""
    from strait.coordination.kafka import KafkaStore

    store = KafkaStore(props=props, prefix=prefix, session_timeout_s=session_timeout_s)
    try:
        store.start()
    except BaseException:
        store.close()
        raise
    return store


def open_store(config: StraitConfig) -> CoordinationStore:
    """A started coordination store, the one `config.coordination` names."""
    kafka, zookeeper = config.coordination.kafka, config.coordination.zookeeper
    if kafka is not None:
        return connect_kafka(
            props=config.clusters[kafka.cluster], prefix=kafka.prefix, session_timeout_s=kafka.session_timeout_s
        )
    assert zookeeper is not None  # validated: exactly one
    return connect(connect=zookeeper.connect, root=zookeeper.root, session_timeout_s=zookeeper.session_timeout_s)


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
    "connect_kafka",
    "open_store",
]
