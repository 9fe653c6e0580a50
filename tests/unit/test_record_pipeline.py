"""The record pipeline's copy loop, driven step by step around in-memory consumer and producer.

Each test replays one risky interleaving of the data path deterministically:
the loop runs on the test's thread (`_step`), the fake producer holds every record until the
test acknowledges or fails it, and the fake consumer serves a partition's log from wherever it
was positioned. The destination's contents are then checked record by record: every source
offset must be there, in order, and the checkpoint never passes one that is not.

Messages are real ``confluent_kafka.Message`` objects (the loop maps Message's own methods over
whole batches). Like librdkafka, the fake producer fills the delivery reports when the test
answers; the pipeline settles them after its next poll (a step) or when ``reports()`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, Message, TopicPartition

from strait.worker import sending
from strait.worker.backlog import Run, runs_of
from strait.worker.fetch import GAP_SOURCE, GAP_UNEXPECTED, RecordPipeline
from strait.worker.pipeline import PartitionState, PipelineSettings
from strait.worker.task import PartitionTask

TOPIC = "orders"


def FakeMessage(topic: str, partition: int, offset: int, error: KafkaError | None = None) -> Message:
    """A fetched record: its value names its source offset."""
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=b"k",
        value=f"v{offset}".encode(),
        headers=None,
        error=error,
        timestamp=(TIMESTAMP_CREATE_TIME, 1_000 + offset),
    )


class FakeConsumer:
    """Serves each partition's log (a sorted list of offsets: gaps stand for markers or
    compaction) from its position; like librdkafka, seek/assign drop what was fetched before."""

    def __init__(self, logs: dict[int, list[int]]) -> None:
        self.logs = logs
        self.positions: dict[int, int] = {}
        self.paused: set[int] = set()
        self.closed = False
        self.batch_limit = 1000

    def _check(self) -> None:
        if self.closed:
            raise RuntimeError("Consumer closed")

    def consume(self, num: int, timeout: float) -> list[Message]:
        self._check()
        out: list[Message] = []
        for partition, position in sorted(self.positions.items()):
            if partition in self.paused:
                continue
            ready = [o for o in self.logs[partition] if o >= position][: min(num, self.batch_limit) - len(out)]
            out += [FakeMessage(TOPIC, partition, o) for o in ready]
            if ready:
                self.positions[partition] = ready[-1] + 1
        return out

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self._check()
        for tp in tps:
            self.positions[tp.partition] = tp.offset

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self._check()
        for tp in tps:
            # Like librdkafka (2.16): an application pause outlives the unassign and holds
            # when the partition is assigned again.
            self.positions.pop(tp.partition, None)

    def seek(self, tp: TopicPartition) -> None:
        self._check()
        self.positions[tp.partition] = tp.offset

    def pause(self, tps: list[TopicPartition]) -> None:
        self._check()
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self._check()
        self.paused -= {tp.partition for tp in tps}

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        self._check()
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001)) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> tuple[int, int]:
        self._check()
        log = self.logs[tp.partition]
        return (log[0] if log else 0, (log[-1] + 1) if log else 0)

    def close(self) -> None:
        self.closed = True


@dataclass
class Pending:
    partition: int
    offset: int
    callback: Callable[[KafkaError | None, Any], None]
    topic: str = TOPIC
    key: bytes | None = None
    value: bytes | None = None
    timestamp: int = 0

    def report(self, written_at: int = -1) -> Message:
        """The message of its delivery report (the destination offset once written)."""
        return Message(
            topic=self.topic,
            partition=self.partition,
            offset=written_at,
            key=self.key,
            value=self.value,
            headers=None,
            error=None,
            timestamp=(TIMESTAMP_CREATE_TIME, self.timestamp),
        )


@dataclass
class FakeProducer:
    """Holds records until the test answers them; a bounded queue raises BufferError when full."""

    capacity: int = 1_000_000
    pending: list[Pending] = field(default_factory=list)
    destination: dict[int, list[int]] = field(default_factory=dict)  # source offsets, in write order
    on_flush: Callable[[FakeProducer], None] | None = None
    log_end: dict[int, int] = field(default_factory=dict)  # destination offsets handed out

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes,
        partition: int,
        on_delivery: Any,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """confluent-kafka's positional order (``callback`` is ``on_delivery``'s alias)."""
        if len(self.pending) >= self.capacity:
            raise BufferError("queue full")
        offset = int(value.decode()[1:])
        self.pending.append(Pending(partition, offset, on_delivery, topic, key, value, timestamp))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        if self.on_flush is not None:
            self.on_flush(self)
        return len(self.pending)

    def list_topics(self, *_: Any, **__: Any) -> None:
        return None

    def ack(self, count: int | None = None) -> None:
        """The destination acknowledges the oldest `count` records (all by default), in order."""
        done, self.pending = self.pending[:count], self.pending[len(self.pending[:count]) :]
        for record in done:
            self.destination.setdefault(record.partition, []).append(record.offset)
            self.log_end[record.partition] = self.log_end.get(record.partition, 0) + 1
            record.callback(None, record.report(self.log_end[record.partition] - 1))

    def fail(self, count: int | None = None, code: int = KafkaError._MSG_TIMED_OUT, *, cascade: bool = True) -> None:
        """The oldest `count` records fail, and with them every later record of their partitions
        (the idempotent producer never lets a later record land after an earlier one failed);
        without `cascade` only those (they timed out, later ones are younger)."""
        if cascade:
            partitions = {r.partition for r in self.pending[:count]}
            done = [r for r in self.pending if r.partition in partitions]
            self.pending = [r for r in self.pending if r.partition not in partitions]
        else:
            done, self.pending = self.pending[:count], self.pending[len(self.pending[:count]) :]
        for record in done:
            record.callback(KafkaError(code), record.report())


class Observer:
    def __init__(self) -> None:
        self.gaps: list[str] = []

    def fetched(self, pipeline: str, wait_s: float) -> None: ...
    def queued(self, pipeline: str, seconds: float, count: int = 1) -> None: ...
    def acked(
        self, pipeline: str, topic: str, partition: int, ack_s: float | None, timestamp_ms: int, count: int = 1
    ) -> None: ...
    def committed(self, seconds: float) -> None: ...
    def client_stats(self, role: str) -> Callable[[str], None]:
        return lambda _payload: None

    def offset_gap(self, kind: str) -> None:
        self.gaps.append(kind)

    def checkpoint_refused(self, kind: str) -> None: ...


class Rig:
    def __init__(self, logs: dict[int, list[int]], capacity: int = 1_000_000) -> None:
        self.consumer = FakeConsumer(logs)
        self.producer = FakeProducer(capacity=capacity)
        self.observer = Observer()
        self.pipeline = RecordPipeline(
            name="realtime",
            source={},
            destination={},
            group_id="g",
            client_id="c",
            settings=PipelineSettings(batch_size=1000),
            observer=self.observer,
            consumer=self.consumer,
            producer=self.producer,
        )

    def state(self, partition: int = 0) -> PartitionState:
        return PartitionState(PartitionTask("r", TOPIC, partition, f"{TOPIC}-copy"))

    def step(self, times: int = 1) -> None:
        for _ in range(times):
            self.pipeline._step()

    def reports(self) -> None:
        """Settle the delivery reports the producer filled (as a loop turn does after its poll)."""
        self.pipeline._book.settle()

    def settle(self, rounds: int = 50) -> None:
        """Run the loop, acknowledging everything, until nothing is left to do."""
        for _ in range(rounds):
            self.step()
            self.producer.ack()
        self.step()

    def copied(self, partition: int = 0) -> list[int]:
        return self.producer.destination.get(partition, [])


def assert_complete(copied: list[int], log: list[int], start: int = 0) -> None:
    """Every record of the log from `start` is in the copy, and first copies come in order."""
    firsts: list[int] = []
    for offset in copied:
        if offset not in firsts:
            firsts.append(offset)
    expected = [o for o in log if o >= start]
    assert firsts == expected, f"missing or out of order: {sorted(set(expected) - set(firsts))}"


def test_a_full_producer_queue_resumes_at_the_record_it_stopped_at() -> None:
    # Under back-pressure a loop that skipped the record hitting the full queue and produced the
    # next one would leave a gap the tracker accepts, and the checkpoint would pass it.
    log = list(range(10))
    rig = Rig({0: log}, capacity=3)
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    assert [p.offset for p in rig.producer.pending] == [0, 1, 2]
    rig.producer.ack(2)
    rig.step()
    assert [p.offset for p in rig.producer.pending] == [2, 3, 4]
    rig.settle()
    assert rig.copied() == log
    assert state.checkpoint == 10


def test_stopping_under_back_pressure_commits_only_the_acknowledged_prefix() -> None:
    log = list(range(10))
    rig = Rig({0: log}, capacity=3)
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(1)
    rig.step()  # 1, 2, 3 queued; 4.. wait in the backlog
    rig.pipeline._stopping.set()
    rig.producer.on_flush = lambda p: p.ack()
    rig.pipeline._shutdown()
    assert rig.copied() == [0, 1, 2, 3]
    assert state.checkpoint == 4  # not one record past what the destination has


def test_a_batch_fetched_before_a_re_add_is_never_produced_after_it() -> None:
    # The partition is released and added again (moved away and back, or abandoned and
    # re-assigned) while records fetched before wait behind a full producer queue; produced
    # above the new start, they would leave a gap the tracker takes, and the checkpoint would
    # pass records (here 2 and 3) that the new owner never sent.
    log = list(range(20))
    rig = Rig({0: log}, capacity=4)
    old = rig.state()
    rig.pipeline.add(old, 0)
    rig.step()  # 0-3 queued, 4-19 wait in the backlog
    rig.producer.ack(2)  # checkpoint 2
    rig.pipeline.release(old)
    new = rig.state()
    rig.pipeline.add(new, 2)  # both commands run in the same turn, before any produce pass
    rig.step()
    # The old records 2 and 3 still in flight, then the new owner from 2: nothing from the stale batch.
    assert [p.offset for p in rig.producer.pending] == [2, 3, 2, 3]
    rig.producer.fail()  # every record in flight fails; the new owner resends from 2
    rig.reports()
    new.rewind_at = 0.0  # skip the back-off
    rig.settle()
    assert_complete(rig.copied(), log)
    assert new.checkpoint == 20
    assert GAP_UNEXPECTED not in rig.observer.gaps


def test_source_gaps_are_accepted_and_a_dropped_record_rewinds(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3-5 and 8 hold no records (markers, compaction): the consumer's stream jumps by itself.
    log = [0, 1, 2, 6, 7, 9, 10, 11]
    rig = Rig({0: log})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    assert rig.observer.gaps == [GAP_SOURCE, GAP_SOURCE]
    rig.producer.ack()
    rig.step()
    assert state.checkpoint == 12
    # A slip in the loop itself (a fetched record lost on the way) must not become a gap: the
    # consumer handed over 12, 13, 14, 15 (the stream records that), the loop lost 13.
    rig.consumer.logs[0] = [*log, 12, 13, 14, 15]

    def slip(messages: list[Any], stream: dict[tuple[str, int], int]) -> list[Run]:
        [run] = runs_of(messages, stream)
        lost = run.offsets.index(13)
        after = Run(run.key, 14, run.messages[lost + 1 :], run.offsets[lost + 1 :])
        return [Run(run.key, run.before, run.messages[:lost], run.offsets[:lost]), after]

    monkeypatch.setattr("strait.worker.fetch.runs_of", slip)
    rig.step()
    assert rig.observer.gaps[-1] == GAP_UNEXPECTED
    rig.producer.ack()
    rig.reports()
    assert state.checkpoint == 13  # 12 acknowledged; never past the dropped 13
    monkeypatch.undo()
    rig.settle()
    assert_complete(rig.copied(), rig.consumer.logs[0])
    assert state.checkpoint == 16 and state.rewinds == 1


def test_a_late_failure_of_a_released_partition_does_not_stop_its_next_owner() -> None:
    # The failure of a record sent before the partition was released arrives after it was added
    # again: pausing the consumer for it would stop the new owner, since nothing resumes it.
    log = list(range(10))
    rig = Rig({0: log})
    old = rig.state()
    rig.pipeline.add(old, 0)
    rig.step()
    rig.pipeline.release(old)
    rig.step()
    new = rig.state()
    rig.pipeline.add(new, 0)  # an abandoned partition assigned again: its old records still fly
    rig.step()
    rig.producer.fail(10, cascade=False)  # the old owner's records time out
    rig.reports()
    assert old.checkpoint == 0
    assert new.rewind_at is None and 0 not in rig.consumer.paused
    rig.settle()
    assert new.checkpoint == 10
    assert_complete(rig.copied(), log)


def test_delivery_failures_while_stopping_do_not_touch_the_closed_consumer() -> None:
    # A shutdown that closed the consumer before flushing would pause a closed consumer on a
    # failure reported in the flush, and crash.
    log = list(range(5))
    rig = Rig({0: log})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(2)
    rig.producer.on_flush = lambda p: p.fail()
    released = rig.pipeline.release(rig.state(1))
    rig.pipeline._stopping.set()
    rig.pipeline._shutdown()
    assert rig.consumer.closed and released.is_set()
    assert state.checkpoint == 2


def test_a_retriable_failure_resends_from_the_checkpoint_without_loss() -> None:
    log = list(range(8))
    rig = Rig({0: log})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(3)
    rig.producer.fail()  # 3-7 time out
    rig.reports()
    assert state.rewind_at is not None and 0 in rig.consumer.paused
    state.rewind_at = 0.0  # skip the back-off
    rig.settle()
    assert rig.copied() == log
    assert state.checkpoint == 8 and state.rewinds == 1


def test_a_missing_write_acl_waits_and_resumes_once_granted() -> None:
    # A refused ACL is fixed by an operator, not by restarting Strait; the partition
    # waits (state `retrying:`), loses nothing, and goes on from its checkpoint.
    log = list(range(6))
    rig = Rig({0: log})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(2)
    rig.producer.fail(code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    rig.reports()
    assert state.error is None and state.waiting is not None
    assert "no ACL allows this on the topic orders-copy" in state.waiting
    assert state.rewind_at is not None and 0 in rig.consumer.paused
    assert state.checkpoint == 2
    state.rewind_at = 0.0  # the ACL was granted; skip the back-off
    rig.settle()
    assert rig.copied() == log and state.checkpoint == 6 and state.waiting is None


def test_a_produce_call_refused_by_acl_waits_instead_of_failing() -> None:
    # librdkafka refuses produce() itself once it knows the topic is not writable for us.
    rig = Rig({0: list(range(3))})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.pipeline._run_commands()
    rig.pipeline._produce_error(state, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert state.error is None and state.waiting is not None and state.rewind_at is not None
    state.rewind_at = 0.0
    rig.settle()
    assert rig.copied() == [0, 1, 2] and state.waiting is None


def test_a_source_read_refused_by_acl_waits_instead_of_failing() -> None:
    rig = Rig({0: list(range(4))})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.pipeline._run_commands()
    rig.pipeline._on_fetch_error(
        FakeMessage(TOPIC, 0, -1, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),  # type: ignore[arg-type]
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
    )
    assert state.error is None and state.waiting is not None and "topic orders" in state.waiting
    state.rewind_at = 0.0
    rig.settle()
    assert rig.copied() == [0, 1, 2, 3] and state.waiting is None


@pytest.mark.parametrize("seed", range(40))
def test_random_interleavings_never_lose_a_record(seed: int) -> None:
    """Releases, re-adds, back-pressure, failures and source gaps in a seeded random order."""
    import random

    rng = random.Random(seed)
    logs = {p: sorted(rng.sample(range(400), 150)) for p in range(3)}
    rig = Rig(logs, capacity=rng.choice((5, 20, 200)))
    rig.consumer.batch_limit = rng.choice((3, 17, 100))
    states = {p: rig.state(p) for p in logs}
    for s in states.values():
        rig.pipeline.add(s, 0)
    released: dict[int, Any] = {}
    for _ in range(300):
        action = rng.random()
        if action < 0.5:
            rig.step()
        elif action < 0.75:
            rig.producer.ack(rng.randrange(1, 30))
        elif action < 0.8:
            rig.producer.fail(rng.randrange(1, 5))
            rig.reports()
            for s in states.values():
                if s.rewind_at is not None:
                    s.rewind_at = 0.0
        elif action < 0.9:
            p = rng.choice(list(logs))
            if p not in released:
                released[p] = (states[p], rig.pipeline.release(states[p]))
        else:
            for p, (old, done) in list(released.items()):
                if done.is_set():
                    states[p] = rig.state(p)
                    rig.pipeline.add(states[p], old.checkpoint or 0)
                    del released[p]
    for p, (old, _done) in released.items():
        while old.tracker is not None and old.tracker.in_flight:
            rig.producer.ack()
            rig.step()
        states[p] = rig.state(p)
        rig.pipeline.add(states[p], old.checkpoint or 0)
    rig.reports()
    for s in states.values():
        if s.rewind_at is not None:
            s.rewind_at = 0.0
    rig.settle(200)
    for p, log in logs.items():
        assert_complete(rig.copied(p), log)
        # Checkpoints land one past the last record (sources gaps at the end are skipped too).
        checkpoint = states[p].checkpoint
        assert checkpoint is not None and checkpoint >= log[-1] + 1
    assert GAP_UNEXPECTED not in rig.observer.gaps


def test_records_dropped_while_the_producer_lives_resend_and_then_name_the_deleted_topic() -> None:
    # librdkafka drops a partition's queued records with _DESTROY when the partition leaves its
    # metadata (the destination topic was deleted). That must not stop the partition with
    # "_DESTROY": the resend makes the producer say the topic does not exist.
    log = list(range(6))
    rig = Rig({0: log})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(2)
    rig.producer.fail(code=KafkaError._DESTROY)
    rig.reports()
    assert state.error is None and state.rewind_at is not None
    assert state.checkpoint == 2

    def gone(*_: Any, **__: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC))

    rig.producer.produce = gone  # type: ignore[method-assign]
    state.rewind_at = 0.0  # skip the back-off
    rig.step(3)
    assert state.error is not None and "does not exist" in state.error, state.error
    assert state.checkpoint == 2


def test_records_dropped_by_our_own_teardown_are_no_partition_failure() -> None:
    log = list(range(6))
    rig = Rig({0: log})
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(2)
    rig.producer.on_flush = lambda p: p.fail(code=KafkaError._DESTROY)
    rig.pipeline._stopping.set()
    rig.pipeline._shutdown()
    assert state.error is None and state.rewind_at is None
    assert state.checkpoint == 2  # nothing past what the destination acknowledged


def test_shutdown_closes_the_producer_after_dropping_what_the_flush_left() -> None:
    # An idle producer left to the garbage collector reconnects after its cluster went and
    # prints librdkafka's complaints on the terminal; close() itself would flush unbounded.
    calls: list[str] = []
    rig = Rig({0: list(range(4))})
    rig.producer.close = lambda: calls.append("close")  # type: ignore[attr-defined]
    rig.producer.purge = lambda: calls.append("purge")  # type: ignore[attr-defined]
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.producer.ack(1)  # 1-3 stay unacknowledged through the flush
    rig.pipeline._stopping.set()
    rig.pipeline._shutdown()
    assert calls == ["purge", "close"]
    assert state.error is None and state.checkpoint == 1


def test_a_refusal_in_the_middle_of_a_stretch_sends_the_records_before_it_once() -> None:
    # The fast path hands a whole stretch to produce() through map(); when produce() refuses
    # record 2 (a destination partition not in the producer's metadata yet), records 0 and 1 are
    # registered once, and record 2 goes through the per-record path, which refreshes and retries.
    log = list(range(6))
    rig = Rig({0: log})
    state = rig.state()
    real = rig.producer.produce
    refused: list[bytes] = []

    def produce(topic: str, value: bytes, *args: Any) -> None:
        if value == b"v2" and not refused:
            refused.append(value)
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        real(topic, value, *args)

    rig.producer.produce = produce  # type: ignore[method-assign]
    rig.pipeline.add(state, 0)
    rig.settle()
    assert refused == [b"v2"]
    assert rig.copied() == log
    assert state.error is None and state.checkpoint == 6


def test_a_destination_that_cannot_say_its_partitions_holds_the_record_without_stopping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The destination grew while a broker of it is down: the producer does not know the new
    # partition and the metadata refresh times out. The record waits and goes out once the
    # destination answers; the pipeline does not crash, nothing is skipped or failed.
    clock = [1000.0]
    monkeypatch.setattr(sending, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    log = list(range(4))
    rig = Rig({0: log})
    state = rig.state()
    real = rig.producer.produce
    known = [False]
    asked: list[float] = []

    def produce(topic: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        if not known[0]:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        real(topic, value, *args, **kwargs)

    def list_topics(*_: Any, **__: Any) -> None:
        asked.append(clock[0])
        if clock[0] < 1003.0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        known[0] = True

    rig.producer.produce = produce  # type: ignore[method-assign]
    rig.producer.list_topics = list_topics  # type: ignore[method-assign]
    rig.pipeline.add(state, 0)
    for _ in range(40):
        rig.step()
        rig.producer.ack()
        clock[0] += 0.1
    assert rig.copied() == log and state.error is None and state.checkpoint == 4
    # Asked again at most once per METADATA_RETRY_S while it got no answer.
    assert all(b - a >= sending.METADATA_RETRY_S for a, b in pairwise(asked))
    assert len(asked) >= 2


def test_records_without_a_timestamp_are_copied_with_the_producers_time() -> None:
    # A record of an old message format has no timestamp (type NOT_AVAILABLE): its copy gets 0,
    # which librdkafka replaces with the time of the produce() call.
    log = list(range(4))
    rig = Rig({0: log})
    fetched = rig.consumer.consume

    def consume(num: int, timeout: float) -> list[Message]:
        return [
            Message(topic=m.topic(), partition=m.partition(), offset=m.offset(), key=m.key(), value=m.value())
            for m in fetched(num, timeout)
        ]

    rig.consumer.consume = consume  # type: ignore[method-assign]
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    assert [(p.offset, p.timestamp) for p in rig.producer.pending] == [(o, 0) for o in log]
    rig.settle()
    assert rig.copied() == log
    assert state.checkpoint == 4
    assert rig.copied() == log
    assert state.checkpoint == 4


def test_a_partition_released_while_rewinding_is_fetched_when_added_again() -> None:
    log = list(range(10))
    rig = Rig({0: log})
    old = rig.state()
    rig.pipeline.add(old, 0)
    rig.step()
    rig.producer.ack(4)
    rig.producer.fail()  # 4-9 time out: the partition pauses until its rewind is due
    rig.reports()
    assert old.rewind_at is not None
    done = rig.pipeline.release(old)
    rig.step()
    assert done.is_set()
    new = rig.state()
    rig.pipeline.add(new, old.checkpoint or 0)
    rig.settle()
    assert new.checkpoint == 10
    assert_complete(rig.copied(), log)


def test_a_held_pipeline_fetches_nothing_new_but_finishes_what_it_fetched() -> None:
    log = list(range(10))
    rig = Rig({0: log[:5]}, capacity=1_000_000)
    state = rig.state()
    rig.pipeline.add(state, 0)
    rig.step()
    rig.pipeline.hold(True)
    rig.consumer.logs[0] += log[5:]
    rig.settle()
    assert rig.copied() == log[:5] and state.checkpoint == 5, "fetched while held"
    rig.pipeline.hold(False)
    rig.settle()
    assert rig.copied() == log and state.checkpoint == 10
