"""Durable execution state, kept in the cluster being balanced.

A small compacted topic (`__strait_balance`) holds, per execution, the plan, the progress (state
of every move, the throttle ledger, a heartbeat) and a cancel request. Any process that can reach
the cluster reads it with nothing but the bootstrap servers: `status` and `cancel` work from
another host, and a restarted executor finds where it left off. Keys:

    current                 -> {"execution": id} of the latest execution
    exec/<id>/plan          -> plan and execution options
    exec/<id>/progress      -> status, per-move states, throttle ledger, heartbeat
    exec/<id>/cancel        -> present once someone asked to cancel
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strait import clients
from strait.balancer.errors import ClusterError

TOPIC = "__strait_balance"
# Plans for big clusters are large JSON documents; the topic allows them and the producer compresses.
MAX_RECORD_BYTES = 16 * 1024 * 1024


@dataclass
class Execution:
    """What the state topic knows about one execution."""

    id: str
    plan: dict[str, Any]
    options: dict[str, Any]
    progress: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False

    @property
    def status(self) -> str:
        return str(self.progress.get("status", "pending"))

    @property
    def heartbeat(self) -> float:
        return float(self.progress.get("heartbeat", 0.0))

    def alive(self, now: float | None = None, stale_after: float = 10.0) -> bool:
        """Whether an executor has reported within `stale_after` seconds and is not finished."""
        now = time.time() if now is None else now
        return self.status in ("running", "cancelling") and now - self.heartbeat < stale_after

    def finished(self) -> bool:
        return self.status in ("done", "failed", "cancelled")


class StateStore:
    """Reads and writes execution records in the cluster's `__strait_balance` topic."""

    def __init__(self, props: Mapping[str, Any], *, topic: str = TOPIC) -> None:
        self.props = dict(props)
        self.topic = topic
        self._producer: Any = None
        self._ensured = False

    def ensure_topic(self) -> None:
        """Create the compacted state topic if it is missing (idempotent)."""
        if self._ensured:
            return
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

        admin = clients.admin(self.props)
        try:
            meta = admin.list_topics(timeout=10)
            if self.topic not in meta.topics:
                rf = min(3, len(meta.brokers))
                spec = NewTopic(
                    self.topic,
                    num_partitions=1,
                    replication_factor=rf,
                    config={
                        "cleanup.policy": "compact",
                        "max.message.bytes": str(MAX_RECORD_BYTES),
                        "min.insync.replicas": "1",
                    },
                )
                for fut in admin.create_topics([spec]).values():
                    try:
                        fut.result(timeout=30)
                    except KafkaException as exc:
                        if "TOPIC_ALREADY_EXISTS" not in str(exc):
                            raise
            # A new topic reaches brokers' metadata a moment after creation; reads fail until then.
            deadline = time.monotonic() + 30
            while True:
                topic = admin.list_topics(self.topic, timeout=10).topics.get(self.topic)
                if (
                    topic is not None
                    and topic.error is None
                    and topic.partitions.get(0) is not None
                    and topic.partitions[0].leader >= 0
                ):
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(f"state topic {self.topic} has no leader after 30s")
                time.sleep(0.2)
        except KafkaException as exc:
            raise ClusterError(f"cannot create the state topic {self.topic}: {exc}") from exc
        self._ensured = True

    def _put(self, key: str, value: Mapping[str, Any] | None) -> None:
        if self._producer is None:
            self.ensure_topic()
            self._producer = clients.producer(
                self.props,
                **{
                    "acks": "all",
                    # One writer per execution; idempotence only adds a coordinator round trip
                    # (and its retries right after the topic is created).
                    "enable.idempotence": False,
                    "compression.type": "gzip",
                    "message.max.bytes": MAX_RECORD_BYTES,
                    "linger.ms": 0,
                },
            )
        payload = None if value is None else json.dumps(value, sort_keys=True).encode()
        errors: list[str] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        self._producer.produce(self.topic, key=key.encode(), value=payload, partition=0, on_delivery=report)
        remaining = self._producer.flush(30)
        if remaining or errors:
            raise ClusterError(f"cannot write execution state ({key}) to {self.topic}: {errors or 'timed out'}")

    def read_all(self) -> dict[str, dict[str, Any] | None]:
        """Every key's latest value (None for a deleted key), read from the start of the topic."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        self.ensure_topic()
        consumer = clients.consumer(
            self.props,
            **{
                "group.id": "strait-balance-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.message.max.bytes": MAX_RECORD_BYTES,
            },
        )
        latest: dict[str, dict[str, Any] | None] = {}
        try:
            tp = TopicPartition(self.topic, 0)
            low, high = self._watermarks(consumer, tp)
            if high <= low:
                return latest
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 30
            position = low
            while position < high:
                if time.monotonic() > deadline:
                    raise ClusterError(f"timed out reading {self.topic}")
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise ClusterError(f"cannot read {self.topic}: {error}")
                position = (msg.offset() or 0) + 1
                raw_key = msg.key()
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key or "")
                raw = msg.value()
                latest[key] = None if raw is None else json.loads(raw)
        finally:
            consumer.close()
        return latest

    @staticmethod
    def _watermarks(consumer: Any, tp: Any) -> tuple[int, int]:
        from confluent_kafka import KafkaException

        # Right after the topic is created, or while its leader moves, the partition is briefly
        # unknown to this client; that passes within seconds.
        deadline = time.monotonic() + 20
        while True:
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
                return int(low), int(high)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"cannot read offsets of {tp.topic}: {exc}") from exc
                time.sleep(0.3)

    # ---- execution records -----------------------------------------------------------------

    def current(self) -> Execution | None:
        """The latest execution on this cluster, or None if there never was one."""
        records = self.read_all()
        pointer = records.get("current")
        if not pointer:
            return None
        return self._execution(records, str(pointer["execution"]))

    def load(self, execution_id: str) -> Execution | None:
        return self._execution(self.read_all(), execution_id)

    @staticmethod
    def _execution(records: Mapping[str, dict[str, Any] | None], execution_id: str) -> Execution | None:
        plan_record = records.get(f"exec/{execution_id}/plan")
        if not plan_record:
            return None
        return Execution(
            id=execution_id,
            plan=dict(plan_record["plan"]),
            options=dict(plan_record.get("options") or {}),
            progress=dict(records.get(f"exec/{execution_id}/progress") or {}),
            cancel_requested=bool(records.get(f"exec/{execution_id}/cancel")),
        )

    def start(self, execution_id: str, plan: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        self._put(f"exec/{execution_id}/plan", {"plan": dict(plan), "options": dict(options)})
        self._put(f"exec/{execution_id}/progress", {"status": "pending", "heartbeat": time.time(), "moves": {}})
        self._put("current", {"execution": execution_id})

    def save_progress(self, execution_id: str, progress: Mapping[str, Any]) -> None:
        self._put(f"exec/{execution_id}/progress", dict(progress))

    def request_cancel(self, execution_id: str, by: str) -> None:
        self._put(f"exec/{execution_id}/cancel", {"requested_at": time.time(), "by": by})

    def cancel_requested(self, execution_id: str) -> bool:
        return bool(self.read_all().get(f"exec/{execution_id}/cancel"))

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
