"""The exactly-once pipeline around in-memory clients: what commits, and what never may.

A transaction call that never returns (librdkafka #5456/#5511) must not hold partitions
forever; a partition abandoned and added again must not commit its records twice.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from strait.offsetmap import store
from strait.offsetmap.codec import decode, map_topic
from strait.offsetmap.runs import Run
from strait.offsetmap.translate import merge, translate
from strait.worker import transactional
from strait.worker.deadline import CallHung, DeadlineRunner
from strait.worker.pipeline import PartitionState, PipelineSettings
from strait.worker.task import PartitionTask
from strait.worker.transactional import TransactionalPipeline
from tests.unit.test_record_pipeline import TOPIC, FakeConsumer, FakeProducer


def test_the_runner_returns_results_and_raises_the_calls_errors() -> None:
    runner = DeadlineRunner("t")
    assert runner.call(lambda a, b: a + b, 1, 2, deadline_s=5) == 3
    with pytest.raises(ZeroDivisionError):
        runner.call(lambda: 1 / 0, deadline_s=5)
    runner.close()


def test_the_runner_gives_up_at_the_deadline_and_serves_the_next_call_on_a_fresh_thread() -> None:
    runner = DeadlineRunner("t")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(CallHung):
        runner.call(release.wait, deadline_s=0.2)
    assert time.monotonic() - started < 2 and runner.abandoned == 1
    assert runner.call(lambda: "next", deadline_s=5) == "next"
    release.set()
    runner.close()


class TxnProducer(FakeProducer):
    """The fake producer with a transactional API; send_offsets_to_transaction can hang."""

    def __init__(self, hang: threading.Event | None = None) -> None:
        super().__init__()
        self.hang = hang
        self.calls: list[str] = []
        self.committed: dict[int, list[int]] = {}  # what a read_committed reader sees

    def init_transactions(self, *_: Any) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, *_: Any) -> None:
        self.calls.append("send_offsets")
        if self.hang is not None:
            self.hang.wait()

    def commit_transaction(self, *_: Any) -> None:
        self.calls.append("commit")
        self.ack()
        for partition, offsets in self.destination.items():
            self.committed.setdefault(partition, []).extend(offsets)
        self.destination.clear()

    def abort_transaction(self, *_: Any) -> None:
        self.calls.append("abort")
        self.pending.clear()
        self.destination.clear()  # acknowledged records of an aborted transaction never show

    def flush(self, timeout: float = 0) -> int:
        self.ack()
        return 0


def _pipeline(consumer: FakeConsumer, producer: TxnProducer, **options: Any) -> TransactionalPipeline:
    # Commits at the interval only, unless a scenario asks for the early commit of a caught-up one.
    options.setdefault("transaction_linger_s", 3600.0)
    options.setdefault("settings", PipelineSettings(batch_size=1000))
    return TransactionalPipeline(
        transactional_id=lambda name: f"strait.r.w1.{name}",
        checkpoint_group="strait.r",
        name="realtime",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        consumer=consumer,
        producer=producer,
        **options,
    )


def _hung(
    monkeypatch: pytest.MonkeyPatch, stuck: TxnProducer, healthy: TxnProducer
) -> tuple[TransactionalPipeline, PartitionState]:
    """A pipeline copying five records with ``stuck``, replaced by ``healthy`` once a call hangs
    past a short deadline; the partition it copies."""
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), stuck)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: healthy)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    return pipeline, state


def _hand_over_completes(pipeline: TransactionalPipeline, state: PartitionState) -> None:
    done = pipeline.release(state)
    for _ in range(5):
        pipeline._step()
    assert done.is_set()


def test_a_hung_send_offsets_replaces_the_producer_and_resumes_from_the_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hang = threading.Event()
    stuck = TxnProducer(hang)
    healthy = TxnProducer()
    pipeline, state = _hung(monkeypatch, stuck, healthy)
    try:
        for _ in range(5):
            pipeline._step()
        assert "send_offsets" in stuck.calls and pipeline._producer is healthy
        assert state.checkpoint == 0 and state.error is None, "nothing of the stuck transaction may count"
        # The partition is not held by the stuck call: a hand-over completes.
        _hand_over_completes(pipeline, state)
    finally:
        hang.set()
    assert healthy.calls[0] == "init"


def test_after_a_hang_every_record_is_committed_once_by_the_new_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    hang = threading.Event()
    stuck, healthy = TxnProducer(hang), TxnProducer()
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), stuck)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: healthy)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    try:
        for _ in range(20):
            pipeline._step()
            time.sleep(0.01)
    finally:
        hang.set()
    assert healthy.committed.get(0) == [0, 1, 2, 3, 4]
    assert state.checkpoint == 5 and state.durable == 5


def test_a_partition_abandoned_and_added_again_never_commits_its_records_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker cut off from ZooKeeper abandons its partitions (the copier does not wait for
    # their release); when the same session comes back, the partition is added again from the
    # last committed checkpoint while the open transaction still holds records past it.
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = TxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0)  # only explicit commits
    first = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(first, 0)
    for _ in range(3):
        pipeline._step()
    assert producer.committed.get(0) == [0, 1, 2, 3, 4] and first.durable == 5
    consumer.logs[0] += list(range(5, 10))
    pipeline._step()  # 5..9 produced and acknowledged inside a transaction still open
    assert pipeline._txn_open and first.checkpoint == 5
    pipeline.release(first)  # abandoned: nobody waits for the release
    second = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(second, first.durable or 0)
    for _ in range(5):
        pipeline._step()
    assert producer.committed.get(0) == list(range(10)), "a record committed twice or lost"
    assert second.durable == 10


def test_an_abandoned_partition_aborts_its_open_transaction_before_its_abandon_completes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A release commits the open transaction; an abandon (the worker is cut off) must not: the
    # same worker may get the partition back and read its checkpoint before that commit lands.
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = ScriptedProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0)
    first = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(first, 0)
    for _ in range(3):
        pipeline._step()
    consumer.logs[0] += list(range(5, 10))
    pipeline._step()  # 5..9 acknowledged inside a transaction still open
    assert pipeline._txn_open and first.durable == 5
    settled = pipeline.abandon(first)
    assert settled is not None and not settled.is_set()
    pipeline._step()
    assert settled.is_set() and "abort-asked" in producer.calls
    for _ in range(3):
        pipeline._step()
    assert producer.committed.get(0) == [0, 1, 2, 3, 4], "an abandoned partition's records committed"
    second = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(second, 5)  # the checkpoint read after the abandon settled
    for _ in range(5):
        pipeline._step()
    assert producer.committed.get(0) == list(range(10)) and second.durable == 10


def test_an_abandon_while_a_commit_is_unanswered_completes_only_once_the_outcome_is_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    first, second = AnsweredLate(), ScriptedProducer()
    ready = threading.Event()
    monkeypatch.setattr(second, "init_transactions", lambda *_: ready.wait(5) or second.calls.append("init"))
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, first, transaction_interval_s=3600.0)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: second)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    pipeline._step()  # the commit happens on the destination; its answer is a timeout
    settled = pipeline.abandon(state)
    assert settled is not None
    pipeline._run_commands()
    pipeline._finish_releases()
    assert not settled.is_set(), "abandoned before the unanswered commit was settled"
    ready.set()
    pipeline._step()
    assert settled.is_set() and "abort-asked" not in first.calls
    assert second.destination == {} and second.committed == {}, "resent from memory"


class ScriptedProducer(TxnProducer):
    """A transactional fake whose calls raise the errors a test queues for them."""

    def __init__(self, hang: threading.Event | None = None) -> None:
        super().__init__()
        self.errors: dict[str, list[KafkaError]] = {}
        self.commit_hang = hang

    def _raise(self, call: str) -> None:
        queued = self.errors.get(call)
        if queued:
            raise KafkaException(queued.pop(0))

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self._raise("send_offsets")
        super().send_offsets_to_transaction(*args)

    def commit_transaction(self, *args: Any) -> None:
        self.calls.append("commit-asked")
        if self.commit_hang is not None:
            self.commit_hang.wait()
        self._raise("commit")
        super().commit_transaction(*args)

    def abort_transaction(self, *args: Any) -> None:
        self.calls.append("abort-asked")
        self._raise("abort")
        super().abort_transaction(*args)


def _timeout() -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)


def test_a_commit_that_timed_out_is_asked_again_without_sending_offsets_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # librdkafka refuses send_offsets_to_transaction once a commit was asked for: sending them
    # again on every retry left the pipeline retrying forever.
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = ScriptedProducer()
    producer.errors["commit"] = [_timeout()]
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), producer)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(6):
        pipeline._step()
    assert producer.calls.count("send_offsets") == 1, producer.calls
    assert producer.calls.count("commit-asked") == 2 and "abort-asked" not in producer.calls
    assert producer.committed.get(0) == [0, 1, 2, 3, 4] and state.durable == 5


def test_an_abort_that_timed_out_is_retried_as_an_abort(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = ScriptedProducer()
    producer.errors["abort"] = [_timeout()]
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    pipeline._step()  # 0..4 copied and committed with the start
    consumer.logs[0] += list(range(5, 10))
    pipeline._step()  # 5..9 produced inside an open transaction
    assert pipeline._txn_open and producer.pending
    producer.fail()
    pipeline._abort_needed = True
    asked = len(producer.calls)
    for _ in range(3):
        pipeline._step()
    later = producer.calls[asked:]
    assert later[:2] == ["abort-asked", "abort-asked"], later
    assert "send_offsets" not in later[: later.index("abort") + 1]
    assert producer.committed.get(0) == [0, 1, 2, 3, 4] and state.durable == 5


def test_a_commit_that_never_returns_holds_its_partitions_until_the_outcome_is_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The commit may have happened: resending from the in-memory checkpoint could copy the
    # transaction's records twice, and a new owner starting before the old transaction is
    # settled could too. The partition is held until the new producer took the id over, then
    # stops with a fenced: error so the worker restarts it from the destination's checkpoint.
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    hang = threading.Event()
    stuck = ScriptedProducer(hang)
    replacement = ScriptedProducer()
    ready = threading.Event()
    monkeypatch.setattr(replacement, "init_transactions", lambda *_: ready.wait(5) or replacement.calls.append("init"))
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), stuck, transaction_interval_s=0.0)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: replacement)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    try:
        pipeline._step()  # commit of the start offset hangs
        assert pipeline._producer is replacement and state.error is None
        done = pipeline.release(state)
        pipeline._run_commands()
        pipeline._finish_releases()
        assert not done.is_set(), "released before the hung transaction was settled"
        ready.set()
        pipeline._step()
        assert done.is_set() and (state.error or "").startswith("fenced:")
        assert replacement.destination == {} and replacement.committed == {}, "resent from memory"
    finally:
        hang.set()


class AnsweredLate(ScriptedProducer):
    """Its first commit happens on the destination, but the call reports a timeout."""

    def commit_transaction(self, *args: Any) -> None:
        first = "commit" not in self.calls
        super().commit_transaction(*args)
        if first:
            raise KafkaException(_timeout())


def test_an_abort_due_while_a_commit_is_unanswered_waits_for_the_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    # The commit timed out and is to be asked again; meanwhile a rewind wants the transaction
    # aborted. Had it committed, resending from the checkpoint seen committed last would copy
    # its records twice: the partitions wait for a new producer to settle it, then stop, and
    # the worker starts them again from the destination's checkpoint.
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    first, second = AnsweredLate(), ScriptedProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, first, transaction_interval_s=3600.0)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: second)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    pipeline._step()  # 0..4 copied: the commit happens, its answer is a timeout
    assert first.committed.get(0) == [0, 1, 2, 3, 4] and state.durable == 0
    pipeline._abort_needed = True  # a rewind, before the commit is asked again
    for _ in range(3):
        pipeline._step()
    assert "abort-asked" not in first.calls, first.calls
    assert (state.error or "").startswith("fenced:") and state.checkpoint == 0
    assert second.destination == {} and second.committed == {}, "resent from the checkpoint seen committed"


def test_a_call_refused_in_the_producers_state_replaces_the_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    first, second = ScriptedProducer(), ScriptedProducer()
    first.errors["send_offsets"] = [KafkaError(KafkaError._STATE, "Operation not valid in state Ready")]
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), first, transaction_interval_s=0.0)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: second)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(8):
        pipeline._step()
    assert pipeline._producer is second and second.calls[0] == "init"
    assert second.committed.get(0) == [0, 1, 2, 3, 4] and state.durable == 5 and state.error is None


def test_a_fenced_pipeline_takes_no_partition_back_by_a_move(monkeypatch: pytest.MonkeyPatch) -> None:
    # A frozen worker that wakes up may move a partition between its own pipelines; a move
    # that re-created the fenced producer would write beside the partition's new owner. Only a
    # fresh assignment takes a fenced id back.
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    fenced, fresh = TxnProducer(), TxnProducer()
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), fenced)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: fresh)
    pipeline._fence("_FENCED: fenced by a newer instance")
    moved = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(moved, 0, move=True)
    pipeline._step()
    assert (moved.error or "").startswith("fenced:") and pipeline._producer is fenced
    assigned = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(assigned, 0)
    pipeline._step()
    assert pipeline._producer is fresh and assigned.error is None


def test_a_fenced_pipeline_takes_nothing_back_without_a_confirmed_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    confirmed = False
    fenced, fresh = TxnProducer(), TxnProducer()
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), fenced, lease=lambda: confirmed)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: fresh)
    pipeline._fence("_FENCED: fenced by a newer instance")
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    pipeline._step()
    assert (state.error or "").startswith("fenced:") and pipeline._producer is fenced
    confirmed = True
    again = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(again, 0)
    pipeline._step()
    assert pipeline._producer is fresh and again.error is None


def test_a_replacement_producer_takes_the_id_only_with_a_confirmed_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    # A hung call can be replaced just after the worker's session ended: a new producer taking
    # the id then would copy on beside the partition's new owner.
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    confirmed = True
    hang = threading.Event()
    stuck, replacement = TxnProducer(hang), TxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, stuck, lease=lambda: confirmed, transaction_interval_s=0.0)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: replacement)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    try:
        pipeline._step()  # send_offsets hangs; the producer is replaced
        assert pipeline._producer is replacement
        confirmed = False
        for _ in range(3):
            pipeline._step()
        assert replacement.calls == [], "took the id without a lease"
        confirmed = True
        for _ in range(10):
            pipeline._step()
            time.sleep(0.01)
        assert replacement.calls[0] == "init" and replacement.committed.get(0) == [0, 1, 2, 3, 4]
    finally:
        hang.set()


class MapTxnProducer(ScriptedProducer):
    """Also takes the offset map's records: held until flushed, read only once committed; and
    remembers which destination offset each committed copy of partition 0 has."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse_map = False
        self.map_pending: list[tuple[bytes, Any]] = []
        self.map_open: list[bytes] = []
        self.map_committed: list[bytes] = []
        self.open_copies: dict[int, int] = {}  # destination offset -> source offset
        self.committed_copies: dict[int, int] = {}

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes,
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """confluent-kafka's positional order, as the copy loop's fast path calls it."""
        if topic == map_topic("r"):
            self.map_pending.append((value, on_delivery))
        else:
            super().produce(topic, value, key, partition, on_delivery, callback, timestamp, headers)

    def ack(self, count: int | None = None) -> None:
        start, seen = self.log_end.get(0, 0), len(self.destination.get(0, []))
        super().ack(count)
        for i, source in enumerate(self.destination.get(0, [])[seen:]):
            self.open_copies[start + i] = source

    def flush(self, timeout: float = 0) -> int:
        for value, delivered in self.map_pending:
            if self.refuse_map:
                delivered(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), None)
            else:
                self.map_open.append(value)
                delivered(None, None)
        self.map_pending.clear()
        return super().flush(timeout)

    def commit_transaction(self, *args: Any) -> None:
        super().commit_transaction(*args)
        self.committed_copies.update(self.open_copies)
        self.map_committed += self.map_open
        self.open_copies, self.map_open = {}, []

    def abort_transaction(self, *args: Any) -> None:
        super().abort_transaction(*args)
        self.open_copies, self.map_open, self.map_pending = {}, [], []

    def runs(self) -> list[Run]:
        return merge(decode(value).run for value in self.map_committed)


