"""Learning sooner, on real clusters: new destination topics made ready together, and a worker
stopped at once ends its registration before it exits instead of a session timeout later."""

from __future__ import annotations

import json
import signal

import pytest
from kazoo.client import KazooClient

from strait import clients
from strait.demo import create_topic, wait_until
from strait.sandbox import Sandbox
from strait.worker.destination import DestinationError, DestinationTopics
from strait.worker.process import GOODBYE_TIMEOUT_S
from tests.integration.test_replication import FleetFactory, make_fleet, uid

pytestmark = pytest.mark.integration

__all__ = ["make_fleet"]  # the fixture, shared with test_replication


def test_ensure_many_makes_every_topic_ready_and_a_missing_one_holds_back_no_other(sandbox: Sandbox) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    prefix = f"many-{uid()}"
    create_topic(src, f"{prefix}-a", 3)
    create_topic(src, f"{prefix}-b", 2)
    # A topic created a moment ago may not be known to every broker yet (the copier retries).
    source_admin = clients.admin(src)
    assert wait_until(lambda: {f"{prefix}-a", f"{prefix}-b"} <= set(source_admin.list_topics(timeout=10).topics), 30)
    topics = DestinationTopics(source=src, destination=dst)
    wanted = {
        (f"{prefix}-a", f"{prefix}-a-copy"): 3,
        (f"{prefix}-b", f"{prefix}-b"): 1,
        (f"{prefix}-missing", f"{prefix}-missing"): 1,
    }

    results = topics.ensure_many(wanted)

    assert results[(f"{prefix}-a", f"{prefix}-a-copy")] == 3
    assert results[(f"{prefix}-b", f"{prefix}-b")] == 2
    assert isinstance(results[(f"{prefix}-missing", f"{prefix}-missing")], DestinationError)
    listed = clients.admin(dst).list_topics(timeout=30).topics
    assert len(listed[f"{prefix}-a-copy"].partitions) == 3
    assert len(listed[f"{prefix}-b"].partitions) == 2
    assert f"{prefix}-missing" not in listed
    # Prepared in the background (as on assignment), then waited for.
    create_topic(src, f"{prefix}-c", 1)
    assert wait_until(lambda: f"{prefix}-c" in source_admin.list_topics(timeout=10).topics, 30)
    topics.prepare({(f"{prefix}-c", f"{prefix}-c"): 1})
    assert topics.ensure_many({(f"{prefix}-c", f"{prefix}-c"): 1}) == {(f"{prefix}-c", f"{prefix}-c"): 1}
    # Known now: asked again, nothing is missing and the counts are remembered.
    again = topics.ensure_many({(f"{prefix}-a", f"{prefix}-a-copy"): 3})
    assert again == {(f"{prefix}-a", f"{prefix}-a-copy"): 3}


def test_a_worker_stopped_at_once_ends_its_registration_before_it_exits(
    sandbox: Sandbox, make_fleet: FleetFactory
) -> None:
    src = sandbox.clusters["src"].props()
    topic = f"bye-{uid()}"
    create_topic(src, topic, 2)
    # A long session: only the goodbye, not a timeout, can remove the registration in time.
    fleet = make_fleet(session_timeout_s=30.0)
    fleet.start_controller()
    fleet.start_worker("w1")
    assert wait_until(lambda: fleet.workers_in_state("active") == {"w1"}, 60)
    fleet.api().add_topic(topic)
    assert wait_until(lambda: len(fleet.api().call("GET", "/assignment")) == 2, 60)
    zk = KazooClient(hosts=sandbox.zookeeper)
    zk.start(timeout=30)

    def state(node: str) -> str | None:
        found = zk.exists(node)
        return json.loads(zk.get(node)[0]).get("state") if found is not None else None

    try:
        live, known = f"{fleet.root}/workers/live/w1", f"{fleet.root}/workers/known/w1"
        assert zk.exists(live) is not None
        # Without a controller nothing takes the partitions away, so the drain the first
        # SIGTERM starts cannot finish (until the drain timeout); the second stops at once.
        fleet.signal("c1", signal.SIGTERM)
        fleet.wait_exit("c1", 30)
        fleet.signal("w1", signal.SIGTERM)
        # (The live node is written first, then the known one.)
        assert wait_until(lambda: state(live) == state(known) == "draining", 60)
        fleet.signal("w1", signal.SIGTERM)
        assert fleet.wait_exit("w1", 30 + GOODBYE_TIMEOUT_S) == 128 + signal.SIGTERM
        # Gone with the process, not 30 s later, and not deregistered: the API lists it as dead.
        assert zk.exists(live) is None
        assert state(known) == "draining"
    finally:
        zk.stop()
        zk.close()
