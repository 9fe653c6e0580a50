"""A throw-away certificate authority for one sandbox run, made with ``cryptography``.

Nothing is downloaded and nothing outlives the run: the CA signs one certificate for the
brokers and one per client user, and its own key is thrown away once they are signed (no
later certificate is ever needed, so there is nothing worth keeping it for).
Everything is PEM, the one format both librdkafka and Kafka (``ssl.keystore.type=PEM``) read
from files. Keys are EC P-256: quick to make on a loaded machine, and supported by both.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any sandbox a person leaves running; short enough to be obviously throw-away.
VALIDITY = datetime.timedelta(days=30)
# Certificates start a little in the past, so a clock that drifts between processes is no issue.
BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key (PKCS#8, unencrypted: the file's mode protects it)."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)


@dataclass(frozen=True)
class Pki:
    """The CA certificate, the brokers' certificate and one certificate per client user."""

    ca_pem: bytes
    broker: Issued
    clients: dict[str, Issued]

    def broker_keystore(self) -> bytes:
        """What ``ssl.keystore.location`` points at: key, then the chain up to the CA."""
        return self.broker.key_pem + self.broker.cert_pem + self.ca_pem


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    # The subject is the CN alone, so the brokers' principal mapping turns it into User:<cn>.
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _sign(builder: x509.CertificateBuilder, ca_key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .sign(ca_key, hashes.SHA256())
    )


def _issue(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, common_name: str, *, server: bool) -> Issued:
    key = _key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        # Clients dial 127.0.0.1 (what the brokers advertise); localhost is there for people.
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        # Brokers are servers to clients and clients of each other (replication, controller).
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    cert = _sign(builder, ca_key)
    return Issued(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key))


def issue_all(*, broker: str, clients: tuple[str, ...], run: str) -> Pki:
    """A fresh CA named after ``run``, a certificate for the brokers and one per client name."""
    ca_key = _key()
    ca_name = _name(f"Strait sandbox CA {run}")
    ca_cert = _sign(
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False),
        ca_key,
    )
    return Pki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        broker=_issue(ca_key, ca_cert, broker, server=True),
        clients={name: _issue(ca_key, ca_cert, name, server=False) for name in clients},
    )
