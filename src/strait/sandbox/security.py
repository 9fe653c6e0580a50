"""Secured sandbox clusters: each cluster's security mode, the run's credentials, and what a
broker and a client need for each mode.

- ``plaintext``: no security (the default).
- ``tls``: TLS with server authentication only. Traffic is encrypted and clients check the
  brokers' certificate, but clients have no identity, so there is nothing to authorize.
- ``sasl_ssl``: SCRAM-SHA-512 over TLS; the users are written into the metadata log when the
  storage is formatted, so they exist before the first broker starts.
- ``mtls``: TLS with a required client certificate; the principal is the certificate's CN.

In ``sasl_ssl`` and ``mtls`` the StandardAuthorizer is on and nothing is allowed without an ACL.
Super users are ``admin`` (the sandbox's own client) and ``broker`` (what brokers are to each
other and to the KRaft controller). The controller listener of a secured cluster is TLS with
required client certificates, the brokers presenting their own: so no anonymous principal is
ever a super user, which a plaintext controller listener would have needed.

Secrets (passwords, private keys) live only in files of mode 0600 in the state folder and in
the client properties handed to callers; they never enter log lines or error messages.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strait.sandbox import certs
from strait.sandbox.errors import SandboxError

ADMIN = "admin"
STRAIT = "strait"
BROKER = "broker"
USERS = (ADMIN, STRAIT, BROKER)
SUPER_USERS = (ADMIN, BROKER)
SCRAM_MECHANISM = "SCRAM-SHA-512"
# Kafka's minimum for SCRAM-SHA-512: more would only slow every connection of the sandbox.
SCRAM_ITERATIONS = 4096
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Subjects are the CN alone (see certs); the rule keeps working if one ever gets more parts.
PRINCIPAL_RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"
SECURITY_DIR = "security"
_PASSWORDS = "passwords.json"


class SecurityMode(enum.StrEnum):
    """How a sandbox cluster's clients connect and prove who they are."""

    PLAINTEXT = "plaintext"
    TLS = "tls"
    SASL_SSL = "sasl_ssl"
    MTLS = "mtls"

    @property
    def protocol(self) -> str:
        """Kafka's security protocol of the client listener, also its listener name."""
        return {"plaintext": "PLAINTEXT", "tls": "SSL", "sasl_ssl": "SASL_SSL", "mtls": "SSL"}[self.value]

    @property
    def secured(self) -> bool:
        return self is not SecurityMode.PLAINTEXT

    @property
    def authorizes(self) -> bool:
        """Whether clients have an identity, so the brokers check ACLs."""
        return self in (SecurityMode.SASL_SSL, SecurityMode.MTLS)

    @property
    def controller_protocol(self) -> str:
        return "SSL" if self.secured else "PLAINTEXT"


def mode(value: str) -> SecurityMode:
    """The mode named ``value``; an unknown name raises a SandboxError listing the known ones."""
    try:
        return SecurityMode(value.strip().lower())
    except ValueError:
        known = ", ".join(m.value for m in SecurityMode)
        raise SandboxError(f"unknown security mode {value!r}: use one of {known}") from None


def parse_option(text: str) -> str | dict[str, str]:
    """``--security``: one mode for every cluster (``mtls``) or one per cluster (``src=sasl_ssl,dst=mtls``)."""
    if "=" not in text:
        return mode(text).value
    chosen: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise SandboxError(f"--security: expected CLUSTER=MODE, got {part!r}")
        chosen[name.strip()] = mode(value).value
    return chosen


def modes_for(clusters: Sequence[str], setting: str | Mapping[str, str]) -> dict[str, SecurityMode]:
    """Every cluster's mode: ``setting`` is one mode for all, or a map (missing clusters: plaintext)."""
    if isinstance(setting, str):
        return {name: mode(setting) for name in clusters}
    unknown = sorted(set(setting) - set(clusters))
    if unknown:
        raise SandboxError(f"--security names unknown cluster(s) {', '.join(unknown)} (have: {', '.join(clusters)})")
    return {name: mode(setting.get(name, SecurityMode.PLAINTEXT.value)) for name in clusters}


def _write_private(path: Path, data: bytes) -> None:
    # Created 0600 from the start: no moment where another user could read it.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@dataclass(frozen=True)