def _abortable() -> KafkaError:
    return KafkaError(KafkaError._STATE, "abortable", txn_requires_abort=True)


def test_the_map_holds_runs_of_committed_copies_only_written_in_their_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    monkeypatch.setattr(store, "ensure_map_topic", lambda *_: True)
    producer = MapTxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0, map_route="r")
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    pipeline._step()  # 0..4 copied and committed with the start, their run with them
    assert producer.runs() == [Run(0, 0, 5)]
    consumer.logs[0] += list(range(5, 10))
    pipeline._step()
    producer.ack()  # 5..9 acknowledged at 5..9 inside the open transaction: one run 0..9 so far
    producer.errors["send_offsets"] = [_abortable()]  # the transaction aborts after its runs went in
    pipeline._commit_soon = True
    pipeline._step()
    assert producer.calls.count("abort-asked") == 1 and producer.runs() == [Run(0, 0, 5)]
    for _ in range(3):  # resent from the checkpoint, committed
        pipeline._commit_soon = True
        pipeline._step()
    assert producer.committed.get(0) == list(range(10)) and state.durable == 10
    assert producer.committed_copies == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 10: 5, 11: 6, 12: 7, 13: 8, 14: 9}
    runs = producer.runs()
    assert runs == [Run(0, 0, 5), Run(5, 10, 5)], "a run maps the aborted copies at 5..9"
    for source in range(10):
        assert translate(runs, source).destination == {s: d for d, s in producer.committed_copies.items()}[source]


