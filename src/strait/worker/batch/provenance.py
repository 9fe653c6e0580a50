"""Which fetched batches of a two-way route are copies, without a header on the copies.

Routes A→B and B→A over the same topic names must not copy back what the other wrote. The
batch pipeline writes every batch under a producer id it got from InitProducerId on its
destination, and publishes that id in the destination's producer registry
(:mod:`strait.worker.batch.registry`) before the id writes anything, acknowledged by every
in-sync replica. The opposite route fetches from that cluster, so for each batch it fetches:

- producer id -1 (a producer without idempotence): a user's batch, copied;
- a producer id in the registry: a copy written by Strait, skipped (its offsets are accounted
  like a transaction marker's, so the checkpoint moves past it);
- a producer id not in the registry as last read: the registry is read to its end once, after
  the batch was fetched. The id was published before the batch was written, so if it is still
  missing it is not a batch pipeline's;
- then its records' headers decide: record-mode copies (librdkafka's producer ids are not
  published) carry ``strait.origin`` (:mod:`strait.worker.origin`). A batch whose records all
  name the route's destination is a copy; one where none does is copied; a mix is copied
  record by record. A producer id whose batch carries no ``strait.origin`` header at all is
  remembered as a user's, so each user producer costs one decoded batch, not one per batch;
  one whose batch carries it has each of its batches decoded (record-mode copies: the few
  partitions that cannot go in batch mode), without reading the registry again.

:func:`classify` and :func:`judge_origins` are the decision, pure; :class:`Provenance` keeps
what is known and asks its two edges (the registry read, the records' headers) only when the
decision needs them.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from strait.worker.batch.records import NO_PRODUCER_ID, RecordBatch
from strait.worker.origin import HEADER

# Unpublished producer ids remembered (as a user's, or as stamping its records); past this many
# of either kind that memory starts afresh (a forgotten id costs a registry read again).
IDS_KEPT = 100_000


class RegistryUnreadable(Exception):
    """The source's producer registry could not be read to its end: nothing is decided."""


class Kind(enum.Enum):
    """What one fetched batch is."""

    ORIGINAL = "original"  # written by a user: copied
    COPY = "copy"  # written by the route's opposite: skipped
    READ_REGISTRY = "read_registry"  # unknown id: read the registry to its end, then decide again
    READ_HEADERS = "read_headers"  # unknown after the registry was read: its records' headers decide
    MIXED = "mixed"  # copies and originals in one batch: record by record


def classify(
    producer_id: int,
    *,
    copies: AbstractSet[int],
    plain: AbstractSet[int],
    stamped: AbstractSet[int] = frozenset(),
    registry_read: bool,
) -> Kind:
    """What a batch of ``producer_id`` is, from what is known of producer ids.

    ``copies``: ids published in the registry of the cluster the batch was fetched from;
    ``plain``: ids whose batches were found to carry no ``strait.origin`` header;
    ``stamped``: unpublished ids whose batches carried it (record pipelines' producers: their
    batches are read each time, the registry no more for them);
    ``registry_read``: the registry was read to its end after the batch was fetched.
    """
    if producer_id == NO_PRODUCER_ID:
        return Kind.ORIGINAL
    if producer_id in copies:
        return Kind.COPY
    if producer_id in plain:
        return Kind.ORIGINAL
    if registry_read or producer_id in stamped:
        return Kind.READ_HEADERS
    return Kind.READ_REGISTRY


@dataclass(frozen=True, slots=True)
class HeaderVerdict:
    """What a batch's records' ``strait.origin`` headers say about it."""

    kind: Kind  # ORIGINAL, COPY or MIXED
    stamped: bool  # at least one record carries the header


def judge_origins(origins: Iterable[str | None], destination: str) -> HeaderVerdict:
    """The batch whose records carry these origins (None: no header), for a route writing to
    ``destination``: a copy when every record came from there, as record mode would skip each."""
    back = ahead = 0
    stamped = False
    for origin in origins:
        if origin is not None:
            stamped = True
        if origin == destination:
            back += 1
        else:
            ahead += 1
    if back and ahead:
        return HeaderVerdict(Kind.MIXED, stamped)
    return HeaderVerdict(Kind.COPY if back else Kind.ORIGINAL, stamped)


