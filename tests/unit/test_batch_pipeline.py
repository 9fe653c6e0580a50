"""The batch pipeline (strait.worker.batch.pipeline, .partition) against a simulated source log
and a destination broker that checks idempotent sequences the way Kafka does: checkpoints per
acknowledged batch, resends with the same sequences, rewinds under a new producer id, hand-over
to record mode, releases."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.future import Future
from kafka.record.default_records import DefaultRecordBatch

from strait.offsetmap.runs import RunRecorder
from strait.worker.batch import partition as batch_partition
from strait.worker.batch import pipeline as batch_pipeline
from strait.worker.batch.compat import DestinationTopic
from strait.worker.batch.link import Key
from strait.worker.batch.pipeline import BatchPipeline
from strait.worker.batch.records import split_batches
from strait.worker.batch.select import AbortedTransaction
from strait.worker.pipeline import PartitionState, PipelineSettings
from strait.worker.task import PartitionTask
from tests.unit.test_batch_records import build, control_batch

GZIP = 1


@pytest.fixture(autouse=True)
def real_time_afterwards() -> Iterator[None]:
    yield
    batch_pipeline.time = time  # type: ignore[attr-defined]


class _Obj:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def answered_later(lookup: Callable[[str], dict[int, int]], topic: str) -> Future:
    """A lookup's answer as the link gives it: a future (answered at once here), or its error."""
    try:
        return Future().success(lookup(topic))
    except Exception as exc:
        return Future().failure(exc)


class FakeSource:
    """Partitions as lists of raw batches (at their source offsets), one leader (node 1)."""

    def __init__(self, logs: dict[Key, list[bytes]], *, compacted: bool = False) -> None:
        self.logs = logs
        self.is_compacted = compacted
        self.aborted: dict[Key, list[AbortedTransaction]] = {}
        self.fetches = 0
        self.fetched_bytes = 0

    def leaders(self, topic: str) -> dict[int, int]:
        return {p: 1 for t, p in self.logs if t == topic}

    def leaders_async(self, topic: str) -> Future:
        return answered_later(self.leaders, topic)

    def compacted(self, topic: str) -> bool:
        return self.is_compacted

    def end(self, key: Key) -> int:
        batches = split_batches(b"".join(self.logs[key])).batches
        return batches[-1].next_offset if batches else 0

    def fetch(self, node: int, offsets: dict[Key, int], *, max_bytes: int = 1 << 62, **_: Any) -> Future:
        self.fetches += 1
        topics: dict[str, list[Any]] = {}
        for key, offset in offsets.items():
            # Whole batches up to max_bytes, at least one (a broker's soft limit).
            raws = [raw for raw in self.logs[key] if split_batches(raw).batches[0].last_offset >= offset]
            taken: list[bytes] = []
            for raw in raws:
                if taken and sum(map(len, taken)) + len(raw) > max_bytes:
                    break
                taken.append(raw)
            blob = b"".join(taken)
            max_bytes = max(0, max_bytes - len(blob))
            self.fetched_bytes += len(blob)
            end = self.end(key)
            aborted = [_Obj(producer_id=a.producer_id, first_offset=a.first_offset) for a in self.aborted.get(key, [])]
            topics.setdefault(key[0], []).append(
                _Obj(
                    partition_index=key[1],
                    error_code=0,
                    high_watermark=end,
                    last_stable_offset=end,
                    log_start_offset=0,
                    aborted_transactions=aborted,
                    records=blob,
                )
            )
        return Future().success(_Obj(responses=[_Obj(topic=t, partitions=ps) for t, ps in topics.items()]))


