"""`observability.metrics_token`: the workers' and the controller's `/metrics` (and the
controller's `/metrics/targets`) answer only with `Authorization: Bearer <token>`."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter

from strait.metrics import exposition
from strait.sandbox import certs
from strait.web.dashboard import mount_observability
from tests.unit.test_metrics import make_observatory

TOKEN = "metrics-token-0123456789"


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("strait_test_scrapes", "a metric to find", registry=registry).inc()
    return registry


@pytest.fixture(autouse=True)
def no_process_token() -> Iterator[None]:
    yield
    exposition.require_token(None)


def _status(url: str, authorization: str | None = None, **kwargs: object) -> tuple[int, str, httpx.Headers]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = httpx.get(url, headers=headers, timeout=10, **kwargs)  # type: ignore[arg-type]
    return response.status_code, response.text, response.headers


def test_a_worker_endpoint_with_a_token_answers_only_its_bearer(registry: CollectorRegistry) -> None:
    url = exposition.serve_metrics(registry, "127.0.0.1:0", token=TOKEN)
    for authorization in (None, "Bearer wrong", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"):
        status, body, headers = _status(url, authorization)
        assert status == 401, authorization
        assert headers["www-authenticate"] == "Bearer"
        assert "strait_test_scrapes" not in body and TOKEN not in body
    status, body, _ = _status(url, f"Bearer {TOKEN}")
    assert status == 200 and "strait_test_scrapes_total 1.0" in body
    assert _status(url, f"bearer  {TOKEN}")[0] == 200  # the scheme in any case, spaces before the token


def test_without_a_token_the_endpoint_stays_open(registry: CollectorRegistry) -> None:
    url = exposition.serve_metrics(registry, "127.0.0.1:0")
    status, body, _ = _status(url)
    assert status == 200 and "strait_test_scrapes_total" in body


def test_the_process_token_protects_endpoints_served_without_one(registry: CollectorRegistry) -> None:
    # How `strait worker` protects the endpoint its worker process serves.
    exposition.require_token(TOKEN)
    url = exposition.serve_metrics(registry, "127.0.0.1:0")
    assert _status(url)[0] == 401
    assert _status(url, f"Bearer {TOKEN}")[0] == 200


def test_https_and_a_token_together(registry: CollectorRegistry, tmp_path: Path) -> None:
    pki = certs.issue_all(broker="metrics", clients=(), run="unit")
    cert, key, ca = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.write_bytes(pki.broker.cert_pem + pki.ca_pem)
    key.write_bytes(pki.broker.key_pem)
    ca.write_bytes(pki.ca_pem)
    url = exposition.serve_metrics(registry, "127.0.0.1:0", certfile=str(cert), keyfile=str(key), token=TOKEN)
    assert url.startswith("https://127.0.0.1:")
    assert _status(url, verify=str(ca))[0] == 401
    assert _status(url, f"Bearer {TOKEN}", verify=str(ca))[0] == 200


def test_the_compare_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert exposition.bearer_ok(f"Bearer {TOKEN}", TOKEN)
    assert not exposition.bearer_ok("Bearer nope", TOKEN)
    assert compared == [(TOKEN.encode(), TOKEN.encode()), (b"nope", TOKEN.encode())]
    assert exposition.bearer_ok(None, None)


def test_the_controller_metrics_and_targets_need_the_token_too() -> None:
    observatory, _store, _ = make_observatory(lambda keys: {k: (1, 1) for k in keys}, lambda: 5000.0)
    observatory.sample()
    app = FastAPI()
    mount_observability(app, observatory, metrics_token=TOKEN)
    client = TestClient(app)
    for path in ("/metrics", "/metrics/targets"):
        refused = client.get(path)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert "strait_workers" in client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert client.get("/observability").status_code == 200  # the dashboard's own data is not Prometheus's


def test_strait_worker_protects_its_metrics_with_the_configured_token(
    registry: CollectorRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strait.worker.process
    from strait.cli.worker import worker

    config = tmp_path / "strait.yaml"
    config.write_text(
        "clusters: {a: {bootstrap.servers: 'h:1'}}\n"
        "routes: [{name: r, source: a, destination: a}]\n"
        "observability: {metrics_token: '${env:TEST_METRICS_TOKEN}'}\n"
    )
    monkeypatch.setenv("TEST_METRICS_TOKEN", TOKEN)
    urls: list[str] = []
    # Only the copying is left out: the worker serves its metrics the way run_worker does.
    monkeypatch.setattr(
        strait.worker.process,
        "run_worker",
        lambda cfg, _id, **_: urls.append(exposition.serve_metrics(registry, "127.0.0.1:0")),
    )
    worker(config=config, worker_id="w1", pool=None, log_level="WARNING")
    assert _status(urls[0])[0] == 401
    assert _status(urls[0], f"Bearer {TOKEN}")[0] == 200
