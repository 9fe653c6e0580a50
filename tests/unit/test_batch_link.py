"""The batch pipeline's cluster link never raises on a send: a request that cannot go out is a
failed future, handled like a refused connection (raised, a send to a killed broker that
kafka-python's metadata no longer lists would end every worker's batch pipeline)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError, UnknownBrokerIdError

from strait.worker.batch.link import ClusterLink
from strait.worker.batch.protocol import WireError


class Client:
    def __init__(self, known: set[int], *, ready: set[int] | None = None, dead: set[int] | None = None) -> None:
        self.known = known
        self.ready = ready or set()
        self.dead = dead or set()
        self.sent: list[tuple[int, Any]] = []
        self.calls: list[tuple[int, int]] = []  # (node, timeout_ms) of blocking requests
        self._manager = SimpleNamespace(
            cluster=SimpleNamespace(brokers=lambda: [SimpleNamespace(node_id=n) for n in sorted(known)])
        )

    def is_ready(self, node_id: int) -> bool:
        return node_id in self.ready

    def send_and_receive(self, node_id: int, request: Any, timeout_ms: int) -> str:
        self.calls.append((node_id, timeout_ms))
        if node_id in self.dead:
            raise KafkaConnectionError(f"Node {node_id} not ready after {timeout_ms} ms")
        return f"answer from {node_id}"

    def maybe_connect(self, node_id: int) -> None:
        if node_id not in self.known:
            raise UnknownBrokerIdError(node_id)

    def send(self, node_id: int, request: Any) -> str:
        self.sent.append((node_id, request))
        return "future"

    def least_loaded_node(self, bootstrap_fallback: bool = False) -> int | None:
        return min(self.known) if self.known else None


def link(known: set[int], **client: Any) -> ClusterLink:
    made = object.__new__(ClusterLink)
    made.client = Client(known, **client)
    made._lanes = [made.client]
    made.timeout_ms = 30_000
    return made


def test_a_send_to_a_broker_no_longer_in_the_metadata_is_a_failed_request() -> None:
    future = link({1, 3}).send(2, object())
    assert future.failed() and isinstance(future.exception, UnknownBrokerIdError)


def test_a_send_to_a_known_broker_goes_out() -> None:
    made = link({1})
    assert made.send(1, "request") == "future" and made.client.sent == [(1, "request")]


def test_init_producer_id_without_any_broker_is_a_failed_request() -> None:
    future = link(set()).init_producer_id()
    assert future.failed() and isinstance(future.exception, WireError)


def test_a_blocking_request_goes_to_a_connected_broker_first() -> None:
    made = link({1, 2, 3}, ready={3})
    assert made._call("metadata") == "answer from 3"
    assert made.client.calls == [(3, 30_000)]


def test_a_dead_broker_costs_seconds_and_the_next_one_answers() -> None:
    # The pipeline has one thread: giving the one broker chosen the whole request timeout
    # (30 s) to become ready would stall it that long.
    made = link({1, 2, 3}, dead={1})
    assert made._call("metadata") == "answer from 2"
    assert made.client.calls == [(1, 5_000), (2, 5_000)]


def test_every_broker_dead_raises_the_last_failure() -> None:
    made = link({1, 2, 3, 4}, dead={1, 2, 3, 4})
    with pytest.raises(KafkaConnectionError):
        made._call("metadata")
    assert len(made.client.calls) == 3


def metadata_answer(topic: str, error_code: int = 0, leaders: dict[int, int] | None = None) -> Any:
    partitions = [SimpleNamespace(partition_index=p, leader_id=n) for p, n in (leaders or {}).items()]
    return SimpleNamespace(topics=[SimpleNamespace(name=topic, error_code=error_code, partitions=partitions)])


class LaterClient(Client):
    """Sends answered later: each send's future is kept for the test to complete."""

    def __init__(self, known: set[int], **client: Any) -> None:
        super().__init__(known, **client)
        self.futures: list[Any] = []

    def send(self, node_id: int, request: Any) -> Any:
        from kafka.future import Future

        self.sent.append((node_id, request))
        future = Future()
        self.futures.append(future)
        return future


def later_link(known: set[int], **client: Any) -> ClusterLink:
    made = object.__new__(ClusterLink)
    made.client = LaterClient(known, **client)
    made._lanes = [made.client]
    made.timeout_ms = 30_000
    return made


def test_leaders_asked_without_waiting_go_to_a_connected_broker() -> None:
    made = later_link({1, 2}, ready={2})
    future = made.leaders_async("t")
    assert not future.is_done and [n for n, _ in made.client.sent] == [2]
    made.client.futures[0].success(metadata_answer("t", leaders={0: 1, 1: -1, 2: 2}))
    assert future.value == {0: 1, 2: 2}  # a partition without a leader is left out
    assert made.client.calls == []  # nothing blocking


def test_leaders_asked_without_waiting_carry_the_error() -> None:
    made = later_link({1})
    missing = made.leaders_async("gone")
    made.client.futures[0].success(metadata_answer("gone", error_code=3))
    assert isinstance(missing.exception, WireError) and missing.exception.code == 3
    lost = made.leaders_async("t")
    made.client.futures[1].failure(KafkaConnectionError("socket disconnected"))
    assert isinstance(lost.exception, KafkaConnectionError)
    assert isinstance(later_link(set()).leaders_async("t").exception, WireError)  # no broker known


def test_a_partition_always_produces_on_its_own_lane_and_partitions_spread_over_lanes() -> None:
    # One connection per lane: a broker decrypts and handles one request per connection at a
    # time, while one partition's batches must arrive in order (its sequences).
    made = link({1})
    made._lanes = [Client({1}) for _ in range(4)]
    made.client = made._lanes[0]
    keys = [("t", p) for p in range(8)] + [("other", p) for p in range(8)]
    for _ in range(2):
        for key in keys:
            made.produce(1, {key: b"batch"}, timeout_ms=1_000)
    for key in keys:
        carried = [
            lane
            for lane, c in enumerate(made._lanes)
            for _, r in c.sent
            if r.topic_data[0].name == key[0] and r.topic_data[0].partition_data[0].index == key[1]
        ]
        assert carried == [made.lane_of(key)] * 2
    assert len({made.lane_of(key) for key in keys}) == 4
    assert link({1}).lane_of(("t", 5)) == 0  # one lane: everything on it


def test_one_produce_lane_unless_the_worker_configuration_names_more() -> None:
    from strait.config import WorkerConfig, parse_config

    assert WorkerConfig().batch_produce_lanes == 1
    raw = {
        "clusters": {"a": {"bootstrap.servers": "127.0.0.1:1"}, "b": {"bootstrap.servers": "127.0.0.1:2"}},
        "routes": [{"name": "r", "source": "a", "destination": "b", "include": [".*"]}],
    }
    overridden = parse_config(raw, {"STRAIT_WORKER__BATCH_PRODUCE_LANES": "4"})
    assert overridden.worker.batch_produce_lanes == 4
    for wrong in (0, 17):
        with pytest.raises(ValueError, match="batch_produce_lanes"):
            WorkerConfig(batch_produce_lanes=wrong)
