"""The REST API's contract, in process against the real ZooKeeper and source cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from strait import clients
from strait.config import parse_config
from strait.controller.discovery import SourceMetadata
from strait.controller.service import ControllerService
from strait.coordination import connect
from strait.demo import create_topic
from strait.sandbox import Sandbox
from strait.web.app import create_app
from strait.worker.destination import for_route

pytestmark = pytest.mark.integration

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def topic(sandbox: Sandbox) -> str:
    name = f"api-{uuid.uuid4().hex[:6]}"
    create_topic(sandbox.clusters["src"].props(), name, partitions=3)
    return name


@pytest.fixture
def api(sandbox: Sandbox) -> Iterator[TestClient]:
    config = parse_config(
        {
            "zookeeper": {"connect": sandbox.zookeeper, "root": f"/api-{uuid.uuid4().hex[:8]}"},
            "clusters": {"src": sandbox.clusters["src"].props(), "dst": sandbox.clusters["dst"].props()},
            "routes": [
                {"name": "one", "source": "src", "destination": "dst"},
                {"name": "two", "source": "src", "destination": "dst"},
                # More replicas than the destination has brokers: its topics cannot be created.
                {
                    "name": "three",
                    "source": "src",
                    "destination": "dst",
                    "naming": {"prefix": "three."},
                    "replication_factor": 9,
                },
            ],
            "controller": {"api_token": TOKEN},
        },
        environ={},
    )
    store = connect(connect=config.zookeeper.connect, root=config.zookeeper.root)
    # A short wait for topics the source does not know (the 404 case below).
    service = ControllerService(
        config=config,
        store=store,
        metadata=SourceMetadata(config.clusters),
        controller_id="t",
        new_topic_wait_s=1.0,
        destinations=lambda r: for_route(config.clusters[r.source], config.clusters[r.destination], r),
    )
    with TestClient(create_app(service, api_token=TOKEN)) as client:
        yield client
    # Its admin clients go now, while the clusters run: kept until the session's end, each
    # logged a failed connection every second once the sandbox had stopped.
    service.close()
    store.close()


def test_reads_answer(api: TestClient) -> None:
    health = api.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["leader"] is False  # no control loop runs here
    assert [r["name"] for r in api.get("/routes").json()] == ["one", "two", "three"]
    assert api.get("/topics").json() == []
    assert api.get("/workers").json() == []
    assert api.get("/assignment").json() == {}


def test_add_is_201_then_200_then_409(api: TestClient, topic: str) -> None:
    created = api.post(f"/topics/{topic}", json={"route": "one"}, headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.json() == {
        "route": "one",
        "topic": topic,
        "destination_topic": topic,
        "start": "earliest",
        "origin": "api",
        "partitions": 3,
    }
    again = api.post(f"/topics/{topic}", json={"route": "one", "start": "earliest"}, headers=AUTH)
    assert again.status_code == 200
    conflict = api.post(f"/topics/{topic}", json={"route": "one", "start": "latest"}, headers=AUTH)
    assert conflict.status_code == 409 and "different settings" in conflict.json()["error"]
    listed = api.get("/topics").json()
    assert [(t["route"], t["topic"], t["state"]) for t in listed] == [("one", topic, "waiting-for-workers")]
    detail = api.get(f"/topics/{topic}", params={"route": "one"}).json()
    assert [p["partition"] for p in detail["partition_detail"]] == [0, 1, 2]


def test_an_added_topics_destination_is_created_at_once_and_a_refused_one_is_502(
    api: TestClient, sandbox: Sandbox
) -> None:
    name = f"api-dst-{uuid.uuid4().hex[:6]}"
    create_topic(sandbox.clusters["src"].props(), name, partitions=2)
    created = api.post(f"/topics/{name}", json={"route": "one"}, headers=AUTH)
    assert created.status_code == 201, created.text
    # Created by the POST itself, with the source's partition count, before any worker runs.
    listed = clients.admin(sandbox.clusters["dst"].props()).list_topics(name, timeout=30).topics
    assert len(listed[name].partitions) == 2
    refused = api.post(f"/topics/{name}", json={"route": "three"}, headers=AUTH)
    assert refused.status_code == 502, refused.text
    error = refused.json()["error"]
    assert f"destination topic 'three.{name}' on cluster 'dst'" in error and "replication" in error.lower()
    # Nothing lost: the topic stays added (its workers would keep trying).
    assert api.get(f"/topics/{name}", params={"route": "three"}).status_code == 200


def test_a_topic_created_a_moment_ago_is_added_and_listed_at_once(api: TestClient, sandbox: Sandbox) -> None:
    name = f"api-new-{uuid.uuid4().hex[:6]}"
    # Created and added straight away, as the demo does: the source's brokers may not list it yet.
    create_topic(sandbox.clusters["src"].props(), name, partitions=2)
    created = api.post(f"/topics/{name}", json={"route": "one"}, headers=AUTH)
    assert created.status_code == 201, created.text
    detail = api.get(f"/topics/{name}")
    assert detail.status_code == 200, detail.text
    assert detail.json()["state"] == "waiting-for-workers" and detail.json()["partitions"] == 2


@pytest.mark.parametrize(
    ("path", "body", "status", "names"),
    [
        ("/topics/no-such-topic-xyz", {"route": "one"}, 404, "does not exist on source cluster"),
        ("/topics/bad name!", {"route": "one"}, 400, "invalid topic name"),
        ("/topics/{topic}", {"route": "nowhere"}, 400, "unknown route 'nowhere'"),
        ("/topics/{topic}", {"route": "one", "start": "middle"}, 400, "start"),
        ("/topics/{topic}", {"route": "one", "colour": "red"}, 400, "colour"),
        ("/topics/{topic}", {"route": "one", "destination_topic": "a/b"}, 400, "destination_topic"),
        ("/topics/{topic}", None, 400, "route is required"),
    ],
)
def test_bad_adds_name_the_problem(
    api: TestClient, topic: str, path: str, body: dict[str, str] | None, status: int, names: str
) -> None:
    response = api.post(path.format(topic=topic), json=body, headers=AUTH)
    assert response.status_code == status, response.text
    assert names in response.json()["error"]


def test_mutations_need_the_token(api: TestClient, topic: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        assert api.post(f"/topics/{topic}", json={"route": "one"}, headers=headers).status_code == 401
        assert api.delete(f"/topics/{topic}", params={"route": "one"}, headers=headers).status_code == 401
        assert api.post("/workers/w1/drain", headers=headers).status_code == 401
    assert "Bearer" in api.post(f"/topics/{topic}", json={"route": "one"}).json()["error"]


def test_remove_is_204_then_404(api: TestClient, topic: str) -> None:
    assert api.post(f"/topics/{topic}", json={"route": "two"}, headers=AUTH).status_code == 201
    assert api.delete(f"/topics/{topic}", params={"route": "two"}, headers=AUTH).status_code == 204
    missing = api.delete(f"/topics/{topic}", params={"route": "two"}, headers=AUTH)
    assert missing.status_code == 404 and "not replicated" in missing.json()["error"]
    assert api.get(f"/topics/{topic}", params={"route": "two"}).status_code == 404


def test_draining_an_unknown_worker_is_404(api: TestClient) -> None:
    response = api.post("/workers/ghost/drain", headers=AUTH)
    assert response.status_code == 404 and "ghost" in response.json()["error"]
