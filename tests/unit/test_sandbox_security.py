"""Sandbox security without brokers: modes, the run's PKI and passwords, broker settings, client properties."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from strait.sandbox import ClusterState, SandboxError, SandboxSpec, kafka
from strait.sandbox.sandbox import BrokerState
from strait.sandbox.security import (
    Credentials,
    SecurityMode,
    broker_settings,
    client_props,
    parse_option,
    scram_arguments,
)


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Credentials:
    return Credentials.create(tmp_path_factory.mktemp("creds") / "security", run="unit")


def test_security_option_is_one_mode_or_one_per_cluster() -> None:
    assert parse_option("MTLS") == "mtls"
    assert parse_option("src=sasl_ssl, dst=mtls") == {"src": "sasl_ssl", "dst": "mtls"}
    with pytest.raises(SandboxError, match="unknown security mode 'kerberos'"):
        parse_option("kerberos")
    with pytest.raises(SandboxError, match="CLUSTER=MODE"):
        parse_option("src=tls,=mtls")


def test_spec_gives_every_cluster_a_mode_and_refuses_unknown_clusters() -> None:
    spec = SandboxSpec(clusters=("src", "dst"), security={"dst": "tls"})
    assert spec.security_modes() == {"src": SecurityMode.PLAINTEXT, "dst": SecurityMode.TLS}
    assert SandboxSpec(clusters=("a", "b"), security="sasl_ssl").security_modes() == {
        "a": SecurityMode.SASL_SSL,
        "b": SecurityMode.SASL_SSL,
    }
    with pytest.raises(SandboxError, match=r"unknown cluster.*typo"):
        SandboxSpec(clusters=("src",), security={"typo": "tls"}).validate()


def _cluster(mode: SecurityMode, credentials: Credentials | None) -> ClusterState:
    broker = BrokerState(id=1, rack=None, port=9092, controller_port=9093, log_dirs=[], config="", log="")
    return ClusterState(name="c", cluster_id="x", brokers=[broker], security=mode, credentials=credentials)


def test_plaintext_props_are_unchanged() -> None:
    cluster = _cluster(SecurityMode.PLAINTEXT, None)
    assert cluster.props() == cluster.admin_props() == {"bootstrap.servers": "127.0.0.1:9092"}


def test_client_props_per_mode(credentials: Credentials) -> None:
    sasl = _cluster(SecurityMode.SASL_SSL, credentials)
    assert sasl.props() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(credentials.ca),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "strait",
        "sasl.password": credentials.password("strait"),
    }
    assert sasl.admin_props()["sasl.username"] == "admin"
    mtls = _cluster(SecurityMode.MTLS, credentials)
    assert mtls.props()["security.protocol"] == "SSL"
    assert mtls.props()["ssl.certificate.location"] == str(credentials.certificate("strait"))
    assert mtls.admin_props()["ssl.key.location"] == str(credentials.key("admin"))
    tls = client_props(SecurityMode.TLS, "127.0.0.1:1", credentials, "strait")
    assert tls == {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SSL",
        "ssl.ca.location": str(credentials.ca),
    }


def test_secrets_stay_out_of_reprs(credentials: Credentials) -> None:
    cluster = _cluster(SecurityMode.SASL_SSL, credentials)
    for user in ("admin", "strait", "broker"):
        assert credentials.password(user) not in repr(cluster) + repr(credentials)


def test_private_files_are_0600_and_credentials_reload(credentials: Credentials) -> None:
    for path in (
        credentials.keystore,
        credentials.key("strait"),
        credentials.key("admin"),
        credentials.directory / "passwords.json",
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(credentials.directory.stat().st_mode) == 0o700
    assert Credentials.load(credentials.directory).passwords == credentials.passwords
    assert len(set(credentials.passwords.values())) == 3
    with pytest.raises(SandboxError, match="cannot read the sandbox's credentials"):
        Credentials.load(credentials.directory / "missing")


def _certs(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def test_certificates_chain_to_the_run_ca_with_the_right_names(credentials: Credentials) -> None:
    (ca,) = _certs(credentials.ca)
    broker, chained_ca = _certs(credentials.keystore)
    assert chained_ca == ca and b"BEGIN PRIVATE KEY" in credentials.keystore.read_bytes()
    broker.verify_directly_issued_by(ca)
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.IPv4Address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    usages = set(broker.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert usages == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    for user in ("strait", "admin"):
        (cert,) = _certs(credentials.certificate(user))
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == user
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
            ExtendedKeyUsageOID.CLIENT_AUTH
        ]


def test_scram_users_are_bootstrapped_salted(credentials: Credentials) -> None:
    arguments = scram_arguments(credentials)
    assert [re.match(r"SCRAM-SHA-512=\[name=(\w+),", a).group(1) for a in arguments] == [  # type: ignore[union-attr]
        "admin",
        "strait",
        "broker",
    ]
    for user, argument in zip(("admin", "strait", "broker"), arguments, strict=True):
        assert credentials.password(user) not in argument
        fields = dict(re.findall(r'(\w+)="([^"]+)"', argument))
        salt = base64.b64decode(fields["salt"])
        salted = hashlib.pbkdf2_hmac("sha512", credentials.password(user).encode(), salt, 4096)
        assert base64.b64decode(fields["saltedpassword"]) == salted


def test_broker_settings_per_mode(credentials: Credentials) -> None:
    assert broker_settings(SecurityMode.PLAINTEXT, None) == []
    tls = broker_settings(SecurityMode.TLS, credentials)
    assert "ssl.client.auth=none" in tls and "ssl.keystore.type=PEM" in tls
    assert not any(line.startswith("authorizer.class.name") for line in tls)  # no identities, nothing to authorize
    mtls = broker_settings(SecurityMode.MTLS, credentials)
    assert "ssl.client.auth=required" in mtls and "allow.everyone.if.no.acl.found=false" in mtls
    assert "super.users=User:admin;User:broker" in mtls
    assert "listener.name.controller.ssl.client.auth=required" in mtls
    sasl = broker_settings(SecurityMode.SASL_SSL, credentials)
    assert "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512" in sasl
    (jaas,) = [line for line in sasl if "jaas" in line]
    assert jaas.startswith("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=")
    assert f'username="broker" password="{credentials.password("broker")}";' in jaas


def test_broker_config_keeps_plaintext_and_secures_the_rest(tmp_path: Path, credentials: Credentials) -> None:
    def render(mode: SecurityMode) -> list[str]:
        layout = kafka.BrokerLayout(
            node_id=1,
            port=1000,
            controller_port=1001,
            rack=None,
            log_dirs=(tmp_path / "d",),
            config=tmp_path / f"{mode}.properties",
            log=tmp_path / "log",
            cluster_size=1,
            listener=mode.protocol,
            controller_protocol=mode.controller_protocol,
            security=tuple(broker_settings(mode, credentials if mode.secured else None)),
        )
        path = kafka.write_config(layout)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        return path.read_text().splitlines()

    plaintext = render(SecurityMode.PLAINTEXT)
    assert "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" in plaintext
    assert "listeners=PLAINTEXT://127.0.0.1:1000,CONTROLLER://127.0.0.1:1001" in plaintext
    sasl = render(SecurityMode.SASL_SSL)
    assert "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL" in sasl
    assert "inter.broker.listener.name=SASL_SSL" in sasl
    assert "advertised.listeners=SASL_SSL://127.0.0.1:1000" in sasl
    assert kafka.format_args(Path("c"), "id", ["S=[x]"])[-2:] == ["--add-scram", "S=[x]"]
