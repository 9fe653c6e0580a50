"""Consumer-group offset sync: the pure decisions (which groups, skip active, never backwards),
the route key, and the metrics."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from strait.config import ConfigError, GroupSyncConfig, parse_config
from strait.controller.groupsync import GroupSync, decide, select_groups
from strait.metrics.controller import controller_registry
from strait.offsetmap.failover import translate_group
from strait.offsetmap.runs import Run
from strait.offsetmap.store import PartitionMap

RUNS = {
    ("orders", 0): PartitionMap("orders", [Run(0, 0, 100)]),
    ("orders", 1): PartitionMap("orders-copy", [Run(0, 0, 50), Run(60, 50, 40)]),  # a source gap 50..59
}


def _config(groups: Any, **route: Any) -> Any:
    return parse_config(
        {
            "clusters": {"a": {"bootstrap.servers": "x:1"}, "b": {"bootstrap.servers": "y:1"}},
            "routes": [{"name": "r", "source": "a", "destination": "b", "groups": groups, **route}],
        },
        environ={},
    )


def test_groups_match_include_and_not_exclude_and_never_strait_s_own() -> None:
    settings = GroupSyncConfig(include=["app-.*", "billing"], exclude=["app-test.*"])
    names = ["app-1", "app-test-2", "billing", "billing-2", "other", "strait-r", "strait.r", "app-1"]
    assert select_groups(names, settings) == ["app-1", "billing"]
    every = GroupSyncConfig()  # include defaults to every group
    assert select_groups(["x", "strait-offsetmap-reader-r", "y"], every) == ["x", "y"]
    assert select_groups(["x"], GroupSyncConfig(include=[])) == []


def test_a_group_with_members_on_the_destination_is_not_touched() -> None:
    partitions = translate_group(RUNS, {("orders", 0): 40}, {})
    decision = decide("app", partitions, members_on_destination=2)
    assert decision.write == [] and decision.active and "2 active member" in (decision.skipped or "")
    idle = decide("app", partitions, members_on_destination=0)
    assert not idle.active and [(p.partition, p.destination_offset) for p in idle.write] == [(0, 40)]


def test_offsets_only_move_forward() -> None:
    source = {("orders", 0): 40, ("orders", 1): 55}  # p1 committed inside the source gap: copy of 60
    # p0 is already further on the destination (consumed there): kept; p1 is behind: written.
    partitions = translate_group(RUNS, source, {("orders", 0): 70, ("orders", 1): 10})
    decision = decide("app", partitions, 0)
    assert [(p.destination_topic, p.partition, p.destination_offset) for p in decision.write] == [
        ("orders-copy", 1, 50)
    ]
    assert decision.kept == 1 and decision.skipped is None and decision.untranslated == 0
    # Equal is not a move: nothing written, still in sync.
    same = decide("app", translate_group(RUNS, {("orders", 0): 40}, {("orders", 0): 40}), 0)
    assert same.write == [] and same.kept == 1 and same.skipped is None


def test_partitions_outside_the_map_or_older_than_it_are_not_written() -> None:
    runs = {("orders", 0): PartitionMap("orders", [Run(500, 0, 100)])}  # the map starts at 500
    partitions = translate_group(runs, {("orders", 0): 10, ("payments", 0): 5}, {})
    assert [p.topic for p in partitions] == ["orders"]  # payments is not on this route
    assert partitions[0].destination_offset is None
    decision = decide("app", partitions, 0)
    assert decision.write == [] and decision.kept == 1 and decision.untranslated == 1
    assert decide("app", [], 0).skipped == "no committed offsets on the route's copied partitions"


def test_past_the_copy_the_group_resumes_after_the_last_copy_and_the_lag_is_reported() -> None:
    (partition,) = translate_group(RUNS, {("orders", 0): 130}, {})
    assert partition.destination_offset == 100 and partition.not_replicated == 30


def test_the_route_key() -> None:
    route = _config({"include": ["app-.*"], "interval_s": 1.5}).routes[0]
    assert route.groups is not None and route.groups.interval_s == 1.5 and route.groups.exclude == []
    assert _config(None).routes[0].groups is None
    with pytest.raises(ConfigError, match="invalid regular expression"):
        _config({"include": ["("]})
    with pytest.raises(ConfigError, match="interval_s"):
        _config({"interval_s": 0})
    with pytest.raises(ConfigError, match="offset_map"):
        _config({}, offset_map=False)
    with pytest.raises(ConfigError, match="nope"):
        _config({"nope": 1})


class _Observatory:
    controller_id = "c1"

    def view(self) -> dict[str, Any]:
        return {"leader": True}


def test_metrics_name_groups_synced_and_translation_age() -> None:
    view = {
        "r": {
            "rounds": 3,
            "errors": 1,
            "written": 8,
            "groups": [
                {
                    "group": "app",
                    "synced": True,
                    "age_s": 2.5,
                    "active": False,
                    "partitions": 3,
                    "untranslated": 1,
                    "written": 7,
                },
                {"group": "live", "synced": True, "age_s": 40.0, "active": True, "partitions": 1, "written": 1},
            ],
        }
    }
    text = generate_latest(controller_registry(_Observatory(), lambda: view)).decode()  # type: ignore[arg-type]
    assert 'strait_groups_synced{route="r"} 1.0' in text
    assert 'strait_group_translation_age_seconds{group="app",route="r"} 2.5' in text
    assert 'strait_group_sync_active{group="live",route="r"} 1.0' in text
    assert 'strait_group_untranslated_partitions{group="app",route="r"} 1.0' in text
    assert 'strait_group_sync_offsets_written_total{route="r"} 8.0' in text
    assert 'strait_group_sync_errors_total{route="r"} 1.0' in text
    # Without group sync, none of these series exist.
    assert "strait_groups_synced" not in generate_latest(controller_registry(_Observatory())).decode()  # type: ignore[arg-type]


def test_a_standby_syncs_nothing_and_reports_nothing() -> None:
    config = _config({"interval_s": 0.1})
    sync = GroupSync(config, leading=lambda: False)
    sync.stop()
    sync.run()  # returns at once: stopped, and never touched a cluster
    assert sync.view() == {"r": {"rounds": 0, "errors": 0, "written": 0, "groups": []}}
