"""Read replication progress from the source clusters themselves: checkpoints and end offsets.

Checkpoints are the route group's committed offsets on the source (see `strait.worker.source_checkpoints`),
so the controller measures lag without trusting any worker's report: a hung worker reports
nothing, but its frozen checkpoint and the growing end offset tell the story.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-export not in __all__

from strait import clients
from strait.config import StraitConfig
from strait.coordination.model import PartitionKey
from strait.worker.agent import checkpoint_group

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0


class OffsetProbe:
    """One checkpoint reader (never subscribes, never commits) and one admin client per route."""

    def __init__(self, config: StraitConfig) -> None:
        self._config = config
        self._readers: dict[str, Any] = {}
        self._admins: dict[str, Any] = {}

    def read(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, tuple[int | None, int | None]]:
        """(checkpoint, source end offset) per partition; a route whose cluster cannot be
        reached is left out (its partitions are then not judged this round)."""
        by_route: dict[str, list[PartitionKey]] = {}
        for key in keys:
            by_route.setdefault(key.route, []).append(key)
        out: dict[PartitionKey, tuple[int | None, int | None]] = {}
        for route, batch in by_route.items():
            try:
                out.update(self._read_route(route, sorted(batch)))
            except KafkaException as exc:
                # Retriable errors (a coordinator moving, a broker restarting) pass by the next round.
                error = exc.args[0] if exc.args else None
                retriable = bool(getattr(error, "retriable", lambda: False)())
                level = logging.INFO if retriable else logging.WARNING
                log.log(level, "cannot read offsets of route %s: %s", route, exc)
            except RuntimeError as exc:
                log.warning("cannot read offsets of route %s: %s", route, exc)
        return out

    def _read_route(self, route: str, keys: list[PartitionKey]) -> dict[PartitionKey, tuple[int | None, int | None]]:
        spec = self._config.route(route)
        if spec is None:
            return {}
        props: Mapping[str, Any] = self._config.clusters[spec.source]
        reader = self._readers.get(route)
        if reader is None:
            settings = {"group.id": checkpoint_group(route), "client.id": f"strait-probe-{route}"}
            reader = self._readers[route] = clients.consumer(props, **settings, **{"enable.auto.commit": False})
        admin = self._admins.get(route)
        if admin is None:
            admin = self._admins[route] = clients.admin(props, **{"allow.auto.create.topics": False})
        tps = [TopicPartition(k.topic, k.partition) for k in keys]
        committed = reader.committed(tps, timeout=TIMEOUT_S)
        futures = admin.list_offsets(
            {TopicPartition(k.topic, k.partition): OffsetSpec.latest() for k in keys},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=TIMEOUT_S,
        )
        ends: dict[tuple[str, int], int | None] = {}
        for tp, future in futures.items():
            try:
                ends[(tp.topic, tp.partition)] = future.result(timeout=TIMEOUT_S).offset
            except KafkaException:
                ends[(tp.topic, tp.partition)] = None  # e.g. a topic deleted from the source
        out: dict[PartitionKey, tuple[int | None, int | None]] = {}
        for key, tp in zip(keys, committed, strict=True):
            checkpoint = tp.offset if tp.error is None and tp.offset >= 0 else None
            out[key] = (checkpoint, ends.get((key.topic, key.partition)))
        return out

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
