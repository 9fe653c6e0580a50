"""Continuous consumer-group offset sync, on real clusters.

A copier with an offset map copies a topic whose source offsets have gaps (transaction markers,
an aborted batch), so source and destination offsets differ. The leader's group sync (run here
as the controller runs it, in its own thread) must give a source group's destination twin the
exact translated offsets within a few intervals, follow it forward, never move it backwards,
and leave a group that has a member on the destination alone until that member leaves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from strait import clients
from strait.config import StraitConfig, parse_config
from strait.controller.groupsync import GroupSync
from strait.demo import wait_until
from strait.offsetmap import failover
from strait.sandbox import Sandbox
from strait.worker.copier import Copier
from strait.worker.task import PartitionTask
from tests.integration.observability import ObservedFleet, scrape, value
from tests.integration.test_failover import _copy_all, _create, _name, _produce, _wait, make_copier

pytestmark = pytest.mark.integration

__all__ = ["make_copier"]  # the fixture, shared with the failover tests

INTERVAL_S = 1.0


def _config(sandbox: Sandbox, route: str, prefix: str) -> StraitConfig:
    return parse_config(
        {
            "zookeeper": {"connect": sandbox.zookeeper},
            "clusters": {"src": sandbox.clusters["src"].props(), "dst": sandbox.clusters["dst"].props()},
            "routes": [
                {
                    "name": route,
                    "source": "src",
                    "destination": "dst",
                    "groups": {"include": [f"{prefix}-.*"], "exclude": [f"{prefix}-skip.*"], "interval_s": INTERVAL_S},
                }
            ],
        },
        environ={},
    )


def _commit(props: dict[str, Any], group: str, topic: str, offsets: dict[int, int]) -> None:
    committer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    committer.close()


def _committed(props: dict[str, Any], group: str, topic: str, partitions: int) -> dict[int, int]:
    reader = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    try:
        listed = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in listed if tp.error is None and tp.offset >= 0}


def _source_values(props: dict[str, Any], topic: str, offsets: dict[int, int]) -> dict[int, str]:
    """The record a consumer reads first from each source offset (gaps hold no record)."""
    reader = clients.consumer(props, **{"group.id": _name("peek"), "isolation.level": "read_committed"})
    out = {}
    try:
        for p, offset in offsets.items():
            reader.assign([TopicPartition(topic, p, offset)])
            out[p] = (reader.consume(1, 10)[0].value() or b"").decode()
    finally:
        reader.close()
    return out


def _destination_values(props: dict[str, Any], topic: str, offsets: dict[int, int]) -> dict[int, str]:
    reader = clients.consumer(props, **{"group.id": _name("peek")})
    out = {}
    try:
        for p, offset in offsets.items():
            reader.assign([TopicPartition(topic, p, offset)])
            out[p] = (reader.consume(1, 10)[0].value() or b"").decode()
    finally:
        reader.close()
    return out


@pytest.fixture
def group_sync() -> Iterator[Callable[[StraitConfig], GroupSync]]:
    started: list[tuple[GroupSync, threading.Thread]] = []

    def start(config: StraitConfig) -> GroupSync:
        sync = GroupSync(config, leading=lambda: True)
        thread = threading.Thread(target=sync.run, name="group-sync-test", daemon=True)
        thread.start()
        started.append((sync, thread))
        return sync

    yield start
    for sync, thread in started:
        sync.stop()
        thread.join(timeout=30)


def _rounds(sync: GroupSync, route: str) -> int:
    return int(sync.view()[route]["rounds"])


def _wait_rounds(sync: GroupSync, route: str, count: int) -> None:
    target = _rounds(sync, route) + count
    _wait(lambda: _rounds(sync, route) >= target, 60, f"{count} sync rounds")


def test_groups_sync_exactly_follow_forward_never_back_and_skip_active_groups(
    sandbox: Sandbox, make_copier: Callable[..., Copier], group_sync: Callable[[StraitConfig], GroupSync]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    prefix = _name("gs")
    route, topic = _name("gsr"), _name("gs-topic")
    app, busy, skipped = f"{prefix}-app", f"{prefix}-busy", f"{prefix}-skip"
    _create(src, topic, 2)
    _produce(src, topic, 2, 0, 600, txn=_name("gaps"))  # markers and an aborted batch: offsets differ
    end = clients.consumer(src, **{"group.id": "x"}).get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    _copy_all(make_copier(route, "w1"), [PartitionTask(route, topic, p, topic) for p in range(2)], [end] * 2)

    # `busy` has a member on the destination before the sync starts.
    member = clients.consumer(dst, **{"group.id": busy, "enable.auto.commit": False, "auto.offset.reset": "latest"})
    member.subscribe([topic])
    _wait(lambda: bool(member.consume(1, 0.5)) or bool(member.assignment()), 60, "the destination member to join")

    first = {0: 250, 1: 100}  # 100: a transaction marker (each batch of 100 ends with one), a gap
    for group in (app, busy, skipped):
        _commit(src, group, topic, first)
    config = _config(sandbox, route, prefix)
    sync = group_sync(config)

    # Within a few intervals the destination group holds the exact translation: a consumer
    # there starts at the copy of the source record after the committed offset.
    _wait(lambda: len(_committed(dst, app, topic, 2)) == 2, 60, "the app group on the destination")
    synced = _committed(dst, app, topic, 2)
    assert _destination_values(dst, topic, synced) == _source_values(src, topic, first)
    assert synced != first  # the gaps make source and destination offsets differ: a real translation
    planned = {p.partition: p.destination_offset for p in failover.plan(config, route, app)}
    assert synced == planned
    state = {g["group"]: g for g in sync.view()[route]["groups"]}
    assert state[app]["synced"] and not state[app]["active"] and state[app]["age_s"] < 30

    # The source group moves on: the destination follows.
    later = {0: 480, 1: 333}
    _commit(src, app, topic, later)
    _wait(lambda: _committed(dst, app, topic, 2) != synced, 60, "the destination group to follow")
    followed = _committed(dst, app, topic, 2)
    assert _destination_values(dst, topic, followed) == _source_values(src, topic, later)

    # The source group is rewound: the destination keeps its position (never backwards).
    _commit(src, app, topic, {0: 10, 1: 10})
    _wait_rounds(sync, route, 3)
    assert _committed(dst, app, topic, 2) == followed

    # The group with a member on the destination was never touched, nor the excluded one.
    assert _committed(dst, busy, topic, 2) == {}
    assert _committed(dst, skipped, topic, 2) == {}
    state = {g["group"]: g for g in sync.view()[route]["groups"]}
    assert state[busy]["active"] and skipped not in state

    # Once its member leaves, the group is synced too.
    member.close()
    _wait(lambda: len(_committed(dst, busy, topic, 2)) == 2, 90, "the busy group once its member left")
    assert _destination_values(dst, topic, _committed(dst, busy, topic, 2)) == _source_values(src, topic, first)
    assert not {g["group"]: g for g in sync.view()[route]["groups"]}[busy]["active"]
    # app: 2 partitions, then at least 1 followed forward; busy: 2. Nothing for the rewind.
    assert 5 <= sync.view()[route]["written"] <= 6


def test_only_the_leading_controller_syncs_groups_and_reports_them(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Real controller processes: the leader's sync thread gives the destination group its exact
    offsets and exports the group's metrics; the standby syncs nothing and exports none."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    prefix = _name("gsf")
    route, topic, app = _name("gsfr"), _name("gsf-topic"), f"{prefix}-app"
    _create(src, topic, 2)
    _produce(src, topic, 2, 0, 300)
    fleet = ObservedFleet(
        zookeeper=sandbox.zookeeper,
        clusters={"src": src, "dst": dst},
        routes=[
            {
                "name": route,
                "source": "src",
                "destination": "dst",
                "groups": {"include": [f"{prefix}-.*"], "interval_s": INTERVAL_S},
            }
        ],
        workdir=tmp_path_factory.mktemp("group-sync-fleet"),
    )
    try:
        fleet.start_controller("c1")
        assert wait_until(lambda: fleet.leader() == "c1", 30), "c1 did not lead"
        fleet.start_controller("c2")
        fleet.start_worker("w1")
        assert wait_until(lambda: fleet.api("c1").add_topic(topic, route=route) is not None, 30)
        _commit(src, app, topic, {0: 123, 1: 299})
        _wait(lambda: _committed(dst, app, topic, 2) == {0: 123, 1: 299}, 90, "the leader to sync the group")
        leader = scrape(fleet.url("c1") + "/metrics")
        assert value(leader, "strait_groups_synced", route=route) == 1
        age = value(leader, "strait_group_translation_age_seconds", route=route, group=app)
        assert age is not None and age < 30
        assert value(leader, "strait_group_sync_active", route=route, group=app) == 0
        standby = scrape(fleet.url("c2") + "/metrics")
        assert value(standby, "strait_groups_synced", route=route) == 0
        assert value(standby, "strait_group_translation_age_seconds", route=route, group=app) is None
    finally:
        fleet.stop()
