"""The offset map's runs and translation, against a brute-force model over generated histories.

A history is a destination log of source offsets (index = destination offset) as a copy loop
produces it: mostly consecutive, with source gaps (compaction, transaction markers), resends
after a rewind (duplicates), and destination offsets Strait did not write.
"""

from __future__ import annotations

import random

import pytest

from strait.offsetmap.codec import MapEntry, decode, encode, map_topic
from strait.offsetmap.runs import Run, RunRecorder
from strait.offsetmap.translate import merge, translate


def _history(rng: random.Random) -> list[int | None]:
    """A destination log: source offsets, or None for a record someone else wrote.

    The source has fixed gaps (compaction, transaction markers); the copy walks it in order and
    sometimes rewinds to an earlier record and resends from there.
    """
    source: list[int] = []
    offset = rng.randrange(0, 50)
    for _ in range(rng.randrange(1, 200)):
        if rng.random() < 0.05:
            offset += rng.randrange(2, 20)
        source.append(offset)
        offset += 1
    log: list[int | None] = []
    index = 0
    for _ in range(rng.randrange(1, 400)):
        if index >= len(source):
            break
        roll = rng.random()
        if roll < 0.03 and index > 0:
            index = max(0, index - rng.randrange(1, 30))  # a rewind: resent records
        elif roll < 0.05:
            log.append(None)  # a foreign record in the destination
            continue
        log.append(source[index])
        index += 1
    return log


def _published(log: list[int | None], rng: random.Random) -> list[Run]:
    """What the map topic holds after the copy loop noted every copy and the copier took runs
    at random moments (a run grows while open and is published again)."""
    recorder, published = RunRecorder(), []
    for destination, source in enumerate(log):
        if source is not None:
            recorder.note(source, destination)
        if rng.random() < 0.1:
            published += recorder.take()
    return published + recorder.take()


def _expected(log: list[int | None], committed: int) -> tuple[int | None, int]:
    copies = [(s, d) for d, s in enumerate(log) if s is not None]
    if not copies or committed < min(s for s, _ in copies):
        return None, 0
    later = [s for s, _ in copies if s >= committed]
    if not later:
        top = max(s for s, _ in copies)
        return max(d for s, d in copies if s == top) + 1, committed - (top + 1)
    target = min(later)
    needed = set(later)
    positions = sorted((d for s, d in copies if s == target), reverse=True)
    for d in positions:  # the latest copy from which nothing at or after the target is missed
        if needed <= {s for s in log[d:] if s is not None}:
            return d, 0
    return positions[-1], 0


@pytest.mark.parametrize("seed", range(300))
def test_translation_matches_a_brute_force_model(seed: int) -> None:
    rng = random.Random(seed)
    log = _history(rng)
    runs = merge(_published(log, rng))
    copied = [s for s in log if s is not None]
    if not copied:
        assert translate(runs, 0).destination is None
        return
    for committed in sorted({*copied, *(s + 1 for s in copied), max(copied, default=0) + 7, 0}):
        result = translate(runs, committed)
        destination, not_replicated = _expected(log, committed)
        assert result.destination == destination, (committed, runs)
        assert result.not_replicated == not_replicated
        if destination is not None:
            # Read from there, the group meets every record from its committed offset on.
            seen = {s for s in log[destination:] if s is not None}
            assert {s for s in copied if s >= committed} <= seen, "a record would be skipped"


def test_a_partition_copied_without_faults_is_one_run() -> None:
    recorder = RunRecorder()
    for offset in range(10_000):
        recorder.note(offset + 100, offset)
    assert recorder.take() == [Run(100, 0, 10_000)]
    assert recorder.take() == [], "an unchanged open run is not published again"
    recorder.note(10_100, 10_000)
    assert recorder.take() == [Run(100, 0, 10_001)]


def test_entries_survive_the_codec_and_name_their_route() -> None:
    entry = MapEntry("orders", 3, "dc2.orders", Run(10, 0, 5))
    key, value = encode(entry)
    assert key == b"orders/3" and decode(value) == entry
    assert map_topic("billing") == "__strait_offsets.billing"
    with pytest.raises(ValueError):
        decode(b'{"t": "orders"}')


def _transactional_copy(rng: random.Random) -> tuple[dict[int, int], list[Run]]:
    """An exactly-once copy: records go into transactions that commit or abort; each commit
    takes the runs into the transaction first (then keep), each abort rolls them back and the
    copy resends from the last committed position. Returns the committed destination records
    (destination offset -> source offset) and the runs of the committed transactions."""
    source = sorted(rng.sample(range(400), rng.randrange(1, 200)))  # offsets with gaps
    recorder, published = RunRecorder(), []
    committed: dict[int, int] = {}
    durable, destination = 0, rng.randrange(0, 20)
    while durable < len(source):
        batch = source[durable : durable + rng.randrange(1, 30)]
        written = {}
        for offset in batch:
            recorder.note(offset, destination)
            written[destination] = offset
            destination += 1
        taken = recorder.take()  # produced into the transaction before it commits
        destination += 1  # the commit or abort marker
        if rng.random() < 0.25:
            recorder.rollback()  # aborted: neither its records nor its runs are ever read
            continue
        recorder.keep()
        published += taken
        committed.update(written)
        durable += len(batch)
    return committed, published


@pytest.mark.parametrize("seed", range(300))
def test_runs_of_aborted_transactions_are_never_published_and_committed_records_all_are(seed: int) -> None:
    rng = random.Random(seed)
    committed, published = _transactional_copy(rng)
    runs = merge(published)
    covered: dict[int, int] = {}
    for run in runs:
        for i in range(run.count):
            covered[run.destination + i] = run.source + i
    assert covered == committed  # no aborted copy mapped, no committed one missing
    by_source = {s: d for d, s in committed.items()}
    for offset, copy in by_source.items():
        assert translate(runs, offset).destination == copy


def test_a_rollback_returns_to_the_last_kept_run() -> None:
    recorder = RunRecorder()
    for offset in range(5):
        recorder.note(offset, offset)
    assert recorder.take() == [Run(0, 0, 5)]
    recorder.keep()
    recorder.note(5, 5)
    recorder.note(7, 9)
    assert recorder.take() == [Run(0, 0, 6), Run(7, 9, 1)]
    recorder.rollback()
    assert recorder.take() == [], "the kept run is not published again"
    recorder.note(5, 11)  # resent after the abort marker
    assert recorder.take() == [Run(0, 0, 5), Run(5, 11, 1)]