class FakeDestination:
    """A broker's idempotence rules per partition: the next sequence of the producer id, a
    DUPLICATE answer for one of the last 5 batches, OUT_OF_ORDER for anything else.
    ``faults`` answers the next produce requests with these error codes instead."""

    def __init__(self, config: DestinationTopic = DestinationTopic()) -> None:
        self.config = config
        self.logs: dict[Key, list[bytes]] = {}
        self.expected: dict[tuple[Key, int], int] = {}
        self.recent: dict[tuple[Key, int], list[int]] = {}
        self.next_pid = 100
        self.faults: list[int | None] = []  # None: answer as the broker would
        self.hold = False  # answer nothing until released
        self.held: list[tuple[Future, dict[Key, bytes]]] = []
        self.requests = 0

    def leaders(self, topic: str) -> dict[int, int]:
        return dict.fromkeys(range(8), 2)

    def leaders_async(self, topic: str) -> Future:
        return answered_later(self.leaders, topic)

    def destination_topic(self, topic: str) -> DestinationTopic:
        return self.config

    def lane_of(self, key: Key) -> int:
        return 0  # one connection: every partition's batches may share a request

    def init_producer_id(self) -> Future:
        self.next_pid += 1
        return Future().success(_Obj(error_code=0, producer_id=self.next_pid, producer_epoch=0))

    def produce(self, node: int, batches: dict[Key, bytes], **_: Any) -> Future:
        self.requests += 1
        future = Future()
        if self.hold:
            self.held.append((future, dict(batches)))
        else:
            self._answer(future, batches)
        return future

    def release_held(self) -> None:
        held, self.held = self.held, []
        for future, batches in held:
            self._answer(future, batches)

    def _answer(self, future: Future, batches: dict[Key, bytes]) -> None:
        responses = []
        for key, data in batches.items():
            base = sum(b.record_count for raw in self.logs.get(key, []) for b in split_batches(raw).batches)
            code = self.faults.pop(0) if self.faults else None
            if code is None:
                code = self._append(key, bytes(data))
            responses.append(
                _Obj(name=key[0], partition_responses=[_Obj(index=key[1], error_code=code, base_offset=base)])
            )
        future.success(_Obj(responses=responses))

    def _append(self, key: Key, data: bytes) -> int:
        (batch,) = split_batches(data).batches
        producer = (key, batch.producer_id)
        expected = self.expected.get(producer, 0)
        if batch.base_sequence in self.recent.get(producer, []):
            return 46  # DUPLICATE_SEQUENCE_NUMBER
        if batch.base_sequence != expected:
            return 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        self.logs.setdefault(key, []).append(data)
        self.expected[producer] = expected + batch.record_count
        self.recent[producer] = [*self.recent.get(producer, []), batch.base_sequence][-5:]
        return 0

    def payloads(self, key: Key) -> list[bytes]:
        return [bytes(b.payload()) for raw in self.logs.get(key, []) for b in split_batches(raw).batches]