def test_a_map_that_cannot_be_written_costs_one_abort_not_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    monkeypatch.setattr(store, "ensure_map_topic", lambda *_: True)
    producer = MapTxnProducer()
    producer.refuse_map = True
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), producer, transaction_interval_s=0.0, map_route="r")
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(6):
        pipeline._step()
    assert producer.committed.get(0) == [0, 1, 2, 3, 4] and state.durable == 5
    assert producer.map_committed == [] and pipeline._map is not None and pipeline._map.failures >= 1


def test_a_route_without_a_map_keeps_no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = MapTxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=0.0)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(4):
        pipeline._step()
    assert state.durable == 5 and producer.map_committed == []
    assert state.runs.take() == [], "runs piled up with nobody to publish them"


class BrokenFlushProducer(TxnProducer):
    """A producer fenced while flush() serves its reports: confluent-kafka 2.16 then ends the
    call with a bare SystemError (as for a worker woken from SIGSTOP past its session)."""

    def flush(self, timeout: float = 0) -> int:
        raise SystemError("<built-in method flush of Producer object> returned NULL without setting an exception")


def test_a_bare_system_error_from_flush_fences_the_pipeline_instead_of_killing_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    broken, fresh = BrokenFlushProducer(), TxnProducer()
    pipeline = _pipeline(FakeConsumer({0: list(range(5))}), broken)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: fresh)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(5):
        pipeline._step()  # the commit's flush fails: it must not raise out of the loop's turn
    assert pipeline._fenced is not None and (state.error or "").startswith("fenced:")
    assert broken.committed == {} and state.durable == 0  # nothing of the transaction counts
    # A fresh assignment (the worker registered again) takes the id back with a new producer.
    again = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(again, 0)
    for _ in range(8):
        pipeline._step()
    assert pipeline._producer is fresh and again.error is None and fresh.committed.get(0) == [0, 1, 2, 3, 4]