class Credentials:
    """The run's CA, certificates, keys and passwords, as files in ``directory``."""

    directory: Path
    passwords: Mapping[str, str] = field(repr=False)

    @classmethod
    def create(cls, directory: Path, *, run: str) -> Credentials:
        """Random passwords and a fresh CA with certificates, for a sandbox run named ``run``."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        passwords = {user: secrets.token_urlsafe(24) for user in USERS}
        pki = certs.issue_all(broker=BROKER, clients=(ADMIN, STRAIT), run=run)
        credentials = cls(directory, passwords)
        credentials.ca.write_bytes(pki.ca_pem)
        _write_private(credentials.keystore, pki.broker_keystore())
        for user, issued in pki.clients.items():
            credentials.certificate(user).write_bytes(issued.cert_pem)
            _write_private(credentials.key(user), issued.key_pem)
        _write_private(directory / _PASSWORDS, json.dumps(passwords, indent=2).encode())
        return credentials

    @classmethod
    def load(cls, directory: Path) -> Credentials:
        try:
            passwords = json.loads((directory / _PASSWORDS).read_text())
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot read the sandbox's credentials in {directory}: {type(exc).__name__}") from None
        return cls(directory, passwords)

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore(self) -> Path:
        """The brokers' key and certificate chain (Kafka's PEM keystore)."""
        return self.directory / "broker-keystore.pem"

    def certificate(self, user: str) -> Path:
        return self.directory / f"{user}.crt"

    def key(self, user: str) -> Path:
        return self.directory / f"{user}.key"

    def password(self, user: str) -> str:
        return self.passwords[user]


def scram_arguments(credentials: Credentials) -> list[str]:
    """StorageTool ``--add-scram`` values creating every SCRAM user at format time.

    The salted form keeps the passwords themselves off the command line (``ps`` shows it); the
    salted value still lets one log in, but only for this run's random password.
    """
    arguments = []
    for user in USERS:
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac("sha512", credentials.password(user).encode(), salt, SCRAM_ITERATIONS)
        arguments.append(
            f"{SCRAM_MECHANISM}=[name={user},iterations={SCRAM_ITERATIONS},"
            f'salt="{base64.b64encode(salt).decode()}",saltedpassword="{base64.b64encode(salted).decode()}"]'
        )
    return arguments


def broker_settings(security: SecurityMode, credentials: Credentials | None) -> list[str]:
    """server.properties lines for ``security`` beyond the listeners themselves."""
    if not security.secured:
        return []
    assert credentials is not None
    lines = [
        # Kafka reads PEM files directly (KIP-651); the key is unencrypted, so no ssl.key.password.
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={credentials.keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={credentials.ca}",
        f"ssl.principal.mapping.rules={PRINCIPAL_RULES}",
        # Brokers reach the controller with their own certificate: principal User:broker.
        "listener.name.controller.ssl.client.auth=required",
        f"ssl.client.auth={'required' if security is SecurityMode.MTLS else 'none'}",
    ]
    if security is SecurityMode.SASL_SSL:
        listener = security.protocol.lower()
        lines += [
            f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
            f"sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}",
            # A password-typed config: Kafka prints it as [hidden] when it logs its settings.
            f"listener.name.{listener}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER}" password="{credentials.password(BROKER)}";',
        ]
    if security.authorizes:
        lines += [
            f"authorizer.class.name={AUTHORIZER}",
            "allow.everyone.if.no.acl.found=false",
            "super.users=" + ";".join(f"User:{user}" for user in SUPER_USERS),
        ]
    return lines


def client_props(security: SecurityMode, bootstrap: str, credentials: Credentials | None, user: str) -> dict[str, str]:
    """librdkafka properties for ``user`` on a cluster in ``security`` mode."""
    props = {"bootstrap.servers": bootstrap}
    if not security.secured:
        return props
    assert credentials is not None
    props["security.protocol"] = security.protocol
    props["ssl.ca.location"] = str(credentials.ca)
    if security is SecurityMode.SASL_SSL:
        props["sasl.mechanisms"] = SCRAM_MECHANISM
        props["sasl.username"] = user
        props["sasl.password"] = credentials.password(user)
    elif security is SecurityMode.MTLS:
        props["ssl.certificate.location"] = str(credentials.certificate(user))
        props["ssl.key.location"] = str(credentials.key(user))
    return props
