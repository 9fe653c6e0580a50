"""`strait bench`: records missing from a copy are split into lost and not yet copied, for both systems.

Synthetic inputs only: the source partition as (offset, sequence number) pairs, the committed
position each replicator would resume from, and what a second read of the copy finds.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from strait.bench import positions
from strait.bench.markdown import _verdict, missing_words
from strait.bench.mirrormaker import render_properties
from strait.bench.missing import Missing, split
from strait.bench.records import Stamp
from strait.bench.report import render_markdown
from strait.bench.report_missing import missing_summary
from strait.bench.verifier import Verifier

T = "topic"
KEY = (T, 0)


def _source(seqs_by_offset: list[int]):  # type: ignore[no-untyped-def]
    """A source partition: the records' sequence numbers in offset order; `behind` and the calls it got."""
    calls: list[int] = []

    def behind(key: tuple[str, int], position: int) -> list[tuple[int, int]]:
        assert key == KEY
        calls.append(position)
        return [(offset, seq) for offset, seq in enumerate(seqs_by_offset) if offset < position]

    return behind, calls


def _nothing_late(key: tuple[str, int], seqs: set[int]) -> set[int]:
    return set()


def _missing(expected: int, seen: list[int]) -> Missing:
    bitmap = bytearray(expected)
    for seq in seen:
        bitmap[seq] = 1
    return Missing(bytes(bitmap))


def test_missing_lists_the_sequence_numbers_not_seen() -> None:
    gone = _missing(6, [0, 2, 3])
    assert list(gone) == [1, 4, 5] and len(gone) == 3
    assert 1 in gone and 0 not in gone and 6 not in gone and -1 not in gone


def test_records_behind_the_committed_position_are_lost_the_rest_not_yet_copied() -> None:
    # Ten records at offsets 0..9; the copy has 0-3 and 6; the committed position is 5 (the
    # replicator resumes at offset 5): 4 is lost, 5, 7, 8, 9 are not yet copied.
    behind, calls = _source(list(range(10)))
    [verdict] = split({KEY: _missing(10, [0, 1, 2, 3, 6])}, {KEY: 5}, behind=behind, present=_nothing_late).values()
    assert (verdict.lost, verdict.not_yet_copied, verdict.committed) == (1, 4, 5)
    assert verdict.lost_ranges == ((4, 4),)
    assert calls == [5]


def test_offsets_and_sequence_numbers_need_not_match() -> None:
    # Foreign records and another producer's records sit between ours: position 4 covers the
    # records at offsets 0..3, i.e. sequence numbers 5, 0 and 1 (offset 2 is not a benchmark record).
    behind, _ = _source([5, 0, -1, 1, 2, 3, 4])
    source = lambda key, position: [(o, s) for o, s in behind(key, position) if s >= 0]  # noqa: E731
    [verdict] = split({KEY: _missing(6, [1, 2])}, {KEY: 4}, behind=source, present=_nothing_late).values()
    # missing: 0, 3, 4, 5; behind the position: 5 and 0 -> lost; 3 and 4 -> not yet copied.
    assert (verdict.lost, verdict.not_yet_copied) == (2, 2)
    assert verdict.lost_ranges == ((0, 0), (5, 5))


def test_nothing_committed_means_nothing_lost() -> None:
    behind, calls = _source(list(range(5)))
    for position in (None, 0):
        [verdict] = split({KEY: _missing(5, [])}, {KEY: position}, behind=behind, present=_nothing_late).values()
        assert (verdict.lost, verdict.not_yet_copied) == (0, 5)
    [verdict] = split({KEY: _missing(5, [])}, {}, behind=behind, present=_nothing_late).values()
    assert (verdict.lost, verdict.not_yet_copied, verdict.committed) == (0, 5, None)
    assert calls == []  # no source read when nothing can be lost


def test_a_record_copied_after_the_reader_stopped_is_not_lost() -> None:
    behind, _ = _source(list(range(8)))
    asked: list[set[int]] = []

    def present(key: tuple[str, int], seqs: set[int]) -> set[int]:
        asked.append(set(seqs))
        return {2, 99}  # 2 arrived after the window closed; 99 is not one we asked about

    [verdict] = split({KEY: _missing(8, [0, 1, 4, 5])}, {KEY: 6}, behind=behind, present=present).values()
    assert asked == [{2, 3}]  # only candidates for "lost" are read again
    assert (verdict.lost, verdict.not_yet_copied, verdict.arrived_late) == (1, 3, 1)
    assert verdict.lost_ranges == ((3, 3),)