class HangingFlushProducer(TxnProducer):
    """flush() blocks (until released) once records are in the transaction."""

    def __init__(self, hang: threading.Event) -> None:
        super().__init__()
        self.flush_hang = hang

    def flush(self, timeout: float = 0) -> int:
        if self.pending:
            self.flush_hang.wait()
        return super().flush(timeout)


def test_a_flush_that_never_returns_inside_a_transaction_replaces_the_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hang = threading.Event()
    stuck, healthy = HangingFlushProducer(hang), TxnProducer()
    pipeline, state = _hung(monkeypatch, stuck, healthy)
    try:
        for _ in range(5):
            pipeline._step()
        assert pipeline._producer is healthy and stuck.committed == {}
        # The partition is not held by the stuck flush: a hand-over completes.
        _hand_over_completes(pipeline, state)
    finally:
        hang.set()
    # Every record committed once, by the new producer (the stuck one's transaction counted for nothing).
    assert healthy.calls[0] == "init" and healthy.committed.get(0) == [0, 1, 2, 3, 4]


class HangsIn(TxnProducer):
    """One transaction call (``call``: init, begin or abort) never returns until ``hang`` is set."""

    def __init__(self, call: str, hang: threading.Event) -> None:
        super().__init__()
        self.hang_call, self.hang_released = call, hang

    def _hangs(self, call: str) -> bool:
        if call != self.hang_call:
            return False
        self.calls.append(call)
        self.hang_released.wait()
        return True

    def init_transactions(self, *args: Any) -> None:
        if not self._hangs("init"):
            super().init_transactions(*args)

    def begin_transaction(self) -> None:
        if not self._hangs("begin"):
            super().begin_transaction()

    def abort_transaction(self, *args: Any) -> None:
        if not self._hangs("abort"):
            super().abort_transaction(*args)


