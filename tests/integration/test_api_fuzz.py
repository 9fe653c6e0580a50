"""Fuzz the controller's REST API from its own OpenAPI spec (schemathesis), over HTTP, against a
real controller process on the real ZooKeeper and source cluster.

Asserted for every generated call, valid or not: no 5xx, the controller process stays up, and a
rejected call (4xx) leaves the state unchanged (`GET /topics` and `GET /assignment` compare equal
before and after it). Bounded and seeded, so it runs in CI and replays the same calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from strait.demo import Fleet, create_topic
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES_PER_OPERATION = 25  # operations without parameters stop early: ~150-200 calls in all


class Target:
    """The controller under test, and the state every rejected call must leave alone."""

    def __init__(self, fleet: Fleet, url: str, topic: str) -> None:
        self.fleet = fleet
        self.url = url
        self.topic = topic
        self.http = httpx.Client(base_url=url, timeout=30)
        self.calls: dict[int, int] = {}

    def state(self) -> tuple[Any, Any]:
        topics = self.http.get("/topics")
        assignment = self.http.get("/assignment")
        assert topics.status_code == 200 and assignment.status_code == 200
        return topics.json(), assignment.json()

    def alive(self) -> None:
        assert self.fleet.processes["c1"].poll() is None, "the controller process died"
        assert self.http.get("/health").json()["status"] == "ok"


@pytest.fixture(scope="module")
def target(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    src = sandbox.clusters["src"].props()
    topic = f"fuzz-{uuid.uuid4().hex[:6]}"
    create_topic(src, topic, 2)
    fleet = Fleet(
        zookeeper=sandbox.zookeeper,
        clusters={"src": src, "dst": sandbox.clusters["dst"].props()},
        routes=[
            {"name": "main", "source": "src", "destination": "dst"},
            {"name": "back", "source": "dst", "destination": "src"},
        ],
        workdir=Path(tmp_path_factory.mktemp("fuzz")),
        api_token=TOKEN,
    )
    url = fleet.start_controller("c1")
    assert httpx.post(f"{url}/topics/{topic}", json={"route": "main"}, headers=AUTH).status_code == 201
    target = Target(fleet, url, topic)
    try:
        yield target
        target.alive()
        print(f"\nAPI fuzz: responses by status {dict(sorted(target.calls.items()))}")
    finally:
        target.http.close()
        fleet.stop()


def _schema(url: str) -> Any:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    return schema


def _exercise(target: Target, method: str, path: str, **request: Any) -> httpx.Response:
    before = target.state()
    response = target.http.request(method, path, **request)
    target.calls[response.status_code] = target.calls.get(response.status_code, 0) + 1
    assert response.status_code < 500, f"{method} {path} {request} -> {response.status_code} {response.text}"
    if response.status_code >= 400:
        assert target.state() == before, f"rejected {method} {path} {request} changed the state"
        assert "error" in response.json(), response.text
    return response


def test_fuzzing_every_operation_from_the_openapi_spec(target: Target) -> None:
    schema = _schema(target.url)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /topics/{topic}",
        "DELETE /topics/{topic}",
        "POST /workers/{worker_id}/drain",
        "GET /topics/{topic}",
    }
    calls = 0
    for operation in operations:
        strategies = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
        if "{topic}" in operation.path:  # also the one topic that exists, so valid calls get far
            strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"topic": target.topic}))
        strategy = st.one_of(*strategies)

        @seed(20261129)
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy, authorised=st.booleans())
        def run(case: Any, authorised: bool) -> None:
            nonlocal calls
            calls += 1
            before = target.state()
            response = case.call(base_url=target.url, headers=AUTH if authorised else {})
            target.calls[response.status_code] = target.calls.get(response.status_code, 0) + 1
            assert response.status_code < 500, f"{case.as_curl_command()} -> {response.status_code} {response.text}"
            if response.status_code >= 400:
                assert target.state() == before, f"rejected call changed the state: {case.as_curl_command()}"

        run()
        target.alive()
    print(f"\nAPI fuzz: {calls} generated calls over {len(operations)} operations")
    assert calls >= 100


@pytest.mark.parametrize(
    ("method", "path", "request_options"),
    [
        ("POST", "/topics/..", {"json": {"route": "main"}}),
        ("POST", "/topics/.", {"json": {"route": "main"}}),
        ("POST", "/topics/" + "x" * 250, {"json": {"route": "main"}}),
        ("POST", "/topics/caf%C3%A9", {"json": {"route": "main"}}),
        ("POST", "/topics/a%00b", {"json": {"route": "main"}}),
        ("POST", "/topics/a%2Fb", {"json": {"route": "main"}}),
        ("POST", "/topics/{topic}", {"json": []}),
        ("POST", "/topics/{topic}", {"json": "main"}),
        ("POST", "/topics/{topic}", {"json": {"route": None}}),
        ("POST", "/topics/{topic}", {"json": {"route": ["main"]}}),
        ("POST", "/topics/{topic}", {"json": {"route": "main", "start": "latest"}}),  # conflicts: 409
        ("POST", "/topics/{topic}", {"json": {"route": "main", "destination_topic": "other"}}),
        ("POST", "/topics/{topic}", {"json": {"route": "main", "destination_topic": ""}}),
        ("POST", "/topics/{topic}", {"json": {"route": "main", "extra": 1}}),
        ("POST", "/topics/{topic}", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ("POST", "/topics/{topic}", {"content": b"\xff\xfe", "headers": {"content-type": "application/json"}}),
        ("POST", "/topics/{topic}", {"content": b"route=main", "headers": {"content-type": "text/plain"}}),
        ("POST", "/topics/{topic}", {"json": {"route": "x" * 10_000}}),
        ("DELETE", "/topics/{topic}", {"params": {"route": "nowhere"}}),
        ("DELETE", "/topics/{topic}", {}),  # several routes: route is required
        ("DELETE", "/topics/never-added", {"params": {"route": "main"}}),
        ("DELETE", "/topics/..", {"params": {"route": "main"}}),
        ("POST", "/workers/ghost/drain", {}),
        ("POST", "/workers/%20/drain", {}),
        ("GET", "/topics/{topic}", {"params": {"route": "nowhere"}}),
        ("GET", "/topics/..", {}),
        ("PUT", "/topics/{topic}", {"json": {"route": "main"}}),
        ("PATCH", "/assignment", {"json": {}}),
    ],
)
def test_hand_picked_bad_calls_are_refused_without_changing_anything(
    target: Target, method: str, path: str, request_options: dict[str, Any]
) -> None:
    options = {**request_options, "headers": {**AUTH, **request_options.get("headers", {})}}
    response = _exercise(target, method, path.format(topic=target.topic), **options)
    assert response.status_code >= 400, response.text
    target.alive()


def test_rejected_calls_without_the_token_change_nothing(target: Target) -> None:
    for method, path in (
        ("POST", f"/topics/{target.topic}"),
        ("DELETE", f"/topics/{target.topic}"),
        ("POST", "/workers/any/drain"),
    ):
        assert _exercise(target, method, path, params={"route": "main"}).status_code == 401
