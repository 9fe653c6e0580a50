"""Refusals by a cluster are reported with the cluster, the principal and what was refused."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from strait import access_errors
from strait.access_errors import explain, name_clusters, on_client_error, principal, recent_refusal

SASL = {
    "bootstrap.servers": "127.0.0.1:9101",
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "strait",
    "sasl.password": "hunter2-very-secret",
}
MTLS = {"bootstrap.servers": "127.0.0.1:9102", "security.protocol": "SSL", "ssl.certificate.location": "/c/strait.pem"}


def test_the_principal_comes_from_the_properties_never_the_password() -> None:
    assert principal(SASL) == "User:strait"
    assert principal(MTLS) == "the client certificate /c/strait.pem"
    assert principal({"bootstrap.servers": "x"}) == "User:ANONYMOUS"


def test_an_acl_refusal_names_cluster_principal_and_resource() -> None:
    name_clusters({"src": SASL})
    error = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    message = explain(SASL, error, "orders")
    assert message.startswith("cluster src (127.0.0.1:9101) refused User:strait")
    assert "topic orders" in message and "TOPIC_AUTHORIZATION_FAILED" in message


def test_a_timeout_after_a_failed_handshake_says_why(caplog: pytest.LogCaptureFixture) -> None:
    name_clusters({"dst": MTLS})
    with caplog.at_level(logging.ERROR, logger="strait.access_errors"):
        on_client_error(MTLS, KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed"))
        on_client_error(MTLS, KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed"))
    assert len(caplog.records) == 1, "the same refusal is logged once a minute, not per retry"
    assert recent_refusal(MTLS) is not None
    message = explain(MTLS, KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata")))
    assert "cluster dst (127.0.0.1:9102) refused the client certificate /c/strait.pem: TLS failed" in message
    assert "then:" in message and "Failed to get metadata" in message


def test_other_errors_and_old_refusals_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    props = {"bootstrap.servers": "127.0.0.1:9103", "sasl.username": "u"}
    on_client_error(props, KafkaError(KafkaError._TRANSPORT, "down"))  # not a refusal
    assert recent_refusal(props) is None
    on_client_error(props, KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
    assert recent_refusal(props) is not None
    monkeypatch.setattr(access_errors, "RECENT_S", -1.0)
    assert recent_refusal(props) is None
    assert explain(props, RuntimeError("boom")) == "boom"
