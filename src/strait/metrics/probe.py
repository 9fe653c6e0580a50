"""Read replication progress from the source clusters themselves: checkpoints and end offsets.

Checkpoints are the route group's committed offsets on the source (see `strait.worker.source_checkpoints`),
so the controller measures lag without trusting any worker's report: a hung worker reports
nothing, but its frozen checkpoint and the growing end offset tell the story.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-export not in __all__

from strait import clients
from strait.config import StraitConfig
from strait.coordination.model import PartitionKey
from strait.worker.agent import checkpoint_group

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
# A route's whole read (committed offsets, then end offsets) still running this long never
# returns: librdkafka calls can outlive their own timeouts while a broker is away. In a short
# chaos run an end-offset read ran past its timeout with a source broker down, and then the
# controller logged nothing and judged no partition stuck for four minutes, while a worker's
# fetching had stopped (healing never moved its partitions): whether a read hung or kept
# answering without end offsets is not known. Both now end: a read has a deadline, and a hung
# read, or one without an end offset it should have had, gets fresh clients next round.
HUNG_AFTER_S = 3 * TIMEOUT_S


class OffsetProbe:
    """One checkpoint reader (never subscribes, never commits) and one admin client per route."""

    def __init__(self, config: StraitConfig) -> None:
        self._config = config
        self._readers: dict[str, Any] = {}
        self._admins: dict[str, Any] = {}
        self._calls: ThreadPoolExecutor | None = None
        self.abandoned = 0  # reads given up at their deadline (their clients left behind)

    def read(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, tuple[int | None, int | None]]:
        """(checkpoint, source end offset) per partition; a route whose cluster cannot be
        reached is left out (its partitions are then not judged this round)."""
        by_route: dict[str, list[PartitionKey]] = {}
        for key in keys:
            by_route.setdefault(key.route, []).append(key)
        out: dict[PartitionKey, tuple[int | None, int | None]] = {}
        for route, batch in by_route.items():
            try:
                out.update(self._bounded_read(route, sorted(batch)))
            except TimeoutError as exc:
                log.warning("cannot read offsets of route %s: %s; new clients for the next round", route, exc)
            except KafkaException as exc:
                # Retriable errors (a coordinator moving, a broker restarting) pass by the next round.
                error = exc.args[0] if exc.args else None
                retriable = bool(getattr(error, "retriable", lambda: False)())
                level = logging.INFO if retriable else logging.WARNING
                log.log(level, "cannot read offsets of route %s: %s", route, exc)
            except RuntimeError as exc:
                log.warning("cannot read offsets of route %s: %s", route, exc)
        return out

    def _bounded_read(self, route: str, keys: list[PartitionKey]) -> dict[PartitionKey, tuple[int | None, int | None]]:
        """:meth:`_read_route` on a helper thread, given up after :data:`HUNG_AFTER_S` (TimeoutError);
        a given-up read's clients are dropped unclosed (closing may block as well) and its
        thread is left behind, so the next round starts afresh."""
        if self._calls is None:
            self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strait-probe")
        future = self._calls.submit(self._read_route, route, keys)
        try:
            return future.result(timeout=HUNG_AFTER_S)
        except TimeoutError:
            if not future.done():
                self._calls.shutdown(wait=False)
                self._calls = None
                self.abandoned += 1
                self._readers.pop(route, None)
                self._admins.pop(route, None)
                raise TimeoutError(f"no answer within {HUNG_AFTER_S:.0f}s") from None
            raise  # a TimeoutError of the read itself (an end offset's future): fresh clients too

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
            except KafkaException as exc:
                ends[(tp.topic, tp.partition)] = None  # e.g. a topic deleted from the source
                error = exc.args[0] if exc.args else None
                if not isinstance(error, KafkaError) or error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    # Not judged this round; a client whose metadata went stale (a broker was
                    # away) may not recover by itself: the next round asks a new one.
                    log.info("cannot read the end offset of %s/%s: %s", tp.topic, tp.partition, exc)
                    self._admins.pop(route, None)
            except TimeoutError:
                # Past request_timeout and not answered: this admin client may never answer.
                self._admins.pop(route, None)
                where = f"{tp.topic}/{tp.partition}"
                raise TimeoutError(f"end offset of {where}: no answer within {TIMEOUT_S:.0f}s") from None
        out: dict[PartitionKey, tuple[int | None, int | None]] = {}
        for key, tp in zip(keys, committed, strict=True):
            checkpoint = tp.offset if tp.error is None and tp.offset >= 0 else None
            out[key] = (checkpoint, ends.get((key.topic, key.partition)))
        return out

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        if self._calls is not None:
            self._calls.shutdown(wait=False)
            self._calls = None
