"""Every metric a panel of `deploy/grafana/strait.json` queries is exported by a running controller or worker.

A controller and a worker (real processes, on the session's sandbox clusters) copy a little
traffic, so the families that only get series once records flow (counters, latency
histograms, per-broker round trips) have them; a finished balancer execution in the source
cluster gives the balancer families theirs, and the controller's balance watch (on the source
cluster, measuring traffic, proposing nothing within the test) the watch families theirs. Then
both `/metrics` pages are scraped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from strait import clients
from strait.demo import create_topic, encode_record, wait_until
from strait.sandbox import Sandbox
from tests import grafana
from tests.integration.observability import ObservedFleet, scrape, total, worker_metrics_url

pytestmark = pytest.mark.integration

ROUTE = "grafana"
TOPIC = "grafana-panels"
RECORDS = 200

# Families whose series exist only while something is wrong (a stuck partition, a refused
# checkpoint, a gap in the source offsets): a healthy fleet declares them (checked below) but
# has no series for them yet.
EVENT_ONLY = {"strait_partition_stuck", "strait_checkpoint_violations_total", "strait_offset_gaps_total"}
# Families of the balance watch with series only while it proposes a plan.
EVENT_ONLY |= {"strait_balance_proposal_moves"}
# The watch on the source cluster: sizes given (so the disk spread is measured), traffic sampled
# every second, and an after_s the test never reaches.
WATCH = {"clusters": ["src"], "watch": True, "traffic": True, "interval_s": 1, "after_s": 3600}
WATCH_CAPACITIES = {"src": {"*": "100GB"}}


@pytest.fixture(scope="module")
def fleet(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedFleet]:
    src = sandbox.clusters["src"].props()
    create_topic(src, TOPIC, partitions=2)
    fleet = ObservedFleet(
        zookeeper=sandbox.zookeeper,
        clusters={"src": src, "dst": sandbox.clusters["dst"].props()},
        routes=[{"name": ROUTE, "source": "src", "destination": "dst"}],
        workdir=tmp_path_factory.mktemp("grafana-fleet"),
        balance={**WATCH, "capacities": WATCH_CAPACITIES},
    )
    try:
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        fleet.api().add_topic(TOPIC)
        yield fleet
    finally:
        fleet.stop()


def _produce(props: dict[str, str], count: int) -> None:
    producer = clients.producer(props, **{"enable.idempotence": True})
    for seq in range(count):
        partition = seq % 2
        value, headers, timestamp = encode_record(partition, seq)
        producer.produce(TOPIC, value=value, partition=partition, headers=headers, timestamp=timestamp)
    assert producer.flush(30) == 0


def _finished_balancer_execution(props: dict[str, str]) -> None:
    from strait.balancer.state import StateStore

    store = StateStore(props)
    try:
        store.start("exec-grafana", {"moves": []}, {})
        moves = {"a": {"state": "done"}, "b": {"state": "done"}}
        store.save_progress("exec-grafana", {"status": "done", "moves": moves, "heartbeat": time.time()})
    finally:
        store.close()


def test_every_metric_the_dashboard_queries_is_exported(fleet: ObservedFleet, sandbox: Sandbox) -> None:
    queried: dict[str, str] = {}
    for where, expr in grafana.queries(grafana.load()):
        for name in grafana.metric_names(expr):
            queried.setdefault(name, where)
    assert len(queried) >= 30

    src = sandbox.clusters["src"].props()
    _finished_balancer_execution(src)
    _produce(src, RECORDS)
    worker_url = None

    def copied() -> bool:
        nonlocal worker_url
        worker_url = worker_url or worker_metrics_url(fleet, "w1")
        return bool(worker_url) and total(scrape(worker_url), "strait_copied_records_total", route=ROUTE) >= RECORDS

    assert wait_until(copied, 90), "the worker never reported the records copied"
    assert worker_url is not None
    urls = (fleet.url() + "/metrics", worker_url)

    declared: set[str] = set()
    present: set[str] = set()  # every name seen with a series in some scrape, as Prometheus would store it

    def scrape_both() -> set[str]:
        for url in urls:
            names, series = grafana.exported(httpx.get(url, timeout=10).raise_for_status().text)
            declared.update(names)
            present.update(series)
        return present

    # librdkafka's statistics (broker round trips) arrive every 5 s, the controller samples every
    # second and reads the balancer state from the source cluster: wait for every series to show.
    wanted = set(queried) - EVENT_ONLY
    assert wait_until(lambda: wanted <= scrape_both(), 60), f"no series for {sorted(wanted - present)}"
    undeclared = {name: queried[name] for name in queried if name not in declared}
    assert not undeclared, f"queried by the dashboard but exported by neither process: {undeclared}"
