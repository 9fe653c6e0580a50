"""Checkpoints of exactly-once routes: committed in the destination transaction, read back stable.

An exactly-once pipeline commits its checkpoints with ``send_offsets_to_transaction`` into the
route's group ``strait.<route>`` on the *destination* cluster, in the same transaction as the
records they cover, so both become visible or neither does. The destination refuses offsets
for topics it does not have (``UNKNOWN_TOPIC_OR_PART``, which aborts the transaction), so a
checkpoint is stored under the *destination* topic and partition number (Strait copies to the
same partition number) and holds the *source* offset: use :func:`transaction_offsets`.

:class:`DestinationCheckpoints` reads them back when a partition starts, counting only
committed transactions, and mirrors each checkpoint to the route's source group (best effort)
so that ``kafka-consumer-groups`` on the source still shows the lag.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from strait import clients
from strait.worker.checkpoint import start_offset
from strait.worker.source_checkpoints import ADMIN_TIMEOUT_S, StartOffsets, list_offsets
from strait.worker.task import PartitionTask

log = logging.getLogger(__name__)

# Group offsets are read with a consumer's committed() (clients.committed_offsets), never
# AdminClient.list_consumer_group_offsets: librdkafka (2.16 included, librdkafka#5040) crashes the
# process when that admin call meets a coordinator that is loading or moving.


def destination_group(route: str) -> str:
    """The destination consumer group holding an exactly-once route's checkpoints."""
    return f"strait.{route}"


def transaction_offsets(offsets: Mapping[PartitionTask, int]) -> list[TopicPartition]:
    """Checkpoints as ``send_offsets_to_transaction`` takes them: source offsets keyed by
    destination topic and partition. Raises ``ValueError`` if two tasks share a destination
    partition (their checkpoints would overwrite each other)."""
    keys = _destination_keys(offsets)
    return [TopicPartition(topic, partition, offsets[task]) for task, (topic, partition) in keys.items()]


def group_metadata(destination: Mapping[str, Any], group_id: str) -> Any:
    """The consumer group metadata ``send_offsets_to_transaction`` needs for ``group_id``.

    Taken from a consumer that never subscribes (so it never joins the group) and is closed at
    once: the metadata is a plain value and stays valid.
    """
    consumer = clients.consumer(destination, **{"group.id": group_id, "enable.auto.commit": False})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


