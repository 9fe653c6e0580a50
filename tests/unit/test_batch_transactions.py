"""The transaction model for raw batches: which request is due, given the answers so far.

A generated run answers the model's requests in any order with errors of every kind (and lets
some of them time out), and checks each request as the model sends it: no Produce to a
partition before it was added in the transaction, sequences contiguous per partition within an
epoch (a retry keeps its sequence), nothing after the session died, EndTxn only once every
Produce was answered (for a commit: appended), and every request with a deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from strait.worker.batch.sequences import ProducerIdentity
from strait.worker.batch.transactions import (
    CONCURRENT_BACKOFF_S,
    GROUP_COORDINATOR,
    Answer,
    Key,
    Kind,
    Phase,
    ProducerFenced,
    Request,
    SessionDead,
    TransactionAbortable,
    TransactionError,
    TransactionModel,
)

TIMEOUT = 5.0
PARTITIONS: list[Key] = [("t", 0), ("t", 1), ("u", 0)]


def model(**options: float) -> TransactionModel:
    return TransactionModel("txn", transaction_timeout_ms=60_000, request_timeout_s=TIMEOUT, **options)  # type: ignore[arg-type]


def ok(request: Request, epoch: int = 0) -> Answer:
    """The answer of a broker that accepts ``request``."""
    if request.kind is Kind.FIND_COORDINATOR:
        return Answer(node=1 if request.coordinator_type != GROUP_COORDINATOR else 2)
    if request.kind is Kind.INIT_PRODUCER_ID:
        return Answer(producer=ProducerIdentity(7, epoch))
    return Answer()


def run_ok(m: TransactionModel, now: float = 0.0, answer: dict[Kind, Answer] | None = None) -> list[Request]:
    """Answer everything the model sends with success until it sends nothing more."""
    sent: list[Request] = []
    epoch = 0
    for _ in range(100):
        due = m.due(now)
        if not due:
            return sent
        for r in due:
            sent.append(r)
            if r.kind is Kind.INIT_PRODUCER_ID:
                epoch += 1
            m.answered(r.id, (answer or {}).get(r.kind, ok(r, epoch)), now)
    raise AssertionError("the model never settles")


def phase(m: TransactionModel) -> Phase:
    """The model's phase, read anew (the calls in between change it)."""
    return m.phase


def kinds(requests: list[Request]) -> list[str]:
    return [r.kind.value for r in requests]


# -- plain runs ----------------------------------------------------------------------------


def test_init_then_one_transaction_in_order() -> None:
    m = model()
    assert kinds(run_ok(m)) == ["FindCoordinator", "InitProducerId"]
    assert phase(m) is Phase.READY and m.producer == ProducerIdentity(7, 1)
    m.begin()
    assert m.write(("t", 0), 3, "a") == 0
    assert m.write(("t", 0), 2, "b") == 3
    assert m.write(("t", 1), 4, "c") == 0
    m.send_offsets("g", {("t", 0): 42})
    assert m.unacknowledged == 3
    m.commit()
    sent = run_ok(m)
    # Each round of answers: one batch per partition until the partition appended one.
    assert kinds(sent) == [
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "Produce",
        "Produce",
        "FindCoordinator",  # of the group
        "Produce",
        "TxnOffsetCommit",
        "EndTxn",
    ]
    assert sent[0].partitions == (("t", 0), ("t", 1)) and sent[0].node == 1
    assert sent[6].node == 2 and sent[6].offsets == ((("t", 0), 42),)
    assert [(r.key, r.base_sequence, r.payload) for r in sent if r.kind is Kind.PRODUCE] == [
        (("t", 0), 0, "a"),
        (("t", 1), 0, "c"),
        (("t", 0), 3, "b"),
    ]
    assert sent[-1].commit and phase(m) is Phase.READY and m.transactions == 1 and m.unacknowledged == 0


def test_sequences_continue_across_transactions_of_an_epoch() -> None:
    m = model()
    run_ok(m)
    for expected in (0, 5):
        m.begin()
        assert m.write(("t", 0), 5) == expected
        m.commit()
        run_ok(m)
    assert m.producer == ProducerIdentity(7, 1)


