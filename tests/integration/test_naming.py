"""Renamed destination topics on real clusters, with a real controller and worker.

Three routes run together: ``a-to-b`` (src->dst, prefix "src.") and ``b-to-a`` (dst->src, prefix
"dst."), both active-active and both matching the copies the other writes, and ``eos``
(src->dst, exactly-once, template "{route}.{source_cluster}.{topic}"). Everything keyed by the
destination name must follow the new names: the topics created, the copies (each record once,
no topic copied back and forth), the offset map and a failover through it, the continuous group
sync, and the exactly-once checkpoints. A renamed copy added to the opposite route by hand is
still not copied back: the two-way routes copy whole batches, told apart by their producer ids
(strait.worker.batch.provenance), which hold over renamed topics too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from strait import clients
from strait.config import load_config
from strait.demo import create_topic, wait_until
from strait.offsetmap import failover
from strait.sandbox import Sandbox
from strait.worker.origin import HEADER
from strait.worker.transactional_checkpoints import destination_group
from tests.integration.test_failover import _consume_and_commit, _first_records
from tests.integration.test_replication import FleetFactory, make_fleet, uid

pytestmark = pytest.mark.integration

__all__ = ["make_fleet"]  # the fixture, shared with test_replication


def _produce(props: dict[str, Any], topic: str, label: str, count: int) -> None:
    producer = clients.producer(props, **{"enable.idempotence": True, "linger.ms": 5})
    for n in range(count):
        producer.produce(topic, f"{label}:{n}".encode(), partition=n % 2)
    assert producer.flush(60) == 0


def _read(props: dict[str, Any], topic: str, committed: bool = False) -> list[tuple[str, str | None]]:
    """Every record of a 2-partition topic: (value, origin header)."""
    settings: dict[str, Any] = {"group.id": f"nm-{uid()}", "enable.auto.commit": False}
    if committed:
        settings["isolation.level"] = "read_committed"
    consumer = clients.consumer(props, **settings)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen: list[tuple[str, str | None]] = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < 3.0:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    origin = dict(message.headers() or []).get(HEADER)
                    text = origin.decode() if isinstance(origin, bytes) else origin
                    seen.append(((message.value() or b"").decode(), text))
                    last = time.monotonic()
    finally:
        consumer.close()
    return seen


def _topics(props: dict[str, Any]) -> set[str]:
    admin = clients.admin(props)
    return set(admin.list_topics(timeout=15).topics)


def _committed(props: dict[str, Any], group: str, topic: str) -> dict[int, int]:
    reader = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    try:
        listed = clients.committed_offsets(reader, [TopicPartition(topic, p) for p in range(2)], 15)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in listed if tp.error is None and tp.offset >= 0}


def _values_at(props: dict[str, Any], topic: str, offsets: dict[int, int]) -> dict[int, str]:
    reader = clients.consumer(props, **{"group.id": f"nm-{uid()}", "enable.auto.commit": False})
    out = {}
    try:
        for p, offset in offsets.items():
            reader.assign([TopicPartition(topic, p, offset)])
            out[p] = (reader.consume(1, 10)[0].value() or b"").decode()
    finally:
        reader.close()
    return out


def test_prefixed_and_templated_routes_keep_everything_under_the_new_names(
    sandbox: Sandbox, make_fleet: FleetFactory, record_property: Callable[[str, object], None]
) -> None:
    a, b = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    stem = f"nm-{uid()}"
    t, e = f"{stem}-t", f"{stem}-e"
    create_topic(a, t, 2)
    create_topic(b, t, 2)
    create_topic(a, e, 2)
    _produce(a, t, "a", 300)
    _produce(b, t, "b", 200)
    _produce(a, e, "e", 200)
    sync_group = f"{stem}-sync"
    routes = [
        {
            "name": "a-to-b",
            "source": "src",
            "destination": "dst",
            "include": [f".*{t}"],  # also matches "dst.<t>", b-to-a's copy on src
            "naming": {"prefix": "src."},
            "active_active": True,
            "groups": {"include": [sync_group], "interval_s": 1},
        },
        {
            "name": "b-to-a",
            "source": "dst",
            "destination": "src",
            "include": [f".*{t}"],  # also matches "src.<t>", a-to-b's copy on dst
            "naming": {"prefix": "dst."},
            "active_active": True,
        },
        {
            "name": "eos",
            "source": "src",
            "destination": "dst",
            "include": [e],
            "naming": {"template": "{route}.{source_cluster}.{topic}"},
            "delivery": "exactly-once",
        },
    ]
    fleet = make_fleet(routes=routes)
    fleet.start_controller()
    fleet.start_worker("w1")
    a_copy, b_copy, e_copy = f"src.{t}", f"dst.{t}", f"eos.src.{e}"

    def copied() -> bool:
        return len(_read(b, a_copy)) >= 300 and len(_read(a, b_copy)) >= 200 and len(_read(b, e_copy, True)) >= 200

    assert wait_until(copied, 240, interval_s=1.0), (len(_read(b, a_copy)), len(_read(a, b_copy)))

    # A source group fails over onto the renamed topic, exactly.
    config = load_config(fleet.config_path)
    app = f"{stem}-app"
    committed = _consume_and_commit(a, app, t, {0: 100, 1: 37})
    planned = failover.plan(config, "a-to-b", app)
    assert {p.destination_topic for p in planned} == {a_copy}
    assert all(p.exact for p in planned)
    failover.apply(config, "a-to-b", app, planned)
    assert _first_records(b, app, a_copy, 2) == _values_at(a, t, committed)

    # The continuous sync writes the translated offsets under the renamed topic.
    synced_at = _consume_and_commit(a, sync_group, t, {0: 50, 1: 20})
    assert wait_until(lambda: len(_committed(b, sync_group, a_copy)) == 2, 60), "the group was not synced"
    assert _values_at(b, a_copy, _committed(b, sync_group, a_copy)) == _values_at(a, t, synced_at)

    # Exactly-once checkpoints are kept under the destination name (source offsets, 100 records each).
    assert wait_until(lambda: _committed(b, destination_group("eos"), e_copy) == {0: 100, 1: 100}, 60), _committed(
        b, destination_group("eos"), e_copy
    )

    # A renamed copy added to the opposite route by hand: its batches were written there by
    # the opposite route, whose producer ids keep them from going back.
    fleet.api().add_topic(b_copy, route="a-to-b")
    assert wait_until(lambda: f"src.{b_copy}" in _topics(b), 60), "the hand-added topic was not created"
    # A record written to the hand-added topic on src itself carries no origin and is copied:
    # once it is there, everything before it was passed, and any copy of those would be there.
    sentinels = [f"sentinel:{p}" for p in range(2)]
    producer = clients.producer(a, **{"enable.idempotence": True})
    for p, value in enumerate(sentinels):
        producer.produce(b_copy, value.encode(), partition=p)
    assert producer.flush(60) == 0
    assert wait_until(lambda: {v for v, _ in _read(b, f"src.{b_copy}")} >= set(sentinels), 120, interval_s=1.0), (
        "the sentinels were not copied"
    )
    # Topics matching both routes' patterns, created one after the other, are picked up only by
    # discovery turns that also saw every copy above: a copy that could go back by name would be
    # picked up by then.
    late = f"late-{t}"

    def specs() -> set[tuple[str, str]]:
        return {(s["route"], s["topic"]) for s in fleet.api().call("GET", "/topics")}

    create_topic(b, late, 2)
    assert wait_until(lambda: ("b-to-a", late) in specs(), 60), specs()
    create_topic(a, late, 2)
    assert wait_until(lambda: ("a-to-b", late) in specs(), 60), specs()
    assert specs() == {
        ("a-to-b", t),
        ("a-to-b", b_copy),
        ("a-to-b", late),
        ("b-to-a", t),
        ("b-to-a", late),
        ("eos", e),
    }

    got_b, got_a, got_e = _read(b, a_copy), _read(a, b_copy), _read(b, e_copy, True)
    got_a = [(v, o) for v, o in got_a if v not in sentinels]
    for where, got, label, count in (("dst", got_b, "a", 300), ("src", got_a, "b", 200)):
        values = [v for v, _ in got]
        assert len(values) == count and len(set(values)) == count, f"{where}: {len(values)} records"
        # Whole batches: no origin header (record mode would have stamped each copy).
        assert {v.split(":")[0] for v in values} == {label} and {o for _, o in got} == {None}
    assert sorted(v for v, _ in got_e) == sorted(f"e:{n}" for n in range(200))
    assert sorted(v for v, _ in _read(b, f"src.{b_copy}")) == sentinels, "a copy went back to where it came from"
    # Nothing copied back and forth by name: no "src.dst.*" on the source, no "dst.src.*" anywhere.
    names = _topics(a) | _topics(b)
    assert not {n for n in names if n.startswith(("dst.src.", "src.dst.src."))}, names
    assert f"dst.{a_copy}" not in _topics(a)
    record_property("naming_routes", 3)
