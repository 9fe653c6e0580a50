"""The batch pipeline merging a partition's small source batches (strait.worker.batch.merging)
against the simulated source log and idempotent destination broker of test_batch_pipeline:
the same records land once, in order, in fewer batches and requests, and a merged batch is
resent with the same bytes and sequences."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch

from strait.worker.batch.compat import DestinationTopic
from strait.worker.batch.records import split_batches
from tests.unit.test_batch_pipeline import FakeDestination, FakeSource, run, setup, start
from tests.unit.test_batch_records import build

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]


def small_batches(count: int, per_batch: int = 3) -> list[bytes]:
    """Uncompressed batches of a few records each: what a producer writes at a low rate."""
    return [build(i * per_batch, per_batch, ts=1_700_000_000_000 + 7 * i) for i in range(count)]


def records(raws: list[bytes]) -> list[Record]:
    out: list[Record] = []
    for raw in raws:
        for batch in split_batches(raw).batches:
            decoded = DefaultRecordBatch(bytes(batch.data))
            assert decoded.validate_crc()
            out += [(r.timestamp, r.key, r.value, list(r.headers)) for r in decoded]
    return out


def landed(dst: FakeDestination, key: tuple[str, int]) -> list[bytes]:
    return dst.logs.get(key, [])


def test_small_batches_land_merged_once_and_in_order() -> None:
    logs = {("t", 0): small_batches(40), ("t", 1): small_batches(9)}
    pipeline, src, dst = setup(logs, merge_bytes=64 * 1024)
    states = [start(pipeline, "t", p) for p in range(2)]
    run(pipeline, lambda: all(s.checkpoint == src.end(("t", s.task.partition)) for s in states))
    for state in states:
        key = ("t", state.task.partition)
        assert records(landed(dst, key)) == records(logs[key])  # keys, values, headers, timestamps
        assert state.records == src.end(key)
    # The first batch goes alone (a new producer id), then what each fetch brought in one.
    assert len(landed(dst, ("t", 0))) < 40 / 4
    assert dst.requests < 49 / 4
    assert src.fetches <= dst.requests + 2


def test_merged_batches_stay_under_the_limit_and_the_topics_max_message_bytes() -> None:
    logs = {("t", 0): small_batches(60)}
    limit = 3 * len(logs[("t", 0)][0])
    for pipeline_limit, topic_limit in [(limit, None), (1 << 20, limit)]:
        destination = FakeDestination(DestinationTopic(max_message_bytes=topic_limit))
        pipeline, src, dst = setup(logs, destination=destination, merge_bytes=pipeline_limit)
        state = start(pipeline, "t", 0)
        run(pipeline, lambda s=state, f=src: s.checkpoint == f.end(("t", 0)), steps=500)  # type: ignore[misc]
        assert records(landed(dst, ("t", 0))) == records(logs[("t", 0)])
        assert all(len(raw) <= limit for raw in landed(dst, ("t", 0)))
        assert max(split_batches(raw).batches[0].record_count for raw in landed(dst, ("t", 0))) > 3


def test_a_merged_batch_refused_for_now_is_resent_with_the_same_sequences() -> None:
    logs = {("t", 0): small_batches(30)}
    pipeline, src, dst = setup(logs, merge_bytes=64 * 1024)
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint is not None and state.checkpoint >= 3)
    dst.faults = [6, 45, 45]  # NOT_LEADER, then what was sent after it is out of order
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert records(landed(dst, ("t", 0))) == records(logs[("t", 0)])  # each record once
    assert state.rewinds == 0 and len(dst.expected) == 1  # one producer id throughout


def test_batches_with_a_gap_between_them_are_not_merged_across_it() -> None:
    # Offsets 0-8, then 20-28 (records removed between them: compaction, deleted records).
    raws = small_batches(3) + [build(20 + 3 * i, 3) for i in range(3)]
    logs = {("t", 0): raws}
    pipeline, src, dst = setup(logs, merge_bytes=64 * 1024, source=FakeSource(logs))
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert records(landed(dst, ("t", 0))) == records(raws)
    # Never 0-8 and 20-28 in one batch (offsets in a batch are contiguous on the destination).
    assert all(split_batches(raw).batches[0].record_count <= 9 for raw in landed(dst, ("t", 0)))
