"""Active-active routes: which records a route copies back, and how copies are marked."""

from __future__ import annotations

from strait.worker.origin import HEADER, OriginRule


def test_a_record_that_names_no_origin_is_stamped_with_the_routes_source() -> None:
    rule = OriginRule("a", "b")
    assert rule.stamp([("trace", b"1")]) == [("trace", b"1"), (HEADER, b"a")]
    assert rule.stamp(None) == [(HEADER, b"a")]
    assert not rule.skips(None)


def test_a_record_from_the_routes_destination_is_skipped_and_others_keep_their_origin() -> None:
    back, onward = OriginRule("b", "a"), OriginRule("b", "c")
    from_a = [(HEADER, b"a")]
    assert back.skips(from_a), "copied back to where it came from: a loop"
    assert not onward.skips(from_a) and onward.stamp(from_a) == from_a, "the first origin is kept"


def test_strait_variables_that_name_no_configuration_section_are_left_alone() -> None:
    # STRAIT_CACHE (the sandbox's jar cache, documented) made every configuration fail to load.
    from strait.config import parse_config

    config = parse_config(
        {
            "clusters": {"a": {"bootstrap.servers": "x:1"}, "b": {"bootstrap.servers": "y:1"}},
            "routes": [{"name": "r", "source": "a", "destination": "b", "active_active": True}],
        },
        environ={"STRAIT_CACHE": "/tmp/cache", "STRAIT_CHAOS_SEED": "3", "STRAIT_WORKER__POOL": "vip"},
    )
    assert config.worker.pool == "vip" and config.routes[0].active_active
