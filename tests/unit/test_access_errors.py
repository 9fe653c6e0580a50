"""Refusals by a cluster are reported with the cluster, the principal and what was refused."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from strait import access_errors
from strait.access_errors import explain, name_clusters, on_client_error, principal, recent_refusal
from strait.sandbox import certs

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
        on_client_error(  # librdkafka's timing differs on every retry: still the same refusal
            MTLS, KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed (after 12ms in state X)")
        )
        on_client_error(
            MTLS, KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed (after 7ms in state X)")
        )
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


# librdkafka's texts for the two directions of a security.protocol mismatch (librdkafka 2.x).
PLAINTEXT_AT_TLS = (
    "127.0.0.1:9104/bootstrap: Disconnected while requesting ApiVersion: might be caused by incorrect "
    "security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10 "
    "(see api.version.request) (after 3ms in state APIVERSION_QUERY)"
)
TLS_AT_PLAINTEXT = (
    "ssl://127.0.0.1:9105/bootstrap: SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker "
    "listener? (after 2ms in state SSL_HANDSHAKE)"
)


def test_a_plaintext_client_at_a_tls_listener_is_told_to_check_security_protocol() -> None:
    props = {"bootstrap.servers": "127.0.0.1:9104"}
    name_clusters({"edge": props})
    error = KafkaError(KafkaError._TRANSPORT, PLAINTEXT_AT_TLS)
    hint = access_errors.protocol_mismatch(props, error)
    assert hint is not None and "security.protocol mismatch" in hint and "expect TLS" in hint
    on_client_error(props, error)
    message = explain(props, KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata")))
    assert message.startswith("cluster edge (127.0.0.1:9104) refused User:ANONYMOUS: security.protocol mismatch")
    assert "set security.protocol to SSL or SASL_SSL" in message


def test_a_tls_client_at_a_plaintext_listener_is_told_the_listener_is_plaintext() -> None:
    props = {"bootstrap.servers": "127.0.0.1:9105", "security.protocol": "ssl"}
    for code, text in (
        (KafkaError._SSL, TLS_AT_PLAINTEXT),
        (KafkaError._SSL, "SSL handshake failed: error:0A00010B:SSL routines::wrong version number"),
    ):
        hint = access_errors.protocol_mismatch(props, KafkaError(code, text))
        assert hint is not None and "listener seems to be plaintext" in hint
    on_client_error(props, KafkaError(KafkaError._SSL, TLS_AT_PLAINTEXT))
    assert "security.protocol mismatch" in (recent_refusal(props) or "")


def test_other_transport_errors_are_no_mismatch() -> None:
    plain = {"bootstrap.servers": "127.0.0.1:9106"}
    tls = {**plain, "security.protocol": "SSL"}
    down = "Connect to ipv4#127.0.0.1:9106 failed: Connection refused (after 0ms in state CONNECT)"
    assert access_errors.protocol_mismatch(plain, KafkaError(KafkaError._TRANSPORT, down)) is None
    assert access_errors.protocol_mismatch(tls, KafkaError(KafkaError._TRANSPORT, down)) is None
    # The ApiVersion hint means nothing for a client that already speaks TLS.
    assert access_errors.protocol_mismatch(tls, KafkaError(KafkaError._TRANSPORT, PLAINTEXT_AT_TLS)) is None
    on_client_error(plain, KafkaError(KafkaError._TRANSPORT, down))
    assert recent_refusal(plain) is None
    # One broker's disconnect is no reason to offer it a TLS handshake: only all brokers down is.
    assert access_errors.identity(plain) not in access_errors._sniffed


def test_two_clusters_at_one_address_keep_their_own_names_and_refusals() -> None:
    good = {**SASL, "bootstrap.servers": "127.0.0.1:9107"}
    bad = {**good, "sasl.password": "wrong-password"}
    name_clusters({"src": good, "src-bad": bad})
    assert access_errors.cluster_label(good) == "cluster src (127.0.0.1:9107)"
    assert access_errors.cluster_label(bad) == "cluster src-bad (127.0.0.1:9107)"
    on_client_error(bad, KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed"))
    assert (recent_refusal(bad) or "").startswith("cluster src-bad (127.0.0.1:9107) refused User:strait")
    assert recent_refusal(good) is None, "the other user's refusal must not explain this one's failures"
    assert explain(good, RuntimeError("timed out")) == "timed out"
    # The key is a digest: no password is kept by it.
    assert "wrong-password" not in access_errors.identity(bad)


@pytest.fixture
def tls_listener(tmp_path: Path) -> Iterator[int]:
    """A local TLS server (the sandbox's broker certificate) that completes handshakes, then hangs up."""
    pki = certs.issue_all(broker="broker", clients=(), run="unit")
    chain = tmp_path / "broker.pem"
    chain.write_bytes(pki.broker_keystore())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    yield from _serve(lambda conn: context.wrap_socket(conn, server_side=True).close())


@pytest.fixture
def plaintext_listener() -> Iterator[int]:
    """A server that reads what comes, as a plaintext Kafka listener would, and hangs up."""

    def read_and_hang_up(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.close()

    yield from _serve(read_and_hang_up)


def _serve(handle: Callable[[socket.socket], object]) -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def run() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError, ssl.SSLError):
                conn.settimeout(5)
                handle(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_a_tls_listener_is_told_from_a_plaintext_one(tls_listener: int, plaintext_listener: int) -> None:
    assert access_errors.speaks_tls("127.0.0.1", tls_listener)
    assert not access_errors.speaks_tls("127.0.0.1", plaintext_listener)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert not access_errors.speaks_tls("127.0.0.1", port)


def test_bootstrap_addresses_are_parsed() -> None:
    assert access_errors.addresses("a:1, PLAINTEXT://b:2,[::1]:3,bad") == [("a", 1), ("b", 2), ("::1", 3)]


def test_a_plaintext_client_that_finds_no_broker_at_a_tls_port_learns_why(tls_listener: int) -> None:
    props = {"bootstrap.servers": f"127.0.0.1:{tls_listener}"}
    name_clusters({"edge-tls": props})
    on_client_error(props, KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    deadline = time.monotonic() + 30
    while recent_refusal(props) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    said = recent_refusal(props) or ""
    assert said.startswith(f"cluster edge-tls (127.0.0.1:{tls_listener}) refused User:ANONYMOUS"), said
    assert "security.protocol mismatch" in said and "answered a TLS handshake" in said
    # A TLS client is never sniffed: its own handshake says what is wrong.
    tls_props = {**props, "security.protocol": "SSL"}
    on_client_error(tls_props, KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert access_errors.identity(tls_props) not in access_errors._sniffed
