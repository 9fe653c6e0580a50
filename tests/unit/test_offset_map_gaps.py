"""Translation of offsets below the map: a compacted topic's first records gone before the copy began."""

from __future__ import annotations

import random

import pytest

from strait.offsetmap.failover import translate_group
from strait.offsetmap.runs import Run
from strait.offsetmap.store import PartitionMap
from strait.offsetmap.translate import merge, translate
from tests.unit.test_offset_map import _expected, _history, _published


def test_below_the_map_without_a_look_at_the_source_there_is_no_answer() -> None:
    runs = [Run(550, 0, 50), Run(600, 50, 400)]
    result = translate(runs, 200)
    assert result.destination is None and not result.exact


def test_below_the_map_with_nothing_on_the_source_before_the_first_copy_resumes_there() -> None:
    runs = [Run(550, 0, 50), Run(600, 50, 400)]
    result = translate(runs, 200, next_record=550)
    assert (result.destination, result.exact, result.not_replicated) == (0, True, 0)
    assert "source gap" in result.reason


def test_records_the_copy_never_saw_leave_no_exact_answer() -> None:
    # The source still holds 300..549 (the copy started later, or the map's retention passed them).
    result = translate([Run(550, 0, 50)], 200, next_record=300)
    assert result.destination is None


def test_a_first_record_copied_twice_resumes_at_the_copy_from_which_nothing_is_missed() -> None:
    # 550..579 copied, then the copy rewound to 550 and went on to 600 (a worker killed mid-way).
    runs = merge([Run(550, 0, 30), Run(550, 30, 50)])
    assert translate(runs, 100, next_record=550).destination == 30
    # The first copy alone holds 570..579 when the resend stopped short of them: resume at 0.
    runs = merge([Run(550, 0, 30), Run(550, 30, 10)])
    assert translate(runs, 100, next_record=550).destination == 0


@pytest.mark.parametrize("seed", range(200))
def test_below_the_map_agrees_with_the_model_of_the_first_copied_record(seed: int) -> None:
    rng = random.Random(seed)
    log = _history(rng)
    copied = [s for s in log if s is not None]
    if not copied or min(copied) == 0:
        return
    runs = merge(_published(log, rng))
    first = min(copied)
    for committed in range(0, first):
        result = translate(runs, committed, next_record=first)
        assert result.destination == _expected(log, first)[0]
        assert result.destination is not None
        seen = {s for s in log[result.destination :] if s is not None}
        assert set(copied) <= seen, "a record would be skipped"
        assert translate(runs, committed, next_record=first - 1).destination is None


def test_the_group_translation_passes_the_source_look_up_per_partition() -> None:
    runs = {
        ("t", 0): PartitionMap("A.t", [Run(550, 0, 50)]),
        ("t", 1): PartitionMap("A.t", [Run(0, 0, 100)]),
    }
    planned = translate_group(runs, {("t", 0): 200, ("t", 1): 40}, {}, {("t", 0): 550})
    assert [(p.destination_topic, p.partition, p.destination_offset) for p in planned] == [
        ("A.t", 0, 0),
        ("A.t", 1, 40),
    ]
    assert translate_group(runs, {("t", 0): 200}, {})[0].destination_offset is None
