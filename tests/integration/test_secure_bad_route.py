"""One route with a wrong password must not stop the others, and recovers once fixed.

A fleet (a controller and a worker as real processes) on the secure sandbox: route ``good``
copies from ``src`` (SASL_SSL/SCRAM-SHA-512 as the least-privilege user ``strait``), route ``bad``
from ``src-bad``, the same brokers and user, both to ``dst`` (mTLS). Both passwords come from
``${file:}`` references, read when a process starts. Both routes copy; then ``src-bad``'s file
gets a wrong password and the worker restarts (a bad deploy): ``good`` goes on copying, records
written meanwhile included, while ``bad``'s partitions and the worker's log say which cluster
refused which principal and why, and a controller started with the wrong file refuses a new
topic on ``bad`` with the same cause. Then the file is corrected and the worker restarted: ``bad``
copies every record it missed, and neither route loses one.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from strait.demo import Fleet, wait_until
from strait.sandbox import Sandbox
from strait.web.client import ApiError, ControllerClient
from tests.integration.test_secure_replication import COUNT, _copied, _create, _name, _produce, _read

pytestmark = pytest.mark.integration


def _secret_file(path: Path, value: str) -> Path:
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def bad_route_fleet(secure_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    src, dst = secure_sandbox.clusters["src"], secure_sandbox.clusters["dst"]
    workdir = tmp_path_factory.mktemp("bad-route-fleet")
    password = src.props()["sasl.password"]
    good_file = _secret_file(workdir / "src-password", password)
    bad_file = _secret_file(workdir / "src-bad-password", password)
    good = {**src.props(), "sasl.password": f"${{file:{good_file}}}"}
    bad = {**src.props(), "sasl.password": f"${{file:{bad_file}}}"}
    fleet = Fleet(
        zookeeper=secure_sandbox.zookeeper,
        clusters={"src": good, "src-bad": bad, "dst": dst.props()},
        routes=[
            {"name": "good", "source": "src", "destination": "dst"},
            {"name": "bad", "source": "src-bad", "destination": "dst"},
        ],
        workdir=workdir,
    )
    try:
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        api = ControllerClient(f"http://127.0.0.1:{fleet.ports['c1']}")
        assert wait_until(lambda: len(api.call("GET", "/workers")) == 1, 90)
        yield {
            "fleet": fleet,
            "api": api,
            "src": src.admin_props(),
            "dst": dst.admin_props(),
            "password": password,
            "wrong": f"wrong-{uuid.uuid4().hex}",
            "bad_file": bad_file,
        }
    finally:
        fleet.stop(timeout_s=30)


def _states(api: ControllerClient, topic: str, route: str) -> list[str]:
    detail = api.call("GET", f"/topics/{topic}", params={"route": route})["partition_detail"]
    return [str(p.get("state", "")) for p in detail]


REFUSAL = ("cluster src-bad", "refused User:strait", "authentication failed")


def _refused(api: ControllerClient, topic: str) -> str | None:
    """The first partition state of route ``bad`` that names the cluster, the principal and the cause."""
    for state in _states(api, topic, "bad"):
        if all(w in state for w in REFUSAL):
            return state
    return None


def _restart_worker(fleet: Fleet) -> None:
    fleet.signal("w1", signal.SIGTERM)
    fleet.wait_exit("w1", timeout_s=90)
    fleet.start_worker("w1")


def test_a_wrong_password_on_one_route_stops_only_that_route_and_it_recovers_when_fixed(
    bad_route_fleet: dict[str, Any],
) -> None:
    fleet: Fleet = bad_route_fleet["fleet"]
    api: ControllerClient = bad_route_fleet["api"]
    src, dst = bad_route_fleet["src"], bad_route_fleet["dst"]
    secrets = (bad_route_fleet["password"], bad_route_fleet["wrong"])
    good_topic, bad_topic = _name("sec-good"), _name("sec-bad")
    for topic in (good_topic, bad_topic):
        _create(src, topic)
        _produce(src, topic, 0, COUNT)
    api.call("POST", f"/topics/{good_topic}", json={"route": "good"})
    api.call("POST", f"/topics/{bad_topic}", json={"route": "bad"})
    for topic in (good_topic, bad_topic):
        assert wait_until(partial(_copied, dst, topic, COUNT), 180, interval_s=2.0), f"{topic} not copied"

    # The bad deploy: a wrong password for src-bad only.
    _secret_file(bad_route_fleet["bad_file"], bad_route_fleet["wrong"])
    _restart_worker(fleet)
    _produce(src, good_topic, COUNT, COUNT)
    _produce(src, bad_topic, COUNT, COUNT)
    assert wait_until(partial(_copied, dst, good_topic, 2 * COUNT), 180, interval_s=2.0), "the good route stopped"
    assert wait_until(lambda: _refused(api, bad_topic) is not None, 180, interval_s=2.0), (
        f"no clear refusal on the bad route: {_states(api, bad_topic, 'bad')}"
    )
    refusal = _refused(api, bad_topic) or ""
    assert not any(secret in refusal for secret in secrets)
    copied = _read(dst, bad_topic)
    assert all(max(got, default=-1) < COUNT for got in copied.values()), "records copied with a wrong password"
    log = (fleet.workdir / "w1.log").read_text(errors="replace")
    assert all(w in log for w in REFUSAL), "the worker's log does not say who was refused and why"
    assert not any(secret in log for secret in secrets)

    # A controller started with the wrong password refuses a new topic on the route, saying why.
    fleet.start_controller("c2")
    extra = _name("sec-bad-new")
    _create(src, extra)
    with pytest.raises(ApiError) as refused:
        ControllerClient(f"http://127.0.0.1:{fleet.ports['c2']}").call(
            "POST", f"/topics/{extra}", json={"route": "bad"}
        )
    assert refused.value.status == 503 and all(w in refused.value.message for w in REFUSAL), refused.value.message
    assert not any(secret in refused.value.message for secret in secrets)

    # The fix: the right password in the file, and the worker restarted to read it.
    _secret_file(bad_route_fleet["bad_file"], bad_route_fleet["password"])
    _restart_worker(fleet)
    _produce(src, good_topic, 2 * COUNT, COUNT)
    assert wait_until(partial(_copied, dst, bad_topic, 2 * COUNT), 240, interval_s=2.0), (
        f"the bad route did not recover: {_states(api, bad_topic, 'bad')}"
    )
    assert wait_until(partial(_copied, dst, good_topic, 3 * COUNT), 180, interval_s=2.0)
    for topic, count in ((good_topic, 3 * COUNT), (bad_topic, 2 * COUNT)):
        for partition, got in _read(dst, topic).items():
            assert sorted(set(got)) == list(range(count)), f"{topic}/{partition}: records lost"