def record_origins(batch: RecordBatch, header: str = HEADER) -> list[str | None]:
    """Each record's ``header`` value (decoded), None where it has none. Decompresses the batch;
    raises ``ValueError`` when it cannot be read (its codec's library missing)."""
    from kafka.record.default_records import DefaultRecordBatch

    try:
        out: list[str | None] = []
        for record in DefaultRecordBatch(bytes(batch.data)):
            value = next((v for k, v in record.headers if k == header and v is not None), None)
            out.append(None if value is None else bytes(value).decode(errors="replace"))
        return out
    except Exception as exc:  # kafka-python raises its own errors for a missing codec library
        raise ValueError(f"batch at {batch.base_offset}: records unreadable ({exc})") from exc


@dataclass(frozen=True, slots=True)
class Judged:
    """The copies among one fetch's batches, or why the partition goes record by record."""

    copies: frozenset[int]  # base offsets of the batches to skip
    mixed: RecordBatch | None = None  # the first batch mixing copies and originals


class Provenance:
    """What one two-way batch pipeline knows of the producer ids on its source cluster.

    ``read_registry()`` reads the source's registry from where the last read stopped to its
    end and returns the ids it found (I/O); ``origins(batch)`` reads a batch's records' origin
    headers (:func:`record_origins`). ``destination`` is the route's destination cluster name,
    as the record pipelines stamp it.
    """

    def __init__(
        self,
        destination: str,
        *,
        read_registry: Callable[[], Iterable[int]],
        origins: Callable[[RecordBatch], Sequence[str | None]] = record_origins,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.destination = destination
        self._read_registry = read_registry
        self._origins = origins
        self._clock = clock
        self.copies: set[int] = set()
        self.plain: set[int] = set()
        self.stamped: set[int] = set()
        self.registry_reads = 0
        self.batches_decoded = 0
        self._read_at = float("-inf")  # when the last registry read began

    def judge(self, batches: Sequence[RecordBatch], fetched_at: float) -> Judged:
        """The copies among ``batches`` (control batches and empty ones are never copies: they
        are not produced anyway), whose fetch answer arrived at ``fetched_at`` (the clock's
        time). Raises ``ValueError`` when a batch that must be decoded cannot be, and
        :class:`RegistryUnreadable` when the registry cannot be read."""
        copies: set[int] = set()
        for batch in batches:
            if batch.is_control or batch.record_count == 0:
                continue
            kind = self._kind(batch.producer_id, fetched_at)
            if kind is Kind.READ_HEADERS:
                self.batches_decoded += 1
                verdict = judge_origins(self._origins(batch), self.destination)
                known = self.stamped if verdict.stamped else self.plain
                if len(known) >= IDS_KEPT:
                    known.clear()
                known.add(batch.producer_id)
                kind = verdict.kind
            if kind is Kind.MIXED:
                return Judged(frozenset(copies), batch)
            if kind is Kind.COPY:
                copies.add(batch.base_offset)
        return Judged(frozenset(copies))

    def _kind(self, producer_id: int, fetched_at: float) -> Kind:
        kind = classify(
            producer_id,
            copies=self.copies,
            plain=self.plain,
            stamped=self.stamped,
            registry_read=self._read_at > fetched_at,
        )
        if kind is Kind.READ_REGISTRY:
            # Begun after the batch arrived, so after its producer id was published, if it was
            # (and counted as read only once it was: a failed read raises).
            began = self._clock()
            try:
                self.copies.update(self._read_registry())
            except Exception as exc:
                raise RegistryUnreadable(f"{type(exc).__name__}: {exc}") from exc
            self._read_at = began
            self.registry_reads += 1
            kind = classify(producer_id, copies=self.copies, plain=self.plain, registry_read=True)
        return kind
