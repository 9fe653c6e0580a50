"""Which fetched batches are produced (strait.worker.batch.select): fetch offset, control
batches, aborted transactions under read_committed, empty batches."""

from __future__ import annotations

from strait.worker.batch.records import split_batches
from strait.worker.batch.select import AbortedTransaction, Action, select_batches
from tests.unit.test_batch_records import build, control_batch

ABORT, COMMIT = 0, 1


def actions(blob: bytes, fetch_offset: int, **kw: object) -> list[tuple[int, Action]]:
    selection = select_batches(split_batches(blob).batches, fetch_offset, **kw)  # type: ignore[arg-type]
    return [(d.batch.base_offset, d.action) for d in selection.decisions]


def test_plain_batches_from_the_fetch_offset() -> None:
    blob = build(0, 5) + build(5, 5) + build(10, 5)
    assert actions(blob, 5, read_committed=False) == [
        (0, Action.BELOW_FETCH_OFFSET),
        (5, Action.PRODUCE),
        (10, Action.PRODUCE),
    ]
    selection = select_batches(split_batches(blob).batches, 5, read_committed=False)
    assert selection.next_fetch_offset == 15
    assert [b.base_offset for b in selection.to_produce()] == [5, 10]


def test_batch_straddling_the_fetch_offset_is_partial() -> None:
    assert actions(build(0, 5) + build(5, 5), 3, read_committed=False) == [(0, Action.PARTIAL), (5, Action.PRODUCE)]


def test_truncated_tail_is_left_for_the_next_fetch() -> None:
    blob = build(0, 5) + build(5, 5)
    selection = select_batches(split_batches(blob[:-10]).batches, 0, read_committed=False)
    assert [d.action for d in selection.decisions] == [Action.PRODUCE]
    assert selection.next_fetch_offset == 5


def test_no_batches_keeps_the_fetch_offset() -> None:
    assert select_batches([], 42, read_committed=True).next_fetch_offset == 42


def test_control_batches_are_never_produced() -> None:
    blob = build(0, 2, producer=(7, 0, 0), transactional=True) + control_batch(2, 7, COMMIT) + build(3, 1)
    for committed in (False, True):
        assert actions(blob, 0, read_committed=committed) == [
            (0, Action.PRODUCE),
            (2, Action.CONTROL),
            (3, Action.PRODUCE),
        ]
    assert select_batches(split_batches(blob).batches, 0, read_committed=True).next_fetch_offset == 4


def test_aborted_transactions_dropped_under_read_committed() -> None:
    # producer 7 aborts (offsets 0-3, marker 4), producer 8 commits interleaved, then producer 7 again
    # in a new transaction that commits (6-7, marker 8).
    blob = (
        build(0, 2, producer=(7, 0, 0), transactional=True)
        + build(2, 1, producer=(8, 0, 0), transactional=True)
        + build(3, 1, producer=(7, 0, 2), transactional=True)
        + control_batch(4, 7, ABORT)
        + control_batch(5, 8, COMMIT)
        + build(6, 2, producer=(7, 0, 3), transactional=True)
        + control_batch(8, 7, COMMIT)
        + build(9, 1)  # non-transactional
    )
    aborted = [AbortedTransaction(producer_id=7, first_offset=0)]
    assert actions(blob, 0, read_committed=True, aborted=aborted) == [
        (0, Action.ABORTED),
        (2, Action.PRODUCE),
        (3, Action.ABORTED),
        (4, Action.CONTROL),
        (5, Action.CONTROL),
        (6, Action.PRODUCE),
        (8, Action.CONTROL),
        (9, Action.PRODUCE),
    ]
    # read_uncommitted copies everything but the markers.
    assert [a for _, a in actions(blob, 0, read_committed=False, aborted=aborted)].count(Action.ABORTED) == 0


def test_aborted_transaction_starting_later_only_drops_from_its_first_offset() -> None:
    blob = (
        build(0, 2, producer=(7, 0, 0), transactional=True)
        + control_batch(2, 7, COMMIT)
        + build(3, 2, producer=(7, 0, 2), transactional=True)
        + control_batch(5, 7, ABORT)
    )
    aborted = [AbortedTransaction(7, 3)]
    assert actions(blob, 0, read_committed=True, aborted=aborted) == [
        (0, Action.PRODUCE),
        (2, Action.CONTROL),
        (3, Action.ABORTED),
        (5, Action.CONTROL),
    ]


def test_aborted_list_of_another_producer_drops_nothing_else() -> None:
    blob = build(0, 2, producer=(7, 0, 0), transactional=True) + build(2, 2, producer=(9, 0, 0))
    assert actions(blob, 0, read_committed=True, aborted=[AbortedTransaction(8, 0)]) == [
        (0, Action.PRODUCE),
        (2, Action.PRODUCE),
    ]


def test_non_transactional_batch_of_an_aborting_producer_is_kept() -> None:
    blob = build(0, 2, producer=(7, 0, 0), transactional=False)
    assert actions(blob, 0, read_committed=True, aborted=[AbortedTransaction(7, 0)]) == [(0, Action.PRODUCE)]


def test_empty_batch_is_skipped() -> None:
    empty = build(3, deltas=[])
    blob = build(0, 3) + empty + build(4, 1)
    got = actions(blob, 0, read_committed=False)
    assert got[1][1] is Action.EMPTY and [a for _, a in got].count(Action.PRODUCE) == 2
