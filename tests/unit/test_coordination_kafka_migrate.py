"""Planning a move of coordination state (ZooKeeper to Kafka): what moves, what is refused."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from strait.coordination.migrate import MigrationRefused, apply, plan
from strait.coordination.model import Assignment, ClusterSnapshot, LeaderInfo, TopicSpec, WorkerRecord, WorkerState


def snapshot(
    topics: Sequence[TopicSpec] = (),
    removed: Iterable[tuple[str, str]] = (),
    workers: Sequence[WorkerRecord] = (),
    leader: LeaderInfo | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        topics={(t.route, t.topic): t for t in topics},
        removed=frozenset(removed),
        workers={w.id: w for w in workers},
        stats={},
        assignment=Assignment(),
        leader=leader,
    )


def spec(topic: str, destination: str | None = None) -> TopicSpec:
    return TopicSpec(route="r", topic=topic, destination_topic=destination or topic, partitions=3)


def test_topics_and_removal_marks_move_and_what_is_there_stays() -> None:
    source = snapshot([spec("a"), spec("b"), spec("c", "c-copy")], removed={("r", "gone"), ("r", "back")})
    target = snapshot([spec("b"), spec("c", "other")], removed={("r", "back")})
    moves = plan(source, target)
    assert [s.topic for s in moves.create] == ["a"] and moves.create[0].partitions == 3
    assert moves.remove == (("r", "gone"),)
    assert moves.unchanged == (("r", "b"),)
    assert [(want.destination_topic, there.destination_topic) for want, there in moves.conflicts] == [
        ("c-copy", "other")
    ]


def test_a_running_fleet_is_refused() -> None:
    dead = WorkerRecord(id="w0", state=WorkerState.DEAD, live=False)
    assert plan(snapshot(workers=[dead]), snapshot()).create == ()
    with pytest.raises(MigrationRefused, match="stop the fleet first: workers w1 are live"):
        plan(snapshot(workers=[dead, WorkerRecord(id="w1", state=WorkerState.ACTIVE)]), snapshot())
    with pytest.raises(MigrationRefused, match="controller c1 leads"):
        plan(snapshot(leader=LeaderInfo("c1", "http://c1")), snapshot())


class Target:
    """The writes a move makes."""

    def __init__(self) -> None:
        self.created: list[TopicSpec] = []
        self.removed: list[tuple[str, str]] = []

    def create_topic(self, spec: TopicSpec) -> TopicSpec | None:
        self.created.append(spec)
        return None

    def delete_topic(self, route: str, topic: str) -> bool:
        self.removed.append((route, topic))
        return False


def test_apply_writes_the_plan() -> None:
    target = Target()
    apply(plan(snapshot([spec("a")], removed={("r", "gone")}), snapshot()), target)  # type: ignore[arg-type]
    assert [s.topic for s in target.created] == ["a"] and target.removed == [("r", "gone")]