@pytest.mark.parametrize(
    ("call", "stuck_calls"),
    [
        # After a hung flush is replaced, the new producer's init is the next call that meets
        # the same coordinator; without a deadline it would hang the pipeline, which then serves
        # no release again (revokes held with nothing unacknowledged).
        ("init", ["init"]),
        # librdkafka waits for its main thread's answer to begin_transaction without a bound.
        ("begin", ["init", "begin"]),
    ],
)
def test_an_init_or_begin_that_never_returns_is_given_up_for_a_new_producer(
    monkeypatch: pytest.MonkeyPatch, call: str, stuck_calls: list[str]
) -> None:
    hang = threading.Event()
    stuck, healthy = HangsIn(call, hang), TxnProducer()
    pipeline, state = _hung(monkeypatch, stuck, healthy)
    try:
        for _ in range(10):
            pipeline._step()
            time.sleep(0.01)
        assert stuck.calls == stuck_calls and pipeline._producer is healthy
        _hand_over_completes(pipeline, state)  # a released partition ends with a commit
    finally:
        hang.set()
    assert healthy.committed.get(0) == [0, 1, 2, 3, 4] and state.durable == 5


def test_an_abort_that_never_returns_replaces_the_producer_and_resumes_from_the_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "HUNG_AFTER_S", 0.2)
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    hang = threading.Event()
    stuck, healthy = HangsIn("abort", hang), TxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, stuck, transaction_interval_s=3600.0)
    monkeypatch.setattr(pipeline, "_make_producer", lambda _props: healthy)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    try:
        pipeline._step()  # 0..4 copied and committed with the start
        consumer.logs[0] += list(range(5, 10))
        pipeline._step()  # 5..9 inside an open transaction
        pipeline._abort_needed = True
        pipeline._step()  # the abort hangs: a new producer
        assert pipeline._producer is healthy and state.durable == 5
        for _ in range(5):
            pipeline._step()
            time.sleep(0.01)
        _hand_over_completes(pipeline, state)  # a released partition ends with a commit
    finally:
        hang.set()
    assert stuck.committed.get(0) == [0, 1, 2, 3, 4]
    assert healthy.committed.get(0) == [5, 6, 7, 8, 9], "5..9 copied again by the new producer, once"
    assert state.durable == 10


