"""Pure logic of the benchmark harness: the verifier's counting rules, the record stamp, statistics."""

from __future__ import annotations

import random

import pytest

from strait.bench.records import STAMP_SIZE, Stamp, decode, encode
from strait.bench.stats import first_at_or_after, latency_summary, longest_gap, percentile
from strait.bench.verifier import Verifier

T = "topic"


def _feed(verifier: Verifier, seqs: list[int], partition: int = 0, dst_partition: int | None = None) -> None:
    for seq in seqs:
        verifier.observe(T, partition if dst_partition is None else dst_partition, Stamp(partition, seq, 0))


def test_a_faithful_copy_is_ok() -> None:
    verifier = Verifier({(T, 0): 5, (T, 1): 3})
    _feed(verifier, [0, 1, 2, 3, 4], partition=0)
    _feed(verifier, [0, 1, 2], partition=1)
    report = verifier.report()
    assert report.ok
    assert (report.expected, report.received, report.missing, report.duplicated, report.out_of_order) == (8, 8, 0, 0, 0)
    assert (report.lost, report.not_yet_copied) == (0, 0)  # nothing missing: nothing to split


def test_missing_records_are_counted_with_their_ranges_and_not_called_lost_unsplit() -> None:
    verifier = Verifier({(T, 0): 10})
    _feed(verifier, [0, 1, 4, 5, 6, 9])
    report = verifier.report()
    assert report.missing == 4
    assert report.partitions[0].missing_ranges == ((2, 3), (7, 8))
    assert report.lost is None and report.not_yet_copied is None  # not split without committed positions
    assert not report.ok


def test_nothing_arrived_means_everything_missing() -> None:
    report = Verifier({(T, 0): 3}).report()
    assert report.missing == 3 and report.partitions[0].missing_ranges == ((0, 2),)


def test_a_replay_after_failover_is_duplicates_not_reordering() -> None:
    # At-least-once redelivery: a worker resumes from its last checkpoint (seq 3) after 0..5 arrived.
    verifier = Verifier({(T, 0): 8})
    _feed(verifier, [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7])
    report = verifier.report()
    assert (report.missing, report.duplicated, report.out_of_order) == (0, 3, 0)
    assert report.ok  # duplicates are reported, not failed


def test_a_record_first_seen_after_a_later_one_is_out_of_order() -> None:
    verifier = Verifier({(T, 0): 5})
    _feed(verifier, [0, 2, 1, 3, 4])
    report = verifier.report()
    assert (report.missing, report.duplicated, report.out_of_order) == (0, 0, 1)
    assert not report.ok


def test_records_in_the_wrong_partition_are_misrouted() -> None:
    verifier = Verifier({(T, 0): 2})
    _feed(verifier, [0, 1], partition=0, dst_partition=3)
    report = verifier.report()
    assert report.misrouted == 2 and report.missing == 0 and not report.ok


def test_foreign_and_unexpected_records_are_counted_not_dropped() -> None:
    verifier = Verifier({(T, 0): 2})
    _feed(verifier, [0, 1, 7])
    verifier.observe(T, 0, None)
    verifier.observe("other", 0, Stamp(0, 0, 0))
    report = verifier.report()
    assert report.foreign == 1
    assert report.unexpected == 2  # seq 7 beyond what was produced, and a topic nobody produced to
    assert not report.ok


def test_topics_are_judged_separately() -> None:
    verifier = Verifier({("a", 0): 2, ("b", 0): 2})
    verifier.observe("a", 0, Stamp(0, 0, 0))
    verifier.observe("a", 0, Stamp(0, 1, 0))
    verifier.observe("b", 0, Stamp(0, 1, 0))
    report = verifier.report()
    missing = {(p.topic, p.partition): p.missing for p in report.partitions}
    assert missing == {("a", 0): 0, ("b", 0): 1}


def test_negative_expectations_are_rejected() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        Verifier({(T, 0): -1})


@pytest.mark.parametrize("seed", range(30))
def test_counts_match_a_model_over_random_histories(seed: int) -> None:
    """Invariant: missing + distinct = expected, received = distinct + duplicated + unexpected."""
    rng = random.Random(seed)
    expected = {(T, p): rng.randint(0, 200) for p in range(rng.randint(1, 4))}
    verifier = Verifier(expected)
    model_seen: dict[tuple[str, int], set[int]] = {k: set() for k in expected}
    received = dup = 0
    for (topic, p), n in expected.items():
        seqs = [s for s in range(n) if rng.random() > 0.1]  # some lost
        replay = rng.sample(seqs, k=min(len(seqs), rng.randint(0, 10)))  # some redelivered
        for seq in seqs + sorted(replay):
            verifier.observe(topic, p, Stamp(p, seq, 0))
            received += 1
            dup += seq in model_seen[(topic, p)]
            model_seen[(topic, p)].add(seq)
    report = verifier.report()
    distinct = sum(len(s) for s in model_seen.values())
    assert report.missing == sum(expected.values()) - distinct
    assert report.duplicated == dup
    assert report.received == received == distinct + dup
    assert report.out_of_order == 0


def test_stamp_round_trips_and_pads_to_size() -> None:
    value = encode(3, 123_456, 1_700_000_000_000_000, 100)
    assert len(value) == 100
    assert decode(value) == Stamp(3, 123_456, 1_700_000_000_000_000)
    assert len(encode(0, 0, 0, 1)) == STAMP_SIZE  # never shorter than the stamp


def test_values_that_are_not_benchmark_records_decode_to_none() -> None:
    assert decode(None) is None
    assert decode(b"short") is None
    assert decode(b"X" * 100) is None


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 1001))
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile(values, 100) == 1000
    summary = latency_summary([1000, 2000, 3000])
    assert summary["p50_ms"] == 2.0 and summary["max_ms"] == 3.0


def test_longest_gap_counts_the_window_edges() -> None:
    assert longest_gap([10, 20, 50, 55], start_us=0, end_us=60) == (30, 20)
    # A stream that stops for good shows its silence up to the end of the window.
    assert longest_gap([10, 20], start_us=0, end_us=100) == (80, 20)
    assert first_at_or_after([5, 1, 9], 4) == 5
    assert first_at_or_after([1, 2], 4) is None


def test_profile_folding_charges_self_time_to_the_innermost_frame() -> None:
    from strait.bench.profile import fold

    raw = "\n".join(
        [
            "thread (0x1);run (strait/worker/fetch.py:10);consume (strait/worker/fetch.py:280) 6",
            "thread (0x1);run (strait/worker/fetch.py:12);produce (strait/worker/fetch.py:300) 3",
            "thread (0x2);loop (strait/worker/agent.py:5) 1",
        ]
    )
    folded = fold(raw)
    assert folded["samples"] == 10
    assert folded["self"][0] == ("consume (strait/worker/fetch.py)", 6, 60.0)
    inclusive = {name: n for name, n, _ in folded["inclusive"]}
    assert inclusive["run (strait/worker/fetch.py)"] == 9  # two lines of one function are one row
    assert {name: n for name, n, _ in folded["threads"]} == {"thread (0x1)": 9, "thread (0x2)": 1}