def test_a_transaction_that_sent_nothing_ends_without_end_txn() -> None:
    m = model()
    run_ok(m)
    m.begin()
    m.commit()
    assert m.due(0.0) == [] and phase(m) is Phase.READY and m.transactions == 1
    m.begin()
    m.abort()
    assert m.due(0.0) == [] and phase(m) is Phase.READY


def test_an_abort_renews_the_epoch_with_the_current_producer() -> None:
    m = model()
    run_ok(m)
    m.begin()
    m.write(("t", 0), 5)
    assert kinds(m.due(0.0)) == ["AddPartitionsToTxn"]
    m.abort()  # before the partition was added: its batch is dropped unsent
    (add,) = m.in_flight()
    m.answered(add.id, Answer(), 0.0)
    (end,) = m.due(0.0)
    assert end.kind is Kind.END_TXN and not end.commit
    m.answered(end.id, Answer(), 0.0)
    assert phase(m) is Phase.INITIALIZING
    (init,) = m.due(0.0)
    assert init.kind is Kind.INIT_PRODUCER_ID and init.producer == ProducerIdentity(7, 1)
    m.answered(init.id, Answer(producer=ProducerIdentity(7, 2)), 0.0)
    m.begin()
    assert m.write(("t", 0), 5) == 0


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "first_s"), [(14, 0.5), (51, CONCURRENT_BACKOFF_S)])
def test_load_in_progress_and_concurrent_transactions_are_retried_after_a_backoff(code: int, first_s: float) -> None:
    """CONCURRENT_TRANSACTIONS (the last transaction's markers not all written yet) lasts a few
    milliseconds: its first retry comes sooner than the configured backoff, and each next one
    twice as late."""
    m = model(retry_backoff_s=0.5)
    (find,) = m.due(0.0)
    m.answered(find.id, ok(find), 0.0)
    (init,) = m.due(0.0)
    m.answered(init.id, Answer(error=code), 0.0)
    assert m.due(first_s / 2) == [] and m.next_wakeup(first_s / 2) == first_s
    (again,) = m.due(first_s)
    assert again.kind is Kind.INIT_PRODUCER_ID
    m.answered(again.id, Answer(error=code), first_s)
    assert m.due(first_s * 2.5) == [] and m.next_wakeup(first_s) == pytest.approx(first_s * 3)


def test_not_coordinator_looks_the_coordinator_up_again() -> None:
    m = model(retry_backoff_s=0.0)
    run_ok(m)
    m.begin()
    m.write(("t", 0), 1)
    (add,) = m.due(0.0)
    m.answered(add.id, Answer(errors={("t", 0): 16}), 0.0)
    assert kinds(m.due(0.0)) == ["FindCoordinator"]


def test_a_request_without_answer_by_its_deadline_goes_again() -> None:
    m = model(retry_backoff_s=0.0)
    (find,) = m.due(0.0)
    assert find.deadline == TIMEOUT and m.next_wakeup(0.0) == TIMEOUT
    m.expire(TIMEOUT - 0.1)
    assert m.due(1.0) == []
    m.expire(TIMEOUT)
    (again,) = m.due(TIMEOUT)
    assert again.kind is Kind.FIND_COORDINATOR and again.id != find.id
    m.answered(find.id, ok(find), TIMEOUT)  # the late answer of the first one is ignored
    assert [r.id for r in m.in_flight()] == [again.id]


@pytest.mark.parametrize("code", [90, 47])
def test_fenced_on_produce_kills_the_session(code: int) -> None:
    m = model()
    run_ok(m)
    m.begin()
    m.write(("t", 0), 1)
    m.write(("t", 0), 1)
    run_ok(m, answer={Kind.PRODUCE: Answer(error=code)})
    assert phase(m) is Phase.DEAD and isinstance(m.failure, ProducerFenced)
    assert m.due(100.0) == [] and m.in_flight() == []
    with pytest.raises(ProducerFenced):
        m.commit()
    with pytest.raises(ProducerFenced):
        m.begin()


def test_fenced_on_end_txn_kills_the_session() -> None:
    m = model()
    run_ok(m)
    m.begin()
    m.write(("t", 0), 1)
    m.commit()
    run_ok(m, answer={Kind.END_TXN: Answer(error=90)})
    assert isinstance(m.failure, ProducerFenced)


