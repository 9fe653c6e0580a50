"""Why a cluster refused Strait, said plainly: which cluster, as which principal, what was refused.

librdkafka reports a failed SASL handshake or an untrusted certificate only through its error
callback and logs; the call that needed the connection then times out with a generic
``_TRANSPORT``/``_TIMED_OUT`` error after its full timeout. Every client Strait creates
(:mod:`strait.clients`) reports such errors here, so the message of a failed call can name the
real cause (:func:`explain`), and the operator sees one clear log line per cause instead of a
timeout after minutes.

A client speaking the wrong protocol to a listener is told apart too: a TLS client at a plaintext
port fails its handshake with a text saying so (:func:`protocol_mismatch`). A plaintext client at a
TLS port is only cut off (librdkafka says why at its info log level, never to the error callback),
so when such a client finds all brokers down, the bootstrap addresses are offered a TLS handshake
in the background (:func:`speaks_tls`); a listener that answers it is a ``security.protocol``
mismatch. Without that, both only end in a generic "cannot reach".

Clusters are known by their address *and* their security settings: two configured clusters may
name the same brokers with different users or passwords, and one's refusal must not explain the
other's failures.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from strait.secrets import redact

log = logging.getLogger(__name__)

# Client-side codes of a refused connection: SASL failed, TLS handshake or verification failed.
CONNECTION_REFUSALS = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
    }
)

# Broker answers meaning "authenticated, but no ACL allows this".
AUTHORIZATION_FAILURES = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
}

# A plaintext client that cannot reach any broker checks whether they speak TLS at most this often.
SNIFF_EVERY_S = 30.0
SNIFF_TIMEOUT_S = 3.0
# A refusal older than this no longer explains a failure.
RECENT_S = 120.0
# The same refusal is logged again at most this often.
LOG_EVERY_S = 60.0

# Property prefixes that decide who a client is to a cluster and how it talks to it.
_IDENTITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")

_lock = threading.Lock()
_names: dict[str, str] = {}  # identity -> configured name
_names_at: dict[str, set[str]] = {}  # bootstrap -> configured names with that address
_refusals: dict[str, tuple[float, str]] = {}  # identity -> (when, message)
_logged: dict[tuple[str, str], float] = {}
_sniffed: dict[str, float] = {}  # identity -> when its addresses were last offered a TLS handshake


def identity(props: Mapping[str, Any]) -> str:
    """The address plus a digest of the security settings: which cluster *as whom, how*.

    A digest, never the settings: the passwords in them must not be kept in the clear here.
    """
    bootstrap = str(props.get("bootstrap.servers", "?"))
    security = sorted((k, str(v)) for k, v in props.items() if k.startswith(_IDENTITY_PREFIXES))
    if not security:
        return bootstrap
    digest = hashlib.sha256(repr(security).encode()).hexdigest()[:16]
    return f"{bootstrap}#{digest}"


def name_clusters(clusters: Mapping[str, Mapping[str, Any]]) -> None:
    """Remember the configured names of clusters, so messages say ``src``, not a broker list."""
    with _lock:
        for name, props in clusters.items():
            bootstrap = str(props.get("bootstrap.servers", ""))
            if bootstrap:
                _names[identity(props)] = name
                _names_at.setdefault(bootstrap, set()).add(name)


def cluster_label(props: Mapping[str, Any]) -> str:
    """``cluster src (host:port)`` or ``cluster host:port``."""
    bootstrap = str(props.get("bootstrap.servers", "?"))
    name = _names.get(identity(props))
    if name is None:
        # Settings changed since the names were given (an override): the address alone will do
        # when only one configured cluster has it.
        at = _names_at.get(bootstrap, set())
        name = next(iter(at)) if len(at) == 1 else None
    return f"cluster {name} ({bootstrap})" if name else f"cluster {bootstrap}"


def principal(props: Mapping[str, Any]) -> str:
    """Who the client is to the cluster, as far as its properties say (never a secret)."""
    username = props.get("sasl.username")
    if username:
        return f"User:{username}"
    certificate = props.get("ssl.certificate.location")
    if certificate:
        name = _certificate_name(str(certificate))
        return f"User:{name} (certificate {certificate})" if name else f"the client certificate {certificate}"
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    return "User:ANONYMOUS" if protocol in ("PLAINTEXT", "SSL") else f"an unnamed {protocol} client"


@functools.lru_cache(maxsize=32)
def _certificate_name(path: str) -> str | None:
    """The common name of a PEM client certificate: the principal brokers usually map it to."""
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        certificate = x509.load_pem_x509_certificate(Path(path).read_bytes())
        names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except (OSError, ValueError, ImportError):
        return None
    return str(names[0].value) if names else None


def _speaks_tls(props: Mapping[str, Any]) -> bool:
    return "SSL" in str(props.get("security.protocol", "PLAINTEXT")).upper()


def protocol_mismatch(props: Mapping[str, Any], error: KafkaError) -> str | None:
    """What a connection error says about ``security.protocol`` not matching the listener, if it does.

    librdkafka cuts a plaintext client that meets a TLS listener off while it asks for API versions
    (its text then names ``security.protocol``), and fails a TLS client's handshake at a plaintext
    listener ("connecting to a PLAINTEXT broker listener?", or OpenSSL's "wrong version number").
    """
    text = error.str()
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    cut_off = "security.protocol" in text or "SSL listener" in text
    if error.code() == KafkaError._TRANSPORT and not _speaks_tls(props) and cut_off:
        return (
            f"security.protocol mismatch: the client speaks {protocol} but the listener seems to expect TLS "
            "(set security.protocol to SSL or SASL_SSL, with ssl.ca.location)"
        )
    if error.code() in (KafkaError._SSL, KafkaError._TRANSPORT) and _speaks_tls(props):
        lowered = text.lower()
        if "plaintext broker listener" in lowered or "wrong version number" in lowered:
            return (
                f"security.protocol mismatch: the client speaks {protocol} but the listener seems to be plaintext "
                "(set security.protocol to PLAINTEXT or SASL_PLAINTEXT, or use the cluster's TLS port)"
            )
    return None


def addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``(host, port)`` of each bootstrap entry (``host:port``, ``proto://host:port``, ``[::1]:port``)."""
    found = []
    for entry in bootstrap.split(","):
        entry = entry.strip().rpartition("://")[2]
        host, sep, port = entry.rpartition(":")
        if sep and host and port.isdigit():
            found.append((host.strip("[]"), int(port)))
    return found


def speaks_tls(host: str, port: int, timeout_s: float = SNIFF_TIMEOUT_S) -> bool:
    """Whether the listener at ``host:port`` answers a TLS handshake.

    Nothing is trusted or sent beyond the handshake: the certificate is not checked. A listener
    that answers with a TLS alert (one that wants a client certificate, say) speaks TLS too; a
    plaintext Kafka listener reads the ClientHello as a request far too large and hangs up.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except ssl.SSLError as exc:
        return "ALERT" in str(exc.reason or "").upper()
    except OSError:
        return False


def _sniff(props: Mapping[str, Any]) -> None:
    """In the background: if a bootstrap address speaks TLS, record a security.protocol mismatch."""
    for host, port in addresses(str(props.get("bootstrap.servers", ""))):
        if speaks_tls(host, port):
            protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
            _record(
                props,
                redact(
                    f"{cluster_label(props)} refused {principal(props)}: security.protocol mismatch: the client "
                    f"speaks {protocol} but the listener at {host}:{port} answered a TLS handshake (set "
                    "security.protocol to SSL or SASL_SSL, with ssl.ca.location)"
                ),
            )
            return


def _maybe_sniff(props: Mapping[str, Any], error: KafkaError) -> None:
    # Only when no broker answers at all: a plaintext broker reads the handshake as a request far
    # too large and logs a warning, which a passing disconnect should not cause.
    if _speaks_tls(props) or error.code() != KafkaError._ALL_BROKERS_DOWN:
        return
    key_of = identity(props)
    now = time.monotonic()
    with _lock:
        if now - _sniffed.get(key_of, float("-inf")) < SNIFF_EVERY_S:
            return
        _sniffed[key_of] = now
    # Never block librdkafka's callback: the handshake may take seconds on a slow network.
    threading.Thread(target=_sniff, args=(dict(props),), name="strait-tls-sniff", daemon=True).start()


def on_client_error(props: Mapping[str, Any], error: KafkaError) -> None:
    """The error callback of every Strait client: keep and log connection refusals."""
    mismatch = protocol_mismatch(props, error)
    if mismatch is None and error.code() not in CONNECTION_REFUSALS:
        _maybe_sniff(props, error)
        return
    if mismatch is not None:
        message = redact(f"{cluster_label(props)} refused {principal(props)}: {mismatch}: {error.str()}")
    else:
        what = "TLS failed" if error.code() == KafkaError._SSL else "authentication failed"
        message = redact(f"{cluster_label(props)} refused {principal(props)}: {what}: {error.str()}")
    _record(props, message)


# librdkafka's timing suffix, different on every retry: "(after 234ms in state AUTH_REQ[, ...])".
_TIMING = re.compile(r"\s*\(after \d+ms in state [^)]*\)")


def _record(props: Mapping[str, Any], message: str) -> None:
    """Keep ``message`` as the cluster's latest refusal; log it (once a minute at most)."""
    key_of = identity(props)
    now = time.monotonic()
    with _lock:
        _refusals[key_of] = (now, message)
        key = (key_of, _TIMING.sub("", message))
        due = now - _logged.get(key, float("-inf")) >= LOG_EVERY_S
        if due:
            _logged[key] = now
    if due:
        log.error("%s", message)


def recent_refusal(props: Mapping[str, Any], since: float | None = None) -> str | None:
    """The last connection refusal of this cluster, if it is recent (and, with ``since``, came
    at or after that ``time.monotonic()`` moment)."""
    with _lock:
        entry = _refusals.get(identity(props))
    if entry is None or time.monotonic() - entry[0] > RECENT_S or (since is not None and entry[0] < since):
        return None
    return entry[1]


def authorization_message(props: Mapping[str, Any], error: KafkaError, resource: str | None = None) -> str | None:
    """``cluster src (...) refused User:strait: no ACL allows ... on topic t`` for ACL errors."""
    kind = AUTHORIZATION_FAILURES.get(error.code())
    if kind is None:
        return None
    target = f"{kind} {resource}" if resource and kind != "cluster" else kind
    return f"{cluster_label(props)} refused {principal(props)}: no ACL allows this on the {target} ({error.name()})"


def explain(props: Mapping[str, Any], problem: BaseException | KafkaError | str, resource: str | None = None) -> str:
    """The message of a failed call on a cluster, with the real cause when the cluster refused us."""
    error = problem.args[0] if isinstance(problem, BaseException) and problem.args else problem
    if isinstance(error, KafkaError):
        denied = authorization_message(props, error, resource)
        if denied is not None:
            return denied
    text = redact(str(problem))
    refusal = recent_refusal(props)
    if refusal is not None and refusal not in text:
        return f"{refusal} (then: {text})"
    return text
