"""The copier's per-partition records: the control thread's view of one assigned partition
(:class:`Entry`), the snapshot it reports (:class:`PartitionStats`), and the destination-topic
interface the copier drives."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from strait.worker.commits import Ticket
from strait.worker.pipeline import PartitionState, Pipeline
from strait.worker.task import PartitionTask

Phase = Literal["starting", "running", "moving", "releasing"]


@dataclass(frozen=True)
class PartitionStats:
    """A snapshot of one assigned partition.

    ``state`` is ``ok``, ``starting``, ``moving`` (between pipelines), ``draining`` (being
    revoked) or ``failed:<reason>``; a failed partition copies nothing until it is revoked and
    assigned again (failures while starting are retried every few seconds).
    ``lag`` is the source end offset minus the checkpoint, as consumer-group tooling shows it.
    ``last_progress`` is the Unix time of the last acknowledged record. ``records``, ``bytes``
    and ``rewinds`` count from this process's start over every time the partition was assigned
    to it: they are Prometheus counters, which must not go back while the process lives (a
    worker frozen past its session gives its partitions up and takes them again).
    """

    records: int
    bytes: int
    checkpoint: int | None
    committed: int | None
    source_end: int | None
    lag: int | None
    state: str
    pipeline: str | None
    in_flight: int
    last_progress: float | None
    rewinds: int
    skipped: int
    # "batch" or "record", and why: a batch route's partition runs in batch mode while it lags
    # and in record mode once caught up, or record mode for good when its batches cannot pass
    # unchanged; a record route says what makes it one.
    mode: str = "record"
    mode_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return asdict(self)


class DestinationManager(Protocol):
    """Makes destination topics ready; :class:`DestinationTopics` is the real one."""

    def ensure(self, source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        """Create or grow the destination topic; raises DestinationError or KafkaException."""

    def ensure_many(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        """``ensure`` for many (source, destination) pairs at once; failures are returned, not raised."""

    def prepare(self, wanted: Mapping[tuple[str, str], int]) -> None:
        """Start ``ensure_many``'s work in the background; returns at once."""

    def ready(self, wanted: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int | Exception]:
        """``ensure_many`` without waiting: pairs still being made ready are left out (and started)."""

    def forget(self, destination_topic: str) -> None:
        """Check the topic again next time."""


@dataclass
class Entry:
    """The control thread's view of one assigned partition."""

    state: PartitionState
    phase: Phase = "starting"
    pipeline: Pipeline | None = None
    target: Pipeline | None = None
    released: threading.Event | None = None
    next_attempt: float = 0.0
    since: float = 0.0
    start_error: str | None = None
    start_failures: int = 0  # failed starts in a row (the retry backs off)
    revoke_deadline: float | None = None
    revoked: threading.Event = field(default_factory=threading.Event)
    # Abandoned: stopped without a final commit (cut off from coordination, a successor may
    # already own the partition).
    abandoned: bool = False
    abandon_asked: bool = False
    # Set by the pipeline once an abandoned partition's copy can no longer commit (None: at once).
    settling: threading.Event | None = None
    overdue_logged: bool = False
    # The final commit of a released partition, once handed to the committer: the revoke ends
    # when it is answered (or overdue).
    final_commit: Ticket | None = None
    # Assigned again while its revoke was still in progress: started afresh once it ends.
    successor: PartitionTask | None = None
    # A batch route's partition whose batches cannot pass unchanged: record mode for good.
    batch_fallback: bool = False
    # A batch route's lagging partition whose source batches were too small for batch mode to
    # pay: copied record by record until this time (strait.worker.moves).
    sparse_until: float = 0.0
    # Set while the partition copies old records in the realtime pipeline (it arrived from a
    # lagging pipeline, or started there behind the source's end): the source's end offset
    # then. The batch pipeline's latency pace discounts the windows until the partition is
    # acknowledged up to it (strait.worker.moves).
    arriving_end: int | None = None
    # When the partition last moved out of a realtime pipeline to a lagging one: the realtime
    # records queued behind its backlog there may still be acknowledged in the next window.
    left_realtime_at: float | None = None


def snapshot(entry: Entry, earlier: tuple[int, int, int] | None = None) -> PartitionStats:
    """What ``stats`` reports of one entry; ``earlier`` adds the counts of its earlier assignments here."""
    state = entry.state
    records, size, rewinds = earlier or (0, 0, 0)
    tracker = state.tracker
    checkpoint = state.checkpoint
    if state.error is not None:
        status = f"failed:{state.error}"
    elif state.waiting is not None:
        status = f"retrying:{state.waiting}"
    elif entry.phase == "starting":
        status = f"failed:{entry.start_error}" if entry.start_error else "starting"
    elif entry.revoke_deadline is not None:
        status = "draining"
    elif entry.phase == "moving":
        status = "moving"
    else:
        status = "ok"
    lag = None
    if state.source_end is not None and checkpoint is not None:
        lag = max(0, state.source_end - checkpoint)
    return PartitionStats(
        records=records + state.records,
        bytes=size + state.bytes,
        checkpoint=checkpoint,
        committed=state.committed,
        source_end=state.source_end,
        lag=lag,
        state=status,
        pipeline=state.pipeline,
        in_flight=tracker.in_flight if tracker else 0,
        last_progress=state.last_progress,
        rewinds=rewinds + state.rewinds,
        skipped=state.skipped,
        mode=state.mode,
        mode_reason=state.mode_reason,
    )