def test_transactional_id_not_authorized_kills_the_session() -> None:
    m = model()
    (find,) = m.due(0.0)
    m.answered(find.id, Answer(error=53), 0.0)
    assert phase(m) is Phase.DEAD and isinstance(m.failure, SessionDead)


def test_a_batch_refused_for_good_makes_the_transaction_abortable() -> None:
    m = model()
    run_ok(m)
    m.begin()
    m.write(("t", 0), 1)
    m.commit()
    run_ok(m, answer={Kind.PRODUCE: Answer(error=10)})  # MESSAGE_TOO_LARGE
    assert phase(m) is Phase.OPEN and isinstance(m.failure, TransactionAbortable)
    with pytest.raises(TransactionAbortable):
        m.commit()
    m.abort()
    sent = run_ok(m)
    assert kinds(sent) == ["EndTxn", "InitProducerId"] and not sent[0].commit
    assert phase(m) is Phase.READY and m.failure is None


def test_out_of_order_behind_a_retried_batch_is_sent_again_in_order() -> None:
    m = model(retry_backoff_s=0.0)
    run_ok(m)
    m.begin()
    for _ in range(3):
        m.write(("t", 0), 2)
    (add,) = m.due(0.0)
    m.answered(add.id, Answer(), 0.0)
    (first,) = m.due(0.0)
    m.answered(first.id, Answer(), 0.0)  # the partition appended one: more in flight now
    second, third = m.due(0.0)
    m.answered(second.id, Answer(error=6), 0.0)  # NOT_LEADER_OR_FOLLOWER
    m.answered(third.id, Answer(error=45), 0.0)
    again = m.due(0.0)
    assert [r.base_sequence for r in again] == [2, 4]


# -- generated runs ------------------------------------------------------------------------

PRODUCE_CODES = [0] * 12 + [6, 7, 46, 45, 19, 90, 47, 10, 48]
COORDINATOR_CODES = [0] * 12 + [14, 51, 16, 15, 90, 47, 53, 29, 30, 48]


@dataclass
class Broker:
    """What the harness knows of the model's requests: answered ones, added partitions, sequences."""

    now: float = 0.0
    epoch: int = 0
    in_flight: dict[int, Request] = field(default_factory=dict)
    added: set[Key] = field(default_factory=set)
    written: list[Key] = field(default_factory=list)
    appended: dict[Key, set[int]] = field(default_factory=dict)
    sequences: dict[tuple[ProducerIdentity, Key], dict[int, int]] = field(default_factory=dict)
    dead_at: int | None = None


def check_sent(m: TransactionModel, b: Broker, requests: list[Request], step: int) -> None:
    for r in requests:
        assert b.dead_at is None, "a request after the session died"
        assert r.deadline == b.now + TIMEOUT, "every request has its deadline"
        if r.kind is Kind.PRODUCE:
            assert r.key in b.added, f"Produce to {r.key} before it was added"
            assert r.producer is not None and r.key is not None
            seqs = b.sequences.setdefault((r.producer, r.key), {})
            if r.base_sequence in seqs:
                assert seqs[r.base_sequence] == r.record_count, "a retry keeps its batch"
            else:
                expected = max((s + n for s, n in seqs.items()), default=0)
                assert r.base_sequence == expected, f"{r.key}: sequence {r.base_sequence}, expected {expected}"
                seqs[r.base_sequence] = r.record_count
        if r.kind is Kind.END_TXN:
            assert not any(x.kind is Kind.PRODUCE for x in b.in_flight.values()), "EndTxn with a Produce in flight"
            if r.commit:
                for key in b.written:
                    assert b.appended.get(key), f"commit before {key} appended"
        b.in_flight[r.id] = r


