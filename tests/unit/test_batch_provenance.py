"""Two-way routes in batch mode: which fetched batches are copies (strait.worker.batch.provenance),
the producer registry's records (.registry), producer ids published before use (.identities),
and copies skipped with their offsets accounted (.partition, .pipeline)."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.future import Future
from kafka.record.default_records import DefaultRecordBatchBuilder

from strait.worker.batch.compat import DestinationTopic, Mode, Reason, decide_mode
from strait.worker.batch.identities import Identities
from strait.worker.batch.provenance import (
    IDS_KEPT,
    HeaderVerdict,
    Kind,
    Provenance,
    RegistryUnreadable,
    classify,
    judge_origins,
    record_origins,
)
from strait.worker.batch.records import RecordBatch, split_batches
from strait.worker.batch.registry import decode_key, decode_source, encode
from strait.worker.origin import HEADER
from tests.unit.test_batch_pipeline import run, setup, start
from tests.unit.test_batch_records import build

A, B = "src", "dst"  # the route copies A -> B; record-mode copies from B name "dst"


def batch_of(
    base_offset: int, producer_id: int, origins: Iterable[str | None] = (None, None), *, codec: int = 0
) -> bytes:
    """A v2 batch of ``producer_id`` whose records carry these ``strait.origin`` values."""
    builder = DefaultRecordBatchBuilder(2, codec, False, producer_id, 0 if producer_id >= 0 else -1, -1, 1 << 20)
    for i, origin in enumerate(origins):
        headers = [("app", b"x")] + ([] if origin is None else [(HEADER, origin.encode())])
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % (base_offset + i), b"v%d" % (base_offset + i), headers)
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)
    return bytes(raw)


def parsed(raw: bytes) -> RecordBatch:
    (batch,) = split_batches(raw).batches
    return batch


# -- the decision -----------------------------------------------------------------------------


@given(
    producer_id=st.integers(min_value=-1, max_value=50),
    copies=st.frozensets(st.integers(min_value=0, max_value=50)),
    plain=st.frozensets(st.integers(min_value=0, max_value=50)),
    stamped=st.frozensets(st.integers(min_value=0, max_value=50)),
    registry_read=st.booleans(),
)
def test_classify_follows_the_rules_in_order(
    producer_id: int, copies: frozenset[int], plain: frozenset[int], stamped: frozenset[int], registry_read: bool
) -> None:
    kind = classify(producer_id, copies=copies, plain=plain, stamped=stamped, registry_read=registry_read)
    if producer_id == -1:
        assert kind is Kind.ORIGINAL
    elif producer_id in copies:
        assert kind is Kind.COPY  # a published id wins over what headers once suggested
    elif producer_id in plain:
        assert kind is Kind.ORIGINAL
    else:
        assert kind is (Kind.READ_HEADERS if registry_read or producer_id in stamped else Kind.READ_REGISTRY)


@pytest.mark.parametrize(
    ("origins", "kind", "stamped"),
    [
        ([None, None], Kind.ORIGINAL, False),
        ([A, A], Kind.ORIGINAL, True),  # came from the route's source (or further): copied
        ([B, B], Kind.COPY, True),  # every record came from the destination: skipped
        ([B, None], Kind.MIXED, True),
        ([B, "elsewhere"], Kind.MIXED, True),
        ([], Kind.ORIGINAL, False),
    ],
)
def test_headers_decide_a_batch_as_record_mode_decides_each_record(
    origins: list[str | None], kind: Kind, stamped: bool
) -> None:
    assert judge_origins(origins, B) == HeaderVerdict(kind, stamped)


@pytest.mark.parametrize("codec", [0, 1])  # none, gzip
def test_record_origins_reads_each_records_header(codec: int) -> None:
    batch = parsed(batch_of(40, 7, [B, None, A], codec=codec))
    assert record_origins(batch) == [B, None, A]


def test_a_batch_that_cannot_be_decoded_is_a_value_error() -> None:
    raw = bytearray(batch_of(0, 7, [B], codec=1))
    raw[61:] = b"\x00" * (len(raw) - 61)  # no gzip stream any more
    with pytest.raises(ValueError, match="unreadable"):
        record_origins(parsed(bytes(raw)))


# -- generated worlds: every batch judged as what it is, the registry read sparingly ----------


@dataclass
class World:
    """A source cluster (the route's source) as its writers fill it, in time order.

    ``copy`` producers are the opposite route's batch pipelines: each publishes its id, then
    writes. ``stamped`` ones are its record pipelines: every record names the route's
    destination. ``user`` producers write plain records (id -1 for those without idempotence).
    """

    log: list[tuple[bytes, str]] = field(default_factory=list)  # raw batch, truth
    published: list[tuple[int, int]] = field(default_factory=list)  # (time, producer id)
    clock: int = 0
    next_offset: int = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def publish(self, producer_id: int) -> None:
        self.published.append((self.tick(), producer_id))

    def write(self, producer_id: int, origins: list[str | None], truth: str) -> None:
        self.tick()
        self.log.append((batch_of(self.next_offset, producer_id, origins), truth))
        self.next_offset += len(origins)


writers = st.lists(
    st.tuples(st.sampled_from(["copy", "stamped", "user", "plain-user"]), st.integers(0, 4), st.integers(1, 3)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(steps=writers, fetch_every=st.integers(1, 6))
def test_every_batch_is_judged_as_what_it_is(steps: list[tuple[str, int, int]], fetch_every: int) -> None:
    world = World()
    ids = {"copy": 1000, "stamped": 2000, "user": 3000}
    started: set[int] = set()
    for kind, which, count in steps:
        if kind == "plain-user":
            world.write(-1, [None] * count, "original")
            continue
        producer_id = ids[kind] + which
        if kind == "copy":
            if producer_id not in started:
                world.publish(producer_id)  # acknowledged before the id's first batch
                started.add(producer_id)
            world.write(producer_id, [None] * count, "copy")
        elif kind == "stamped":
            world.write(producer_id, [B] * count, "copy")
        else:
            world.write(producer_id, [A if which % 2 else None] * count, "original")

    # The reader fetches the log in chunks, each after it was written; a registry read returns
    # what was published up to the moment it runs (the reader's clock runs after the writers').
    reads: list[int] = []
    reader_now = [world.clock]

    def read_registry() -> set[int]:
        reader_now[0] += 1
        reads.append(reader_now[0])
        return {pid for at, pid in world.published if at <= reader_now[0]}

    def clock() -> float:
        reader_now[0] += 1
        return reader_now[0]

    provenance = Provenance(B, read_registry=read_registry, clock=clock)
    judged_copies: set[int] = set()
    batches = [parsed(raw) for raw, _ in world.log]
    for first in range(0, len(batches), fetch_every):
        chunk = batches[first : first + fetch_every]
        reader_now[0] += 1
        judged = provenance.judge(chunk, fetched_at=reader_now[0])
        assert judged.mixed is None
        judged_copies |= judged.copies
    truth = {parsed(raw).base_offset for raw, what in world.log if what == "copy"}
    assert judged_copies == truth
    # One registry read at most per fetch, and none once every id in sight is known.
    assert len(reads) <= -(-len(batches) // fetch_every)
    unknown_ids = {b.producer_id for b in batches if b.producer_id >= 0}
    assert len(reads) <= len(unknown_ids)


def test_a_batch_mixing_copies_and_originals_is_named() -> None:
    provenance = Provenance(B, read_registry=set)
    batches = [parsed(batch_of(0, 5, [None])), parsed(batch_of(1, 6, [B, None]))]
    judged = provenance.judge(batches, fetched_at=0.0)
    assert judged.mixed is not None and judged.mixed.base_offset == 1


def test_a_user_producer_costs_one_decoded_batch_and_the_registry_one_read_per_new_id() -> None:
    reads = []
    provenance = Provenance(B, read_registry=lambda: reads.append(1) or {9})
    now = [0.0]
    provenance._clock = lambda: now[0]  # type: ignore[method-assign]
    for n in range(5):
        now[0] += 1
        judged = provenance.judge([parsed(batch_of(2 * n, 5)), parsed(batch_of(2 * n + 1, 9))], fetched_at=now[0])
        now[0] += 1
        assert judged.copies == {2 * n + 1}
    assert provenance.batches_decoded == 1 and len(reads) == 1


def test_the_memory_of_user_producers_is_bounded() -> None:
    provenance = Provenance(B, read_registry=set)
    provenance.plain.update(range(IDS_KEPT))
    provenance.judge([parsed(batch_of(0, IDS_KEPT + 5))], fetched_at=-1.0)
    assert provenance.plain == {IDS_KEPT + 5}


def test_a_failed_registry_read_counts_as_no_read() -> None:
    calls = []

    def read_registry() -> set[int]:
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("registry end not reached")
        return {5}

    provenance = Provenance(B, read_registry=read_registry)
    with pytest.raises(RegistryUnreadable, match="TimeoutError"):
        provenance.judge([parsed(batch_of(0, 5))], fetched_at=0.0)
    # Fetched again: read again, and the id is found (not judged by headers as a user's).
    assert provenance.judge([parsed(batch_of(0, 5))], fetched_at=0.0).copies == {0}
    assert provenance.plain == set()


# -- the registry's records ---------------------------------------------------------------------


def test_registry_records_are_keyed_by_the_producer_id_and_name_the_cluster_copied_from() -> None:
    key, value = encode(123456789012, "src", "strait-ab-w1-batch", 5)
    assert decode_key(key) == 123456789012 and decode_source(value) == "src"
    assert b"strait-ab-w1-batch" in value
    assert decode_key(None) is None and decode_key(b"") is None and decode_key(b"junk") is None
    assert decode_source(None) is None and decode_source(b"[]") is None and decode_source(b'{"source": 3}') is None


# -- producer ids published before use -----------------------------------------------------------


class Registry:
    def __init__(self) -> None:
        self.handles: list[tuple[int, Any]] = []
        self.polls = 0

    def publish(self, producer_id: int) -> Any:
        handle = SimpleNamespace(done=False, error=None)
        self.handles.append((producer_id, handle))
        return handle

    def poll(self) -> None:
        self.polls += 1


def identity_part(generation: int = 0) -> Any:
    return SimpleNamespace(
        generation=generation, active=True, identity=None, next_sequence=9, state=SimpleNamespace(task="t/0")
    )


def answered(producer_id: int) -> Future:
    return Future().success(SimpleNamespace(producer_id=producer_id, producer_epoch=0, error_code=0))


def test_an_id_is_used_only_once_the_registry_acknowledged_it() -> None:
    registry = Registry()
    ids = Identities(lambda: answered(42), retry_s=0.2, publisher=registry)
    p = identity_part()
    ids.ask(p)
    ids.take(0.0)
    assert registry.handles[0][0] == 42 and p.identity is None
    ids.take(0.1)
    assert p.identity is None
    registry.handles[0][1].done = True
    ids.take(0.2)
    assert p.identity.producer_id == 42 and p.next_sequence == 0


def test_an_id_the_registry_refused_is_never_used_and_a_new_one_asked_later() -> None:
    registry = Registry()
    pids = iter([42, 43])
    ids = Identities(lambda: answered(next(pids)), retry_s=0.2, publisher=registry)
    p = identity_part()
    ids.ask(p)
    ids.take(0.0)
    registry.handles[0][1].error, registry.handles[0][1].done = "TOPIC_AUTHORIZATION_FAILED", True
    ids.take(0.1)
    assert p.identity is None and len(registry.handles) == 1
    ids.take(0.35)  # the backoff is over: a new id, published in its turn
    assert [pid for pid, _ in registry.handles] == [42, 43] and p.identity is None
    registry.handles[1][1].done = True
    ids.take(0.4)
    assert p.identity.producer_id == 43


def test_a_publication_for_an_older_position_gives_nothing() -> None:
    registry = Registry()
    ids = Identities(lambda: answered(42), retry_s=0.2, publisher=registry)
    p = identity_part()
    ids.ask(p)
    ids.take(0.0)
    p.generation = 1  # rewound meanwhile: it asks again itself
    registry.handles[0][1].done = True
    ids.take(0.1)
    assert p.identity is None


# -- copies skipped in the pipeline -----------------------------------------------------------


def test_compat_ignores_the_batches_skipped_as_copies() -> None:
    gapped = parsed(build(0, 2, deltas=[0, 2]))  # inner gap: would send the partition to record mode
    assert decide_mode([gapped], DestinationTopic(), source_compacted=False).mode is Mode.RECORD
    assert decide_mode([gapped], DestinationTopic(), source_compacted=False, skipped={0}).mode is Mode.BATCH


def two_way(pipeline: Any, registered: set[int]) -> Provenance:
    provenance = Provenance(B, read_registry=lambda: set(registered))
    pipeline._provenance = provenance
    return provenance


def test_copies_are_skipped_and_the_checkpoint_passes_them() -> None:
    key = ("t", 0)
    log = [
        batch_of(0, 7, [None, None]),  # a user's
        batch_of(2, 500, [None, None, None]),  # the opposite route's batch copy
        batch_of(5, -1, [None]),  # a user's, no idempotence
        batch_of(6, 600, [B, B]),  # the opposite route's record-mode copy
        batch_of(8, 7, [None]),
    ]
    pipeline, _, dst = setup({key: log})
    provenance = two_way(pipeline, {500})
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint == 9)
    copied = [b.base_sequence for raw in dst.logs[key] for b in split_batches(raw).batches]
    assert [len(split_batches(raw).batches) for raw in dst.logs[key]] == [1, 1, 1]
    assert copied == [0, 2, 3]  # 2 + 1 + 1 records, sequences follow what was produced
    payloads = [bytes(b.payload()) for raw in dst.logs[key] for b in split_batches(raw).batches]
    assert payloads == [bytes(parsed(log[i]).payload()) for i in (0, 2, 4)]
    assert state.skipped_origin == 5 and state.mode == "batch"
    assert provenance.registry_reads == 1


def test_a_copy_holding_the_fetch_position_is_accounted_from_there() -> None:
    key = ("t", 0)
    log = [batch_of(0, 500, [None, None, None]), batch_of(3, 7, [None])]
    pipeline, _, dst = setup({key: log})
    two_way(pipeline, {500})
    state = start(pipeline, "t", 0, offset=1)  # record mode left the checkpoint inside the copy
    run(pipeline, lambda: state.checkpoint == 4)
    assert [b.record_count for raw in dst.logs[key] for b in split_batches(raw).batches] == [1]
    assert state.skipped_origin == 2


def test_a_batch_mixing_copies_and_originals_goes_record_by_record() -> None:
    key = ("t", 0)
    pipeline, _, dst = setup({key: [batch_of(0, 7, [None]), batch_of(1, 8, [B, None])]})
    two_way(pipeline, set())
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.mode == "record")
    assert state.mode_reason.startswith(Reason.ORIGIN_UNDECIDED.value)
    assert key not in dst.logs  # nothing of that fetch was produced


def test_an_unreadable_registry_holds_the_partition_until_it_can_be_read() -> None:
    key = ("t", 0)
    pipeline, _, dst = setup({key: [batch_of(0, 500, [None]), batch_of(1, 7, [None])]})
    failing = [True]

    def read_registry() -> set[int]:
        if failing[0]:
            raise TimeoutError("no answer")
        return {500}

    pipeline._provenance = Provenance(B, read_registry=read_registry)
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.waiting is not None)
    assert state.waiting.startswith("producer registry") and key not in dst.logs
    assert state.checkpoint in (None, 0)
    failing[0] = False
    run(pipeline, lambda: state.checkpoint == 2, steps=2000)
    assert [b.record_count for raw in dst.logs[key] for b in split_batches(raw).batches] == [1]
    assert state.waiting is None and state.skipped_origin == 1