class Clock:
    """The pipeline's monotonic clock: it moves only when the pipeline polls (backoffs pass
    without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()


class FakeLinks:
    def __init__(self, source: FakeSource, destination: FakeDestination, clock: Clock) -> None:
        self.source, self.destination, self.clock = source, destination, clock
        self.closed = False

    def poll(self, timeout_s: float) -> None:
        self.clock.now += max(timeout_s, 0.01)

    def close(self) -> None:
        self.closed = True


def source_log(count: int, start: int = 0, per_batch: int = 4) -> list[bytes]:
    return [build(start + i * per_batch, per_batch, codec=GZIP) for i in range(count)]


def payloads(raws: list[bytes]) -> list[bytes]:
    return [bytes(b.payload()) for raw in raws for b in split_batches(raw).batches if not b.is_control]


def setup(
    logs: dict[Key, list[bytes]],
    *,
    destination: FakeDestination | None = None,
    compacted: bool = False,
    source: FakeSource | None = None,
    merge_bytes: int = 0,
) -> tuple[BatchPipeline, FakeSource, FakeDestination]:
    """A pipeline over fakes; its batches go one by one (``merge_bytes`` 0) unless asked, so
    the per-batch accounting shows."""
    src, dst = source or FakeSource(logs, compacted=compacted), destination or FakeDestination()
    clock = Clock()
    batch_pipeline.time = clock  # type: ignore[attr-defined]  # restored by the autouse fixture
    pipeline = BatchPipeline(
        name="batch",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        links=FakeLinks(src, dst, clock),  # type: ignore[arg-type]
        merge_bytes=merge_bytes,
    )
    return pipeline, src, dst


def start(pipeline: BatchPipeline, topic: str, partition: int, offset: int = 0) -> PartitionState:
    state = PartitionState(PartitionTask("r", topic, partition, topic))
    pipeline.add(state, offset)
    return state


def run(pipeline: BatchPipeline, until: Callable[[], bool], steps: int = 200) -> None:
    for _ in range(steps):
        pipeline._step()
        if until():
            return
    raise AssertionError("the pipeline did not get there")


def test_batches_copied_and_checkpoint_per_acknowledged_batch() -> None:
    logs = {("t", 0): source_log(12), ("t", 1): source_log(3)}
    pipeline, src, dst = setup(logs)
    states = [start(pipeline, "t", p) for p in range(2)]
    run(pipeline, lambda: all(s.checkpoint == src.end(("t", s.task.partition)) for s in states))
    for state in states:
        key = ("t", state.task.partition)
        assert dst.payloads(key) == payloads(logs[key])  # bit for bit, in order
        assert state.records == src.end(key) and state.mode == "batch" and state.lag == 0
    # Batches of both partitions shared produce requests (one leader).
    assert dst.requests < 12 + 3


def records_of(raws: list[bytes], from_offset: int = 0) -> list[tuple[Any, ...]]:
    """(offset, timestamp, key, value, headers) of every record, as a consumer reads them."""
    out = []
    for raw in raws:
        batch = DefaultRecordBatch(bytes(raw))
        base = split_batches(raw).batches[0].base_offset
        out += [(base + r.offset - batch.base_offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    return [r for r in out if r[0] >= from_offset]


def test_start_inside_a_batch_copies_its_tail_then_whole_batches() -> None:
    logs = {("t", 0): source_log(3)}  # batches hold 0-3, 4-7, 8-11
    pipeline, _, dst = setup(logs)
    state = start(pipeline, "t", 0, offset=6)
    run(pipeline, lambda: state.checkpoint == 12)
    assert state.mode == "batch" and state.records == 6
    copied = dst.logs[("t", 0)]
    assert [b.record_count for raw in copied for b in split_batches(raw).batches] == [2, 4]
    # The same records from offset 6 on (the copy's offsets start at 0 on the destination).
    assert [r[1:] for r in records_of(copied)] == [r[1:] for r in records_of(logs[("t", 0)], 6)]
    assert copied[1] != logs[("t", 0)][2] and dst.payloads(("t", 0))[1] == payloads(logs[("t", 0)])[2]


def test_a_tail_that_cannot_be_encoded_again_means_record_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_codec(*_: Any) -> None:
        raise ValueError("cannot re-encode (Libraries for lz4 compression codec not found)")

    monkeypatch.setattr(batch_partition, "tail_batch", no_codec)
    pipeline, _, dst = setup({("t", 0): source_log(3)})
    state = start(pipeline, "t", 0, offset=6)
    run(pipeline, lambda: state.mode == "record")
    assert state.mode_reason.startswith("fetch_offset_inside_batch") and "lz4" in state.mode_reason
    assert dst.logs == {} and state.checkpoint == 6 and not state.fetching
    done = pipeline.release(state)
    pipeline._step()
    assert done.is_set()


def test_codec_the_destination_would_recompress_means_record_mode() -> None:
    pipeline, _, dst = setup({("t", 0): source_log(3)}, destination=FakeDestination(DestinationTopic("zstd")))
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.mode == "record")
    assert state.mode_reason.startswith("codec_mismatch") and dst.logs == {}


def test_compacted_gap_between_batches_means_record_mode() -> None:
    log = [build(0, 4, codec=GZIP), build(10, 4, codec=GZIP)]
    pipeline, _, _ = setup({("t", 0): log}, compacted=True)
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.mode == "record")
    assert state.mode_reason.startswith("compacted_gap")
    assert state.checkpoint == 0  # nothing of the partition was acknowledged before the gap


def test_aborted_batches_and_markers_skipped_but_checkpoint_passes_them() -> None:
    log = [
        build(0, 3, codec=GZIP, producer=(7, 0, 0), transactional=True),
        control_batch(3, 7, 1),  # COMMIT
        build(4, 3, codec=GZIP, producer=(8, 0, 0), transactional=True),
        control_batch(7, 8, 0),  # ABORT
        build(8, 2, codec=GZIP),
    ]
    pipeline, src, dst = setup({("t", 0): log})
    src.aborted[("t", 0)] = [AbortedTransaction(8, 4)]
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint == 10)
    assert dst.payloads(("t", 0)) == [payloads([log[0]])[0], payloads([log[4]])[0]]
    assert state.records == 5


def test_retriable_answer_resends_same_sequences_without_duplicates() -> None:
    logs = {("t", 0): source_log(10)}
    pipeline, src, dst = setup(logs)
    state = start(pipeline, "t", 0)
    # The first batch alone until it is acknowledged (see BatchPartition.appended), then several.
    run(pipeline, lambda: state.checkpoint is not None and state.checkpoint >= 4)
    dst.faults = [6, 45, 45]  # NOT_LEADER, then the two sent after it are out of order
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])  # each batch once
    assert state.rewinds == 0 and len(dst.expected) == 1  # one producer id throughout


def test_lost_answer_then_resend_is_deduplicated_by_the_broker() -> None:
    logs = {("t", 0): source_log(4)}
    pipeline, src, dst = setup(logs)
    state = start(pipeline, "t", 0)
    dst.hold = True
    run(pipeline, lambda: len(dst.held) >= 1)
    # The broker appended the batches but the connection died before the answer came.
    held, dst.held = dst.held, []
    for future, batches in held:
        for key, data in batches.items():
            dst._append(key, bytes(data))
        future.failure(ConnectionError("connection lost"))
    dst.hold = False
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])


def test_failed_batch_rewinds_under_a_new_producer_id() -> None:
    logs = {("t", 0): source_log(6)}
    pipeline, src, dst = setup(logs)
    state = start(pipeline, "t", 0)
    pipeline._step()
    dst.faults = [59]  # UNKNOWN_PRODUCER_ID: no resend can fix it
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)), steps=2000)
    assert state.rewinds == 1 and dst.next_pid == 102  # a second InitProducerId for the rewind
    # Nothing was appended before the failure: every batch once, in order, under the new id.
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])
    assert [pid for _, pid in dst.expected] == [102]


def test_destination_refusing_a_batch_hands_over_to_record_mode_at_the_checkpoint() -> None:
    logs = {("t", 0): source_log(3)}
    pipeline, _, dst = setup(logs)
    state = start(pipeline, "t", 0)
    pipeline._step()
    dst.faults = [None, 10]  # the first batch lands, the second is too large
    run(pipeline, lambda: state.mode == "record" and state.tracker is not None and state.tracker.in_flight == 0)
    assert state.mode_reason.startswith("refused_by_destination")
    assert state.checkpoint is not None and state.checkpoint <= 4


def test_release_waits_for_batches_in_flight() -> None:
    logs = {("t", 0): source_log(5)}
    pipeline, src, dst = setup(logs)
    state = start(pipeline, "t", 0)
    dst.hold = True
    run(pipeline, lambda: bool(dst.held))
    done = pipeline.release(state)
    pipeline._step()
    assert not done.is_set() and not state.fetching
    dst.hold = False
    dst.release_held()
    run(pipeline, done.is_set)
    assert state.checkpoint is not None and state.checkpoint > 0
    fetches = src.fetches
    pipeline._step()
    assert src.fetches == fetches  # a released partition is not fetched any more


def test_stop_closes_the_links_and_a_dead_pipeline_releases_at_once() -> None:
    pipeline, _, _ = setup({("t", 0): source_log(1)})
    links = pipeline._links
    pipeline.start()
    state = start(pipeline, "t", 0)
    pipeline.stop(1.0)
    assert isinstance(links, FakeLinks) and links.closed
    done: threading.Event = pipeline.release(state)
    assert done.is_set()


def test_unreachable_clusters_send_partitions_to_record_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> FakeLinks:
        raise ConnectionError("no broker answers")

    monkeypatch.setattr(batch_pipeline, "Links", refuse)
    pipeline = BatchPipeline(name="batch", source={}, destination={}, group_id="g", client_id="c")
    pipeline.start()
    try:
        state = start(pipeline, "t", 0, offset=5)
        deadline = time.monotonic() + 30
        while state.mode != "record" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state.mode == "record" and "no broker answers" in state.mode_reason
        done = pipeline.release(state)
        assert done.wait(30) and state.checkpoint == 5
    finally:
        pipeline.stop(1.0)


@pytest.mark.parametrize("seed", range(20))
def test_a_batch_noted_at_once_makes_the_same_runs_as_its_records_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    one_by_one, at_once = RunRecorder(), RunRecorder()
    source, destination = 0, 0
    for _ in range(30):
        count = rng.randint(1, 20)
        source += rng.choice([0, 0, 3])  # a gap on the source now and then
        destination += rng.choice([0, 0, 0, 5])  # a resend or another writer on the destination
        for i in range(count):
            one_by_one.note(source + i, destination + i)
        at_once.note_many(source, destination, count)
        source, destination = source + count, destination + count
        if rng.random() < 0.2:
            assert at_once.take() == one_by_one.take()
    assert at_once.take() == one_by_one.take()


def test_fetching_stops_while_the_pipeline_holds_its_fill_of_fetched_batches() -> None:
    logs = {("t", 0): source_log(12, per_batch=40)}
    src, dst = FakeSource(logs), FakeDestination()
    clock = Clock()
    batch_pipeline.time = clock  # type: ignore[attr-defined]
    pipeline = BatchPipeline(
        name="batch",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        settings=PipelineSettings(producer_max_kbytes=1),
        links=FakeLinks(src, dst, clock),  # type: ignore[arg-type]
    )
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint is not None and state.checkpoint >= 40)  # the first batch alone
    dst.hold = True
    run(pipeline, lambda: len(dst.held) >= 5)  # 5 batches in flight, the others fetched and waiting
    fetches = src.fetches
    for _ in range(20):
        pipeline._step()
    assert src.fetches == fetches
    dst.hold = False
    dst.release_held()
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])


class NewProducerBroker(FakeDestination):
    """As a real broker: a producer id it has no state for may start at any sequence (its
    records may have been removed by retention), so a batch sent after one that failed
    retriably can be appended first. The first produce answer is NOT_LEADER_OR_FOLLOWER."""

    def __init__(self) -> None:
        super().__init__()
        self.faults = [6]

    def _append(self, key: Key, data: bytes) -> int:
        (batch,) = split_batches(data).batches
        self.expected.setdefault((key, batch.producer_id), batch.base_sequence)
        return super()._append(key, data)


def test_a_new_producer_sends_one_batch_until_the_first_is_appended() -> None:
    # Seen on real clusters with batch as the default: the first batch of a fresh partition got
    # a retriable answer, a later one was appended first (a broker takes any first sequence from
    # a producer it does not know), the first then got OUT_OF_ORDER_SEQUENCE_NUMBER, and the
    # partition rewound: 40 duplicates and 5 records out of order.
    logs = {("t", 0): source_log(8)}
    pipeline, src, dst = setup(logs, destination=NewProducerBroker())
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])  # in order, each once
    assert state.rewinds == 0


class LaterLeaders(FakeSource):
    """A source whose leader lookups of ``slow`` are answered when the test says so; notes when
    a partition of ``slow`` is first fetched."""

    def __init__(self, logs: dict[Key, list[bytes]], clock: Clock, slow: str) -> None:
        super().__init__(logs)
        self.clock, self.slow = clock, slow
        self.pending: list[Future] = []
        self.first_fetch_at: float | None = None

    def leaders_async(self, topic: str) -> Future:
        if topic != self.slow:
            return super().leaders_async(topic)
        self.pending.append(Future())
        return self.pending[-1]

    def fetch(self, node: int, offsets: dict[Key, int], **options: Any) -> Future:
        if self.first_fetch_at is None and any(t == self.slow for t, _ in offsets):
            self.first_fetch_at = self.clock.now
        return super().fetch(node, offsets, **options)


def test_a_leader_lookup_on_the_way_holds_neither_the_other_partitions_nor_its_own() -> None:
    # A blocking Metadata round trip per lookup would stall the loop's only thread.
    logs = {("t", 0): source_log(3), ("slow", 0): source_log(2)}
    clock = Clock()
    batch_pipeline.time = clock  # type: ignore[attr-defined]  # restored by the autouse fixture
    src, dst = LaterLeaders(logs, clock, "slow"), FakeDestination()
    pipeline = BatchPipeline(
        name="batch",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        links=FakeLinks(src, dst, clock),  # type: ignore[arg-type]
    )
    fast, slow = start(pipeline, "t", 0), start(pipeline, "slow", 0)
    run(pipeline, lambda: fast.checkpoint == src.end(("t", 0)))
    assert slow.records == 0 and len(src.pending) == 1  # asked once, not again while on the way
    answered_at = clock.now
    src.pending[0].success(src.leaders("slow"))
    run(pipeline, lambda: slow.checkpoint == src.end(("slow", 0)))
    # Fetched at the next turns, not after the 0.2 s wait of a leader that is not known.
    assert src.first_fetch_at is not None
    assert src.first_fetch_at - answered_at < batch_pipeline.RETRY_BACKOFF_S / 2


class FirstAsked(FakeSource):
    """Which partition each fetch request names first."""

    def __init__(self, logs: dict[Key, list[bytes]]) -> None:
        super().__init__(logs)
        self.first: list[Key] = []

    def fetch(self, node: int, offsets: dict[Key, int], **options: Any) -> Future:
        self.first.append(next(iter(offsets)))
        return super().fetch(node, offsets, **options)


def test_each_fetch_request_starts_one_partition_further() -> None:
    # A broker fills a capped answer in request order: always starting with the same partition
    # would starve the others at a low pace.
    logs = {("t", p): source_log(6) for p in range(3)}
    src = FirstAsked(logs)
    pipeline, _, dst = setup(logs, source=src)
    states = [start(pipeline, "t", p) for p in range(3)]
    run(pipeline, lambda: all(s.checkpoint == src.end(("t", s.task.partition)) for s in states))
    assert len(src.first) >= 2
    assert len(set(src.first)) >= 2, src.first
    for state in states:
        key = ("t", state.task.partition)
        assert dst.payloads(key) == payloads(logs[key])


def test_a_held_pipeline_sends_no_fetch_and_resumes_where_it_stopped() -> None:
    logs = {("t", 0): source_log(6)}
    pipeline, src, dst = setup(logs)
    pipeline.hold(True)
    state = start(pipeline, "t", 0)
    for _ in range(50):
        pipeline._step()
    assert src.fetches == 0 and dst.payloads(("t", 0)) == [] and state.checkpoint == 0
    pipeline.hold(False)
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])