def answer_one(m: TransactionModel, b: Broker, data: st.DataObject) -> None:
    request = data.draw(st.sampled_from(sorted(b.in_flight.values(), key=lambda r: r.id)))
    action = data.draw(st.sampled_from(["answer"] * 8 + ["fail", "timeout"]))
    if action == "timeout":
        b.now = max(b.now, request.deadline)
        m.expire(b.now)
        for r in [r for r in b.in_flight.values() if r.deadline <= b.now]:
            del b.in_flight[r.id]
        return
    del b.in_flight[request.id]
    if action == "fail":
        m.failed(request.id, b.now, "connection lost")
        return
    codes = PRODUCE_CODES if request.kind is Kind.PRODUCE else COORDINATOR_CODES
    code = data.draw(st.sampled_from(codes))
    if code == 0 or (request.kind is Kind.PRODUCE and code == 46):
        if request.kind is Kind.ADD_PARTITIONS:
            b.added.update(request.partitions)
        if request.kind is Kind.PRODUCE and request.key is not None:
            b.appended.setdefault(request.key, set()).add(request.base_sequence)
        if request.kind is Kind.INIT_PRODUCER_ID:
            b.epoch += 1
            m.answered(request.id, ok(request, b.epoch), b.now)
        else:
            m.answered(request.id, ok(request) if code == 0 else Answer(error=code), b.now)
    elif request.kind in (Kind.ADD_PARTITIONS, Kind.TXN_OFFSET_COMMIT):
        keys = request.partitions or tuple(k for k, _ in request.offsets)
        m.answered(request.id, Answer(errors={k: code for k in keys}), b.now)
    else:
        m.answered(request.id, Answer(error=code), b.now)


def settle(
    m: TransactionModel, b: Broker, data: st.DataObject, until: set[Phase], steps: int, idle: bool = False
) -> int:
    """Drive the model with generated answers until its phase is in ``until`` (or dead), or with
    ``idle`` until nothing is in flight."""
    for _ in range(400):
        if phase(m) in until or phase(m) is Phase.DEAD:
            break
        if phase(m) is Phase.OPEN and m.failure is not None:
            m.abort()
        sent = m.due(b.now)
        check_sent(m, b, sent, steps)
        steps += 1
        if phase(m) is Phase.DEAD:
            b.dead_at = steps
            assert m.in_flight() == []
            break
        if (idle or phase(m) in until) and not b.in_flight:
            break
        if b.in_flight:
            assert m.next_wakeup(b.now) is not None, "a request in flight without a deadline"
            answer_one(m, b, data)
        else:
            wake = m.next_wakeup(b.now)
            assert wake is not None, f"nothing in flight and nothing to wait for in {phase(m)}"
            b.now = wake
        if phase(m) is Phase.DEAD:
            b.dead_at = steps
            b.in_flight.clear()
    return steps


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_answer_sequences_keep_the_invariants(data: st.DataObject) -> None:
    m = model(retry_backoff_s=0.1, max_backoff_s=0.4)
    b = Broker()
    steps = settle(m, b, data, {Phase.READY}, 0)
    for _ in range(data.draw(st.integers(1, 3))):
        if phase(m) is Phase.DEAD:
            break
        m.begin()
        b.added, b.written, b.appended = set(), [], {}
        for _ in range(data.draw(st.integers(0, 6))):
            key = data.draw(st.sampled_from(PARTITIONS))
            m.write(key, data.draw(st.integers(1, 5)))
            b.written.append(key)
            if data.draw(st.booleans()):
                steps = settle(m, b, data, set(), steps, idle=True)  # answers between writes
                if phase(m) is not Phase.OPEN or m.failure is not None:
                    break
        if phase(m) is Phase.OPEN and m.failure is None:
            if data.draw(st.booleans()):
                m.send_offsets("g", {PARTITIONS[0]: data.draw(st.integers(0, 100))})
            if data.draw(st.booleans()):
                m.commit()
            else:
                m.abort()
        if phase(m) is not Phase.DEAD:
            steps = settle(m, b, data, {Phase.READY}, steps)
        assert phase(m) in (Phase.READY, Phase.DEAD), f"the transaction never ended ({phase(m)})"
        event(f"{'dead' if phase(m) is Phase.DEAD else 'ended'}, {m.transactions} transactions")
        if phase(m) is Phase.DEAD:
            assert isinstance(m.failure, SessionDead)
            assert m.due(b.now + 100) == []
            with pytest.raises(TransactionError):
                m.begin()
