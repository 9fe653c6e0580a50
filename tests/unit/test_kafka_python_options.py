"""librdkafka cluster properties translated for kafka-python (the balancer's admin client).

The TLS contexts are checked by a real handshake with an in-process TLS server that, like a
broker of the sandbox's ``mtls`` mode, requires a client certificate signed by the run's CA.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12

from strait import clients
from strait.sandbox import certs


@pytest.fixture(scope="module")
def pki() -> certs.Pki:
    return certs.issue_all(broker="broker", clients=("strait",), run="unit")


@pytest.fixture
def files(pki: certs.Pki, tmp_path: Path) -> dict[str, Path]:
    paths = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "strait.crt", "key": tmp_path / "strait.key"}
    paths["ca"].write_bytes(pki.ca_pem)
    paths["cert"].write_bytes(pki.clients["strait"].cert_pem)
    paths["key"].write_bytes(pki.clients["strait"].key_pem)
    return paths


@pytest.fixture
def broker(pki: certs.Pki, tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    """A TLS server on 127.0.0.1 requiring a client certificate; yields its port and the client CNs seen."""
    keystore = tmp_path / "broker.pem"
    keystore.write_bytes(pki.broker_keystore())
    ca = tmp_path / "server-ca.pem"
    ca.write_bytes(pki.ca_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(keystore))
    server_ctx.load_verify_locations(cafile=str(ca))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    seen: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    peer: Any = tls.getpeercert()
                    subject = {k: v for rdn in peer["subject"] for k, v in rdn}
                    seen.append(str(subject["commonName"]))
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    listener.close()
    thread.join(5)


def _handshake(ctx: ssl.SSLContext, port: int) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return tls.recv(2)


def test_scram_over_tls_in_any_case(files: dict[str, Path]) -> None:
    options = clients.kafka_python_options(
        {
            "bootstrap.servers": "127.0.0.1:9094",
            "security.protocol": "sasl_ssl",  # librdkafka takes it lower-case; kafka-python would fall to PLAINTEXT
            "sasl.mechanisms": "scram-sha-512",
            "sasl.username": "strait",
            "sasl.password": "secret-pw",
            "ssl.ca.location": str(files["ca"]),
            "socket.timeout.ms": 5000,  # tuning: left out
        }
    )
    ctx = options.pop("ssl_context")
    assert options == {
        "bootstrap_servers": "127.0.0.1:9094",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "strait",
        "sasl_plain_password": "secret-pw",
    }
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert len(ctx.get_ca_certs()) == 1


def test_plaintext_has_no_tls_context() -> None:
    assert clients.kafka_python_options({"bootstrap.servers": "h:9092", "client.id": "x"}) == {
        "bootstrap_servers": "h:9092",
        "client_id": "x",
    }


def test_mutual_tls_with_pem_files(files: dict[str, Path], broker: tuple[int, list[str]]) -> None:
    port, seen = broker
    props = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(files["ca"]),
        "ssl.certificate.location": str(files["cert"]),
        "ssl.key.location": str(files["key"]),
    }
    assert _handshake(clients.kafka_python_options(props)["ssl_context"], port) == b"ok"
    assert seen == ["strait"]


def test_mutual_tls_with_inline_pem(pki: certs.Pki, broker: tuple[int, list[str]]) -> None:
    port, seen = broker
    props: dict[str, Any] = {
        "security.protocol": "SSL",
        "ssl.ca.pem": pki.ca_pem.decode(),
        "ssl.certificate.pem": pki.clients["strait"].cert_pem.decode(),
        "ssl.key.pem": pki.clients["strait"].key_pem.decode(),
    }
    assert _handshake(clients.kafka_python_options(props)["ssl_context"], port) == b"ok"
    assert seen == ["strait"]


def test_mutual_tls_with_a_pkcs12_keystore(
    pki: certs.Pki, files: dict[str, Path], broker: tuple[int, list[str]]
) -> None:
    port, seen = broker
    key = load_pem_private_key(pki.clients["strait"].key_pem, None)
    cert = x509.load_pem_x509_certificate(pki.clients["strait"].cert_pem)
    keystore = files["ca"].parent / "strait.p12"
    keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(b"strait", key, cert, None, BestAvailableEncryption(b"store-pw"))  # type: ignore[arg-type]
    )
    props = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(files["ca"]),
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": "store-pw",
    }
    assert _handshake(clients.kafka_python_options(props)["ssl_context"], port) == b"ok"
    assert seen == ["strait"]


def test_without_a_client_certificate_the_broker_refuses(files: dict[str, Path], broker: tuple[int, list[str]]) -> None:
    port, seen = broker
    ctx = clients.kafka_python_options({"security.protocol": "SSL", "ssl.ca.location": str(files["ca"])})["ssl_context"]
    with pytest.raises((ssl.SSLError, OSError)):
        _handshake(ctx, port)
    assert seen == []


def test_verification_switches() -> None:
    off = clients.ssl_context({"enable.ssl.certificate.verification": "false"})
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    no_hostname = clients.ssl_context({"ssl.endpoint.identification.algorithm": "none"})
    assert no_hostname.verify_mode == ssl.CERT_REQUIRED and not no_hostname.check_hostname


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER"}, "sasl.mechanisms"),
        ({"security.protocol": "SASL_SSL", "sasl.oauthbearer.method": "oidc"}, "sasl.oauthbearer.method"),
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SSL", "ssl.engine.location": "/x"}, "ssl.engine.location"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "identification"),
    ],
)
def test_what_kafka_python_cannot_do_is_refused_by_name(props: dict[str, str], named: str) -> None:
    with pytest.raises(clients.UnsupportedProperty, match=named):
        clients.kafka_python_options(props)


def test_kafka_python_acl_refusals_name_the_cluster_principal_and_call() -> None:
    from kafka.errors import ClusterAuthorizationFailedError

    from strait.balancer.errors import ClusterError
    from strait.balancer.gateway import _Refusals

    class Admin:
        def list_partition_reassignments(self) -> None:
            raise ClusterAuthorizationFailedError("needs DESCRIBE permission")

        def close(self) -> str:
            return "closed"

    admin = _Refusals(Admin(), {"bootstrap.servers": "kafka-a:9094", "sasl.username": "strait"})
    with pytest.raises(ClusterError) as refused:
        admin.list_partition_reassignments()
    assert str(refused.value).startswith("cluster kafka-a:9094 refused User:strait: no ACL allows ")
    assert "list_partition_reassignments on the cluster (CLUSTER_AUTHORIZATION_FAILED)" in str(refused.value)
    assert admin.close() == "closed"
