"""The batch pipeline's cluster link never raises on a send: a request that cannot go out is a
failed future, handled like a refused connection (found by the chaos run: a killed broker that
kafka-python's metadata no longer listed ended every worker's batch pipeline)."""

from __future__ import annotations

from typing import Any

from kafka.errors import UnknownBrokerIdError

from strait.worker.batch.link import ClusterLink
from strait.worker.batch.wire import WireError


class Client:
    def __init__(self, known: set[int]) -> None:
        self.known = known
        self.sent: list[tuple[int, Any]] = []

    def maybe_connect(self, node_id: int) -> None:
        if node_id not in self.known:
            raise UnknownBrokerIdError(node_id)

    def send(self, node_id: int, request: Any) -> str:
        self.sent.append((node_id, request))
        return "future"

    def least_loaded_node(self, bootstrap_fallback: bool = False) -> int | None:
        return min(self.known) if self.known else None


def link(known: set[int]) -> ClusterLink:
    made = object.__new__(ClusterLink)
    made.client = Client(known)
    made.timeout_ms = 1000
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
