"""What the batch pipeline's two halves share (:mod:`fetching`, :mod:`producing`): the loop's
state, as attributes :class:`~strait.worker.batch.pipeline.BatchPipeline` sets up, and the few
steps both take on a partition (record mode, failure, its leaders)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from strait.access_errors import authorization_message
from strait.worker.batch.budget import PacedFetches
from strait.worker.batch.identities import Identities
from strait.worker.batch.leaders import LeaderCache
from strait.worker.batch.link import Key, Links
from strait.worker.batch.partition import BatchPartition
from strait.worker.batch.provenance import Provenance
from strait.worker.batch.rtts import RoundTrips
from strait.worker.pipeline import PipelineSettings

log = logging.getLogger("strait.worker.batch.pipeline")

RETRY_BACKOFF_S = 0.2


class LoopCore:
    """The batch loop's state (set in BatchPipeline.__init__) and its shared partition steps."""

    name: str
    _source_props: Mapping[str, Any]
    _destination_props: Mapping[str, Any]
    _settings: PipelineSettings
    _observer: Any
    _links: Links | None
    _parts: dict[Key, BatchPartition]
    _leaving: list[BatchPartition]
    _leaders: LeaderCache
    _fetches: dict[int, tuple[Any, dict[Key, int], float]]
    _identities: Identities
    _provenance: Provenance | None = None  # two-way routes (set by BatchPipeline)
    _rtts: RoundTrips | None
    _pace: PacedFetches
    _stopping: threading.Event

    def _destination_busy_for(self, now: float) -> float | None:
        """Seconds the destination is expected to stay busy with this pipeline's requests;
        ``None`` when the pipeline does not time them (gathering fetches use their whole window)."""
        return None

    def _to_record_mode(self, part: BatchPartition, reason: str) -> None:
        """Batches of this partition cannot pass unchanged: the copier moves it to its record
        pipeline, from the checkpoint, once nothing of it is in flight."""
        if self._provenance is None:
            log.info("%s: record mode from the checkpoint on (%s)", part.state.task, reason)
        else:
            # Record pipelines see no producer ids: the opposite route's whole-batch copies
            # they read are copied back once (stamped, so no further).
            log.warning(
                "%s: record mode from the checkpoint on (%s); on a two-way route this copies the "
                "opposite route's whole-batch copies back: give such topics copy: record routes",
                part.state.task,
                reason,
            )
        part.stop()
        part.state.mode, part.state.mode_reason = "record", reason
        part.state.fetching = False

    def _fail(self, part: BatchPartition, reason: str) -> None:
        if part.state.error is None:
            log.error("partition %s stopped: %s", part.state.task, reason)
            part.state.error = reason
        part.stop()
        part.state.fetching = False

    def _leader(self, part: BatchPartition, cluster: str, now: float) -> int | None:
        """The partition's leader on ``cluster``; None (the partition waits) while unknown, and a
        topic missing from that cluster long enough fails the partition (deleted under us)."""
        topic, partition = part.source if cluster == "source" else part.destination
        leader = self._leaders.leader(cluster, topic, partition)
        if leader is not None:
            return leader
        missing_s = self._leaders.gone(cluster, topic)
        if missing_s is not None:
            self._fail(part, f"{cluster} {topic}/{partition} does not exist (deleted?): missing for {missing_s:.0f}s")
        if not self._leaders.asking(cluster, topic):  # an answer on the way wakes the loop itself
            part.wait_until = now + RETRY_BACKOFF_S
        return None


def refusal(props: Mapping[str, Any], error: int | str, resource: str) -> str | None:
    """Who refused what, said as record mode says it (strait.access_errors), for a broker's error
    code or kafka-python's name of it; None when the error is no authorization failure."""
    code = getattr(KafkaError, error, None) if isinstance(error, str) and error.isupper() else error
    return authorization_message(props, KafkaError(code), resource) if isinstance(code, int) else None