def test_a_caught_up_transaction_commits_once_it_lingered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = TxnProducer()
    consumer = FakeConsumer({0: list(range(5))})
    pipeline = _pipeline(consumer, producer, transaction_interval_s=3600.0, transaction_linger_s=0.0)
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(4):
        pipeline._step()
    # Every record fetched and sent, the consumer had no more: no hour-long wait for the interval.
    assert state.durable == 5 and producer.committed == {0: [0, 1, 2, 3, 4]}


def test_a_transaction_lingers_while_the_consumer_hands_out_full_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactional, "group_metadata", lambda *_: object())
    producer = TxnProducer()
    consumer = FakeConsumer({0: list(range(100))})
    pipeline = _pipeline(
        consumer,
        producer,
        settings=PipelineSettings(batch_size=1),  # every fetch a full batch: more may be waiting
        transaction_interval_s=3600.0,
        transaction_linger_s=0.0,
    )
    state = PartitionState(PartitionTask("r", TOPIC, 0, f"{TOPIC}-copy"))
    pipeline.add(state, 0)
    for _ in range(6):
        pipeline._step()
    # (The partition's start commits at once, with what the same turn sent.) The rest waits for
    # the interval: each fetch was full, so more may be ready.
    assert state.durable is not None and state.durable <= 1 and len(producer.committed.get(0, [])) <= 1
    assert pipeline._txn_open
