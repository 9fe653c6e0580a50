"""`/metrics` on a worker and on the controller after replicating known records."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
import typer
from typer.testing import CliRunner

from strait import clients
from strait.cli.status import status
from strait.demo import create_topic, encode_record, wait_until
from strait.sandbox import Sandbox
from tests.integration.observability import ObservedFleet, Samples, scrape, total, value, worker_metrics_url

pytestmark = pytest.mark.integration

ROUTE = "main"
TOPIC = "metrics-known"
PER_PARTITION = 300


def produce(props: dict[str, object], topic: str, partition: int, first: int, count: int) -> None:
    producer = clients.producer(props, **{"enable.idempotence": True})
    for seq in range(first, first + count):
        value_, headers, timestamp = encode_record(partition, seq)
        producer.produce(topic, value=value_, partition=partition, headers=headers, timestamp=timestamp)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def fleet(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedFleet]:
    src = sandbox.clusters["src"].props()
    create_topic(src, TOPIC, partitions=2)
    for partition in (0, 1):
        produce(src, TOPIC, partition, 0, PER_PARTITION)
    fleet = ObservedFleet(
        zookeeper=sandbox.zookeeper,
        clusters={"src": src, "dst": sandbox.clusters["dst"].props()},
        routes=[{"name": ROUTE, "source": "src", "destination": "dst"}],
        workdir=tmp_path_factory.mktemp("metrics-fleet"),
    )
    try:
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        fleet.api().add_topic(TOPIC)
        yield fleet
    finally:
        fleet.stop()


def test_worker_and_controller_metrics_show_the_copied_records_and_lag(fleet: ObservedFleet, sandbox: Sandbox) -> None:
    url = None

    def worker_scrape() -> Samples:
        nonlocal url
        url = url or worker_metrics_url(fleet, "w1")
        assert url, "the worker has not published its metrics URL"
        return scrape(url)

    def copied_everything() -> bool:
        samples = worker_scrape()
        return total(samples, "strait_copied_records_total", topic=TOPIC) == 2 * PER_PARTITION

    assert wait_until(copied_everything, 90), "the worker never reported every record copied"
    worker = worker_scrape()
    for partition in ("0", "1"):
        labels = {"route": ROUTE, "topic": TOPIC, "partition": partition}
        assert value(worker, "strait_copied_records_total", **labels) == PER_PARTITION
        assert value(worker, "strait_checkpoint_offset", **labels) == PER_PARTITION
        assert value(worker, "strait_replication_lag_records", **labels) == 0
        assert value(worker, "strait_replication_lag_seconds", **labels) == 0
        assert value(worker, "strait_partition_state", **labels, state="ok") == 1
        assert (value(worker, "strait_copied_bytes_total", **labels) or 0) > PER_PARTITION * 10
    assert value(worker, "strait_end_to_end_latency_seconds_count", route=ROUTE, topic=TOPIC) == 2 * PER_PARTITION
    assert total(worker, "strait_stage_seconds_count", stage="produce_ack") == 2 * PER_PARTITION
    assert total(worker, "strait_stage_seconds_count", stage="queued") == 2 * PER_PARTITION
    assert total(worker, "strait_stage_seconds_count", stage="fetch_wait") > 0
    assert total(worker, "strait_stage_seconds_count", stage="checkpoint_commit") > 0
    # The destination broker's id labels the acknowledgements (the batch pipeline's own round
    # trips; librdkafka's statistics in record mode).
    assert wait_until(lambda: total(worker_scrape(), "strait_broker_rtt_seconds", cluster="destination") > 0, 15), (
        "no per-broker round-trip times"
    )

    controller_url = fleet.url() + "/metrics"

    def controller_caught_up() -> bool:
        samples = scrape(controller_url)
        lags = [value(samples, "strait_committed_lag_records", route=ROUTE, topic=TOPIC, partition=p) for p in "01"]
        return lags == [0, 0]

    assert wait_until(controller_caught_up, 30), "the controller never saw the checkpoints reach the end"
    controller = scrape(controller_url)
    assert value(controller, "strait_controller_leader", controller="c1") == 1
    assert value(controller, "strait_workers", state="active") == 1
    assert value(controller, "strait_worker_partitions", worker="w1") == 2
    assert value(controller, "strait_unassigned_partitions") == 0
    assert value(controller, "strait_route_topics", route=ROUTE) == 1
    assert value(controller, "strait_stuck_partitions") == 0

    # Stop the worker, produce 100 more records: the controller, reading the source cluster,
    # shows exactly that lag; once the worker runs again it drains to 0.
    pid = fleet.processes["w1"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        produce(sandbox.clusters["src"].props(), TOPIC, 0, PER_PARTITION, 100)
        lag_metric = "strait_committed_lag_records"
        assert wait_until(
            lambda: value(scrape(controller_url), lag_metric, route=ROUTE, topic=TOPIC, partition="0") == 100, 20
        ), "the controller did not show the lag of 100 records"
        assert value(scrape(controller_url), "strait_topic_lag_records", route=ROUTE, topic=TOPIC) == 100
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_until(controller_caught_up, 30), "lag did not return to 0 after the worker resumed"
    assert wait_until(
        lambda: (
            value(worker_scrape(), "strait_copied_records_total", route=ROUTE, topic=TOPIC, partition="0")
            == PER_PARTITION + 100
        ),
        30,
    )


def test_strait_status_prints_the_fleet_at_a_glance(fleet: ObservedFleet) -> None:
    app = typer.Typer()
    app.command()(status)
    assert wait_until(lambda: "w1" in CliRunner().invoke(app, ["--api", fleet.url()]).output, 20)
    result = CliRunner().invoke(app, ["--api", fleet.url()])
    assert result.exit_code == 0, result.output
    for text in ("Workers", "w1", "active", f"{ROUTE}/{TOPIC}", "leader"):
        assert text in result.output


def test_the_current_balancer_execution_shows_in_metrics_and_the_view(fleet: ObservedFleet, sandbox: Sandbox) -> None:
    from strait.balancer.state import StateStore

    store = StateStore(sandbox.clusters["src"].props())
    try:
        store.start("exec-obs", {"moves": []}, {})
        moves = {"a": {"state": "done"}, "b": {"state": "running"}, "c": {"state": "pending"}, "d": {"state": "done"}}
        store.save_progress("exec-obs", {"status": "running", "moves": moves, "heartbeat": time.time()})
    finally:
        store.close()
    metric = "strait_balance_progress_ratio"
    labels = {"cluster": "src", "execution": "exec-obs", "status": "running"}
    assert wait_until(lambda: value(scrape(fleet.url() + "/metrics"), metric, **labels) == 0.5, 40)
    balance = httpx.get(fleet.url() + "/observability", timeout=10).json()["balance"]["src"]
    assert balance["by_state"] == {"done": 2, "pending": 1, "running": 1}
    assert value(scrape(fleet.url() + "/metrics"), "strait_balance_moves", cluster="src", state="done") == 2