@pytest.mark.parametrize("seed", range(25))
def test_lost_plus_not_yet_copied_is_missing_over_random_histories(seed: int) -> None:
    """Invariant against a direct model: lost = missing records at offsets below the position and absent later."""
    rng = random.Random(seed)
    n = rng.randint(0, 60)
    order = list(range(n))
    rng.shuffle(order)  # sequence number at each offset, any order
    seen = [s for s in range(n) if rng.random() < 0.6]
    late = {s for s in range(n) if rng.random() < 0.2}
    position = rng.choice([None, 0, rng.randint(0, n + 3)])
    behind, _ = _source(order)
    gone = _missing(n, seen)
    [verdict] = split({KEY: gone}, {KEY: position}, behind=behind, present=lambda _k, _s: late).values()
    below = set(order[: position or 0])
    model_lost = {s for s in gone if s in below and s not in late}
    assert verdict.lost == len(model_lost)
    assert verdict.lost + verdict.not_yet_copied == len(gone) == n - len(seen)


def test_the_verifier_report_carries_the_split_and_stays_failed() -> None:
    verifier = Verifier({KEY: 10, (T, 1): 3})
    for seq in (0, 1, 2, 3, 6):
        verifier.observe(T, 0, Stamp(0, seq, 0))
    for seq in range(3):
        verifier.observe(T, 1, Stamp(1, seq, 0))
    missing = verifier.missing()
    assert set(missing) == {KEY}
    behind, _ = _source(list(range(10)))
    report = verifier.report(split(missing, {KEY: 5}, behind=behind, present=_nothing_late))
    summary = report.summary()
    assert (summary["missing"], summary["lost"], summary["not_yet_copied"]) == (5, 1, 4)
    assert summary["lost_where"] == [{"topic": T, "partition": 0, "committed": 5, "seq": [(4, 4)]}]
    assert not summary["ok"]  # a run with records not yet copied has not finished its job either
    unsplit = verifier.report().summary()
    assert (unsplit["missing"], unsplit["lost"], unsplit["not_yet_copied"]) == (5, None, None)


# --- MirrorMaker 2's committed positions --------------------------------------------------


def _connect(topic: str, partition: int, offset: int | None, connector: str = "MirrorSourceConnector"):  # type: ignore[no-untyped-def]
    key = json.dumps([connector, {"cluster": "src", "partition": partition, "topic": topic}]).encode()
    return key, None if offset is None else json.dumps({"offset": offset}).encode()


def test_connect_offsets_keep_the_latest_per_partition() -> None:
    records = [
        _connect(T, 0, 10),
        _connect(T, 1, 4),
        _connect(T, 0, 25),  # a later commit wins
        _connect(T, 1, None),  # a tombstone forgets it
        _connect("other", 0, 7, connector="MirrorCheckpointConnector"),  # not the source connector
        (b"not json", b"{}"),
        (json.dumps(["MirrorSourceConnector", "odd"]).encode(), b'{"offset": 1}'),
    ]
    assert positions.parse_connect_offsets(records) == {(T, 0): 25, (T, 1): None}


def test_mirrormaker_resumes_after_the_committed_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [_connect(T, 0, 41), _connect(T, 2, 0)]
    monkeypatch.setattr(positions, "_records", lambda _props, _topic: iter(records))
    found = positions.mirrormaker_positions({}, "mm2-offsets.x.internal", [(T, 0), (T, 1), (T, 2)])
    assert found == {(T, 0): 42, (T, 1): None, (T, 2): 1}


def test_the_offsets_topic_is_read_from_the_rendered_properties(tmp_path: Path) -> None:
    text = render_properties(
        src_bootstrap="a:1", dst_bootstrap="b:2", topics_pattern="t", tasks=1, run_id="bench-1234abcd"
    )
    (tmp_path / "mm2-node-1.properties").write_text(text)
    (tmp_path / "mm2-node-1.log").write_text("")
    assert positions.mirrormaker_offsets_topic([tmp_path / "mm2-node-1.log"]) == "mm2-offsets.bench-1234abcd.internal"
    assert positions.mirrormaker_offsets_topic([]) is None


