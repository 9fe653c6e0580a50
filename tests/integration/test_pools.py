"""Worker pools on real clusters: a route limited to one pool runs only on that pool's worker,
waits (reported) while that pool has no live worker, and loses nothing."""

from __future__ import annotations

import pytest

from strait.demo import Fleet, Generator, create_topic, wait_until
from strait.sandbox import Sandbox
from tests.integration.test_replication import FleetFactory, make_fleet, uid
from tests.integration.verify import copied_counts, verify

pytestmark = pytest.mark.integration

__all__ = ["make_fleet"]  # the fixture, shared with test_replication

PARTITIONS = 4


def _owners(fleet: Fleet, route: str, topic: str) -> dict[int, str | None]:
    prefix = f"{route}/{topic}/"
    return {int(k[len(prefix) :]): w for k, w in fleet.api().call("GET", "/assignment").items() if k.startswith(prefix)}


def test_a_route_limited_to_a_pool_runs_only_on_that_pools_worker(sandbox: Sandbox, make_fleet: FleetFactory) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    gold, bulk = f"gold-{uid()}", f"bulk-{uid()}"
    create_topic(src, gold, PARTITIONS)
    create_topic(src, bulk, PARTITIONS)
    fleet = make_fleet(
        routes=[
            {"name": "gold", "source": "src", "destination": "dst", "pools": ["vip"]},
            {"name": "bulk", "source": "src", "destination": "dst"},
        ]
    )
    fleet.start_controller()
    # Generous waits: on a loaded two-core machine starting a worker process takes a while.
    fleet.start_worker("d1")  # the default pool
    assert wait_until(lambda: fleet.workers_in_state("active") == {"d1"}, 60)
    generator = Generator(src, rate_per_partition=50).start()
    generator.add(gold, PARTITIONS)
    generator.add(bulk, PARTITIONS)
    try:
        fleet.api().call("POST", f"/topics/{gold}", json={"route": "gold"})
        fleet.api().call("POST", f"/topics/{bulk}", json={"route": "bulk"})
        # No vip worker yet: gold waits, reported, and is not borrowed by the default pool.
        assert wait_until(lambda: set(_owners(fleet, "bulk", bulk).values()) == {"d1"}, 60)
        routes = {r["name"]: r for r in fleet.api().call("GET", "/routes")}
        assert routes["gold"]["pools"] == ["vip"] and routes["gold"]["no_live_worker"] is True
        assert routes["bulk"]["no_live_worker"] is False
        assert all(w is None for w in _owners(fleet, "gold", gold).values())
        held = [k for w in fleet.api().call("GET", "/workers") for k in w["holding"]]
        assert not any(k.startswith("gold/") for k in held)

        fleet.start_worker("v1", pool="vip")
        assert wait_until(lambda: _owners(fleet, "gold", gold) == dict.fromkeys(range(PARTITIONS), "v1"), 120)
        assert wait_until(lambda: all(n > 0 for n in copied_counts(dst, gold, PARTITIONS).values()), 120)
        # bulk may use any pool, but v1's four gold partitions already make the two workers level:
        # bulk stays where it is.
        assert set(_owners(fleet, "bulk", bulk).values()) == {"d1"}
        pools = {w["id"]: w["pool"] for w in fleet.api().call("GET", "/workers")}
        assert pools == {"d1": "default", "v1": "vip"}
        assert {r["name"]: r["no_live_worker"] for r in fleet.api().call("GET", "/routes")} == {
            "gold": False,
            "bulk": False,
        }
        assert set(_owners(fleet, "gold", gold).values()) == {"v1"}
    finally:
        generator.stop()
    for topic in (gold, bulk):
        report = verify(dst, topic, generator.produced(topic))
        print(f"\npools, {topic}: {report}")
        assert report.lost == 0, report
