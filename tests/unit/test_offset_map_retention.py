"""The offset map keeps its runs at least as long as the data they translate: the pure rules,
checked by one invariant over many generated routes."""

from __future__ import annotations

import random

import pytest

from strait.offsetmap.retention import (
    FOREVER,
    MAP_SETTINGS,
    created_retention_ms,
    lifetime_ms,
    map_retention_ms,
    plan_map_settings,
)

HOUR = 3_600_000
DAY = 24 * HOUR


@pytest.mark.parametrize(
    ("policy", "retention_ms", "lifetime"),
    [
        ("delete", 7 * DAY, 7 * DAY),
        ("delete", -1, FOREVER),
        ("compact", 7 * DAY, FOREVER),  # compaction alone never removes a record's last value
        ("compact,delete", HOUR, HOUR),
        ("delete, compact", HOUR, HOUR),
        ("COMPACT,DELETE", HOUR, HOUR),
        ("", HOUR, FOREVER),  # no cleanup at all (Kafka 4.1 allows an empty policy)
    ],
)
def test_how_long_a_destination_topic_may_keep_a_record(policy: str, retention_ms: int, lifetime: int) -> None:
    assert lifetime_ms(policy, retention_ms) == lifetime


def _topic(rng: random.Random) -> tuple[str, int]:
    policy = rng.choice(["delete", "delete", "compact", "compact,delete", ""])
    retention = rng.choice([-1, HOUR, 2 * HOUR, DAY, 7 * DAY, 30 * DAY, rng.randrange(1, 90 * DAY)])
    return policy, retention


@pytest.mark.parametrize("seed", range(300))
def test_the_map_keeps_at_least_as_long_as_its_longest_lived_data_and_no_longer_than_needed(seed: int) -> None:
    rng = random.Random(seed)
    topics = [_topic(rng) for _ in range(rng.randrange(0, 8))]
    created = rng.choice([7 * DAY, DAY, HOUR, -1, rng.randrange(1, 30 * DAY)])
    lifetimes = [lifetime_ms(p, r) for p, r in topics]
    kept = map_retention_ms(lifetimes, created)
    if not topics:
        assert kept is None  # no data yet: the map is left as it is
        return
    assert kept is not None
    if FOREVER in lifetimes or created == FOREVER:
        assert kept == FOREVER, (topics, created)
        return
    # At least as long as every record may live, and as it was created with...
    assert kept >= max(lifetimes) and kept >= created, (topics, created, kept)
    # ... and no longer: exactly one of the two.
    assert kept in (max(lifetimes), created)


@pytest.mark.parametrize("seed", range(200))
def test_a_planned_change_once_applied_leaves_nothing_to_do(seed: int) -> None:
    rng = random.Random(seed)
    current = {
        "cleanup.policy": rng.choice(["delete", "compact", "compact,delete", "delete,compact"]),
        "retention.ms": str(rng.choice([-1, -2, HOUR, 7 * DAY])),
        "retention.bytes": str(rng.choice([-1, 1_000_000])),
    }
    lifetimes = [lifetime_ms(*_topic(rng)) for _ in range(rng.randrange(0, 5))]
    created = rng.choice([7 * DAY, HOUR])
    change = plan_map_settings(current, lifetimes, created)
    after = {**current, **change}
    assert plan_map_settings(after, lifetimes, created) == {}
    assert after["cleanup.policy"] == "delete" and int(after["retention.bytes"]) < 0
    if lifetimes:
        assert after["retention.ms"] == str(map_retention_ms(lifetimes, created)) or (
            int(after["retention.ms"]) < 0 and map_retention_ms(lifetimes, created) == FOREVER
        )
    else:
        assert after["retention.ms"] == current["retention.ms"]  # no data: retention untouched


def test_a_map_created_compacted_or_size_limited_is_put_right() -> None:
    change = plan_map_settings({"cleanup.policy": "compact", "retention.bytes": "1000", "retention.ms": "1"}, [], DAY)
    assert change == dict(MAP_SETTINGS)


def test_the_retention_a_new_topic_gets_comes_from_the_brokers_settings_in_their_order() -> None:
    # As DescribeConfigs lists a topic's retention.ms synonyms: the topic's own first.
    assert created_retention_ms([("retention.ms", "5"), ("log.retention.hours", "168")]) == 7 * DAY
    assert created_retention_ms([("log.retention.ms", "1000"), ("log.retention.hours", "168")]) == 1000
    assert created_retention_ms([("log.retention.minutes", "90")]) == 90 * 60_000
    assert created_retention_ms([("log.retention.hours", "-1")]) == FOREVER
    assert created_retention_ms([("retention.ms", "5")]) is None
    assert created_retention_ms([("log.retention.ms", None), ("log.retention.hours", "1")]) == HOUR