def test_mirrormaker_exactly_once_runs_as_kip_618_sets_it_up(tmp_path: Path) -> None:
    from strait.bench.mirrormaker import MirrorMaker2

    def props(mm2: MirrorMaker2) -> dict[str, str]:
        lines = mm2.properties("t").splitlines()
        return dict(line.split(" = ", 1) for line in lines)

    exactly = props(
        MirrorMaker2(src_bootstrap="a:1", dst_bootstrap="b:2", workdir=tmp_path, tasks=1, exactly_once=True)
    )
    assert exactly["dst.exactly.once.source.support"] == "enabled"
    assert exactly["src.consumer.isolation.level"] == "read_committed"
    assert exactly["dedicated.mode.enable.internal.rest"] == "true" and exactly["listeners"].startswith(
        "http://127.0.0.1:"
    )
    mm2 = MirrorMaker2(src_bootstrap="a:1", dst_bootstrap="b:2", workdir=tmp_path, tasks=1)
    plain = props(mm2)
    assert "dst.exactly.once.source.support" not in plain and "listeners" not in plain
    # The counter of its committed copy reads the offsets topic the properties name.
    assert plain["offset.storage.topic"] == mm2.offsets_topic


def test_a_replicator_of_unknown_kind_leaves_the_missing_records_unsplit() -> None:
    verifier = Verifier({KEY: 3})
    verifier.observe(T, 0, Stamp(0, 0, 0))
    logged: list[str] = []
    report = positions.audit(object(), verifier, {}, {}, log=logged.append)
    assert (report.missing, report.lost, report.not_yet_copied) == (2, None, None)
    assert "could not split 2 missing records" in logged[0]
    complete = Verifier({KEY: 1})
    complete.observe(T, 0, Stamp(0, 0, 0))
    assert positions.audit(object(), complete, {}, {}).summary()["lost"] == 0  # nothing read, nothing to split


# --- what the report says -------------------------------------------------------------------


def _run(system: str, **verify: object) -> dict[str, object]:
    return {"system": system, "verify": {"duplicated": 0, "out_of_order": 0, **verify}}


def test_the_report_says_lost_or_not_yet_copied_per_system() -> None:
    strait = _run("strait", missing=0, lost=0, not_yet_copied=0)
    mm2 = _run("mm2", missing=12, lost=2, not_yet_copied=10)
    assert _verdict(mm2) == "2 / 10 / 0 / 0"
    assert missing_words(mm2["verify"]) == "lost 2, not yet copied 10"  # type: ignore[arg-type]
    [line] = missing_summary({"smoke": {"runs": [strait, mm2]}})
    assert "**Records lost**" in line and "2 verified runs: Strait 0, MM2 2" in line
    assert "**not yet copied** when the window closed" in line and "Strait 0, MM2 10" in line


def test_results_written_before_the_split_are_not_called_lost() -> None:
    old = _run("mm2", lost=7)  # then, "lost" counted every missing record
    unread = _run("strait", missing=3, lost=None, not_yet_copied=None)
    assert _verdict(old) == "7 missing, not split / 0 / 0"
    assert _verdict(unread) == "3 missing, not split / 0 / 0"
    assert missing_words(old["verify"]) == "missing 7 (not split into lost / not yet copied)"  # type: ignore[arg-type]
    lines = missing_summary({"smoke": {"runs": [old, unread]}})
    assert lines == [
        "- **Records missing, not split** into lost and not yet copied (results written before the split, or "
        "the committed positions could not be read): Strait 3, MM2 7."
    ]


def test_an_old_result_with_nothing_missing_needs_no_split() -> None:
    old = _run("mm2", lost=0)
    assert _verdict(old) == "0 / 0 / 0 / 0"
    assert missing_words(old["verify"]) == "lost 0, not yet copied 0"  # type: ignore[arg-type]
    [line] = missing_summary({"smoke": {"runs": [old, _run("strait", lost=0)]}})
    assert "over the 2 verified runs: Strait 0, MM2 0" in line


def test_benchmarks_md_defines_both_words() -> None:
    doc = {"scenario": "smoke", "runs": [_run("mm2", missing=1, lost=0, not_yet_copied=1, expected=10)]}
    markdown = render_markdown({"smoke": doc})
    assert "lost / not yet copied / dup / reordered" in markdown
    assert "is **lost** if the replicator's committed position" in markdown
    assert "**not yet copied**" in markdown and "0 / 1 / 0 / 0" in markdown
