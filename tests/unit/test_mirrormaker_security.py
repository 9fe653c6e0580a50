"""A cluster's librdkafka security properties, translated for MirrorMaker 2's Java clients."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strait.bench.mirrormaker import UnsupportedSecurity, java_client_properties, render_properties
from strait.sandbox import certs

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def pki() -> certs.Pki:
    return certs.issue_all(broker="broker", clients=("strait",), run="unit")


@pytest.fixture
def files(pki: certs.Pki, tmp_path: Path) -> dict[str, str]:
    paths = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "strait.crt", "key": tmp_path / "strait.key"}
    paths["ca"].write_bytes(pki.ca_pem)
    paths["cert"].write_bytes(pki.clients["strait"].cert_pem)
    paths["key"].write_bytes(pki.clients["strait"].key_pem)
    return {k: str(v) for k, v in paths.items()}


def _load_properties(text: str) -> dict[str, str]:
    """What java.util.Properties.load reads from ``key = value`` lines (the escapes used here)."""
    escapes = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}
    loaded = {}
    for line in text.splitlines():
        key, _, value = line.partition(" = ")
        loaded[key] = re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), value)
    return loaded


def test_scram_over_tls(files: dict[str, str]) -> None:
    java = java_client_properties(
        {
            "bootstrap.servers": "127.0.0.1:9094",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": 'p"w\\d',
            "ssl.ca.location": files["ca"],
            "linger.ms": 5,  # tuning: not a security setting, not carried
        }
    )
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="admin" password="p\\"w\\\\d";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": files["ca"],
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_mutual_tls_becomes_a_pem_keystore(pki: certs.Pki, files: dict[str, str]) -> None:
    java = java_client_properties(
        {
            "bootstrap.servers": "127.0.0.1:9095",
            "security.protocol": "SSL",
            "ssl.ca.location": files["ca"],
            "ssl.certificate.location": files["cert"],
            "ssl.key.location": files["key"],
        }
    )
    assert java == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": files["ca"],
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": pki.clients["strait"].cert_pem.decode(),
        "ssl.keystore.key": pki.clients["strait"].key_pem.decode(),
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_other_forms_of_tls_settings(pki: certs.Pki) -> None:
    inline = java_client_properties(
        {
            "security.protocol": "SSL",
            "ssl.ca.pem": pki.ca_pem.decode(),
            "ssl.certificate.pem": "CERT",
            "ssl.key.pem": "-----BEGIN ENCRYPTED PRIVATE KEY-----\n...",
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert inline["ssl.truststore.certificates"] == pki.ca_pem.decode()
    assert inline["ssl.keystore.key"].startswith("-----BEGIN ENCRYPTED PRIVATE KEY")
    assert inline["ssl.key.password"] == "kp"
    assert inline["ssl.endpoint.identification.algorithm"] == ""
    pkcs12 = java_client_properties(
        {"security.protocol": "SSL", "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "sp"}
    )
    assert (pkcs12["ssl.keystore.type"], pkcs12["ssl.keystore.location"]) == ("PKCS12", "/k.p12")
    assert pkcs12["ssl.keystore.password"] == "sp"


def test_plaintext_adds_nothing() -> None:
    assert java_client_properties({"bootstrap.servers": "h:9092"}) == {}
    assert java_client_properties({"bootstrap.servers": "h:9092", "ssl.ca.location": "/unused"}) == {}
    plain = java_client_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}
    )
    assert plain["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER"}, "sasl.mechanisms"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256"}, "sasl.username"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
                "sasl.kerberos.keytab": "/k",
            },
            "sasl.kerberos.keytab",
        ),
        ({"security.protocol": "SSL", "ssl.ca.location": "/"}, "CA folder"),
        (
            {"security.protocol": "SSL", "ssl.certificate.pem": "C", "ssl.key.pem": "-----BEGIN EC PRIVATE KEY"},
            "PKCS#8",
        ),
        ({"security.protocol": "SSL", "ssl.certificate.location": "/nonexistent.crt"}, "ssl.certificate.location"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, "enable.ssl"),
        ({"security.protocol": "QUIC"}, "security.protocol"),
    ],
)
def test_what_has_no_java_equivalent_is_refused_by_name(props: dict[str, str], named: str) -> None:
    with pytest.raises(UnsupportedSecurity, match=named):
        java_client_properties(props)


def test_rendered_per_cluster_and_read_back_intact(pki: certs.Pki, files: dict[str, str]) -> None:
    src = java_client_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": "pw",
            "ssl.ca.location": files["ca"],
        }
    )
    dst = java_client_properties(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": files["ca"],
            "ssl.certificate.location": files["cert"],
            "ssl.key.location": files["key"],
        }
    )
    text = render_properties(
        src_bootstrap="a:1",
        dst_bootstrap="b:2",
        topics_pattern="t",
        tasks=1,
        run_id="bench-x",
        src_security=src,
        dst_security=dst,
    )
    assert all(" = " in line for line in text.splitlines()), "a PEM value must stay on its line"
    loaded = _load_properties(text)
    assert loaded["src.security.protocol"] == "SASL_SSL"
    assert loaded["src.sasl.jaas.config"] == f'{SCRAM} required username="admin" password="pw";'
    assert loaded["dst.security.protocol"] == "SSL"
    assert loaded["dst.ssl.keystore.key"] == pki.clients["strait"].key_pem.decode()
    assert loaded["dst.ssl.keystore.certificate.chain"] == pki.clients["strait"].cert_pem.decode()
    assert loaded["dst.ssl.truststore.location"] == files["ca"]
    assert "src.ssl.keystore.type" not in loaded