class DestinationCheckpoints:
    """The :class:`strait.worker.source_checkpoints.CheckpointStore` of an exactly-once route.

    Checkpoints are the committed offsets of ``destination_group_id`` (default
    ``strait.<route>``) on the destination, written by the transactional pipeline. A partition
    without one there (a route switched from at-least-once) resumes from the source group's
    checkpoint, else from ``task.start``. :meth:`commit` only mirrors checkpoints to the source
    group, asynchronously and best effort: a failed mirror is logged and counted in
    ``mirror_failures``, never raised, since the destination already holds the checkpoint.
    """

    def __init__(
        self,
        *,
        route: str,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        source_group_id: str,
        client_id: str,
        destination_group_id: str | None = None,
        stable_wait_s: float = ADMIN_TIMEOUT_S,
    ) -> None:
        self.route = route
        self.source_group_id = source_group_id
        self.destination_group_id = destination_group_id or destination_group(route)
        self.mirror_failures = 0
        self._stable_wait_s = stable_wait_s
        # Metadata requests for one topic must never create it on the source.
        self._source_admin = clients.admin(source, **{"allow.auto.create.topics": False})
        # read_committed makes committed() ask for stable offsets (KIP-447 require_stable): while
        # a transaction holds a checkpoint pending, the broker answers UNSTABLE_OFFSET_COMMIT and
        # librdkafka asks again until the transaction ends or the call times out. Never subscribes.
        self._destination = clients.consumer(
            destination,
            **{
                "group.id": self.destination_group_id,
                "client.id": f"{client_id}-checkpoints",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            },
        )
        # Never subscribes either: commits land in the source group without ever joining it.
        self._mirror = clients.consumer(
            source,
            **{
                "group.id": source_group_id,
                "client.id": f"{client_id}-checkpoint-mirror",
                "enable.auto.commit": False,
                "on_commit": self._on_mirrored,
            },
        )

    def start_offsets(self, tasks: list[PartitionTask]) -> dict[PartitionTask, StartOffsets]:
        """Start offset, source end offset and committed checkpoint per task; raises KafkaException.

        Only committed transactions count: while a transaction (of a previous owner not fenced
        yet) holds a checkpoint of these partitions pending, this waits up to ``stable_wait_s``
        for it to end, then raises ``KafkaException(UNSTABLE_OFFSET_COMMIT)``.
        """
        if not tasks:
            return {}
        keys = _destination_keys(tasks)
        tps = [TopicPartition(t.topic, t.partition) for t in tasks]
        # list_offsets finds leaders in the client's cached metadata, which does not know the
        # partitions a source topic just grew; refresh it for the topics being started.
        for topic in {t.topic for t in tasks}:
            self._source_admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        at_destination = self._stable_destination_offsets(keys)
        checkpoints: dict[PartitionTask, int | None] = {t: at_destination.get(keys[t]) for t in tasks}
        fallback = [t for t in tasks if checkpoints[t] is None]
        if fallback:
            at_source = _committed(
                self._mirror, [TopicPartition(t.topic, t.partition) for t in fallback], ADMIN_TIMEOUT_S
            )
            for task, tp in zip(fallback, at_source, strict=True):
                checkpoints[task] = _checkpoint(tp)
        earliest = list_offsets(self._source_admin, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        latest = list_offsets(self._source_admin, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        result: dict[PartitionTask, StartOffsets] = {}
        for task in tasks:
            low, high = earliest[(task.topic, task.partition)], latest[(task.topic, task.partition)]
            checkpoint = checkpoints[task]
            result[task] = StartOffsets(start_offset(task.start, checkpoint, low, high), high, checkpoint)
        return result

    def commit(self, offsets: Mapping[PartitionTask, int]) -> set[PartitionTask]:
        """Mirror checkpoints the destination transaction already committed to the source group.

        Asynchronous and best effort; always returns an empty set (nothing failed that matters).
        """
        self._mirror.poll(0)  # report the outcome of earlier mirrors
        if not offsets:
            return set()
        try:
            self._mirror.commit(
                offsets=[TopicPartition(t.topic, t.partition, offset) for t, offset in offsets.items()],
                asynchronous=True,
            )
        except KafkaException as exc:
            self._mirror_failed(exc.args[0])
        return set()

    def close(self) -> None:
        """Release the clients (mirrors still in flight get their answer first)."""
        self._destination.close()
        self._mirror.close()

    def _stable_destination_offsets(
        self, keys: Mapping[PartitionTask, tuple[str, int]]
    ) -> dict[tuple[str, int], int | None]:
        """Committed checkpoints of the destination group, once no transaction holds them pending."""
        wanted = sorted(set(keys.values()))
        try:
            listed = _committed(self._destination, [TopicPartition(t, p) for t, p in wanted], self._stable_wait_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._TIMED_OUT:
                raise
            raise KafkaException(
                KafkaError(
                    KafkaError.UNSTABLE_OFFSET_COMMIT,
                    f"group {self.destination_group_id}: no stable checkpoints within {self._stable_wait_s:.0f}s for "
                    f"{len(wanted)} destination partition(s) (first {wanted[0][0]}/{wanted[0][1]}): a transaction "
                    "still holds some pending (its producer must commit, abort, be fenced or time out first), "
                    "or the group coordinator does not answer",
                )
            ) from exc
        return {(tp.topic, tp.partition): _checkpoint(tp) for tp in listed}

    def _on_mirrored(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = [tp for tp in partitions if tp.error is not None]
        if error is not None or failed:
            self._mirror_failed(error or failed[0].error)

    def _mirror_failed(self, error: KafkaError | None) -> None:
        self.mirror_failures += 1
        log.warning(
            "route %s: checkpoints not mirrored to source group %s (the destination holds them): %s",
            self.route,
            self.source_group_id,
            error,
        )


def _destination_keys(tasks: Iterable[PartitionTask]) -> dict[PartitionTask, tuple[str, int]]:
    keys: dict[PartitionTask, tuple[str, int]] = {}
    owner: dict[tuple[str, int], PartitionTask] = {}
    for task in tasks:
        key = (task.destination_topic, task.partition)
        other = owner.setdefault(key, task)
        if other != task:
            raise ValueError(f"{task} and {other} both copy to {key[0]}/{key[1]}: their checkpoints would collide")
        keys[task] = key
    return keys


def _committed(consumer: Consumer, tps: list[TopicPartition], timeout_s: float) -> list[TopicPartition]:
    """``consumer.committed()``, asked again while the group coordinator is loading or moving."""
    return clients.committed_offsets(consumer, tps, timeout_s)


def _checkpoint(tp: TopicPartition) -> int | None:
    if tp.error is not None:
        raise KafkaException(tp.error)
    return tp.offset if tp.offset >= 0 else None
