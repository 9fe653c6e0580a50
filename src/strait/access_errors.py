"""Why a cluster refused Strait, said plainly: which cluster, as which principal, what was refused.

librdkafka reports a failed SASL handshake or an untrusted certificate only through its error
callback and logs; the call that needed the connection then times out with a generic
``_TRANSPORT``/``_TIMED_OUT`` error after its full timeout. Every client Strait creates
(:mod:`strait.clients`) reports such errors here, so the message of a failed call can name the
real cause (:func:`explain`), and the operator sees one clear log line per cause instead of a
timeout after minutes.
"""

from __future__ import annotations

import functools
import logging
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

# A refusal older than this no longer explains a failure.
RECENT_S = 120.0
# The same refusal is logged again at most this often.
LOG_EVERY_S = 60.0

_lock = threading.Lock()
_names: dict[str, str] = {}
_refusals: dict[str, tuple[float, str]] = {}
_logged: dict[tuple[str, str], float] = {}


def name_clusters(clusters: Mapping[str, Mapping[str, Any]]) -> None:
    """Remember the configured names of clusters, so messages say ``src``, not a broker list."""
    with _lock:
        for name, props in clusters.items():
            bootstrap = str(props.get("bootstrap.servers", ""))
            if bootstrap:
                _names[bootstrap] = name


def cluster_label(props: Mapping[str, Any]) -> str:
    """``cluster src (host:port)`` or ``cluster host:port``."""
    bootstrap = str(props.get("bootstrap.servers", "?"))
    name = _names.get(bootstrap)
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


def on_client_error(props: Mapping[str, Any], error: KafkaError) -> None:
    """The error callback of every Strait client: keep and log connection refusals."""
    if error.code() not in CONNECTION_REFUSALS:
        return
    bootstrap = str(props.get("bootstrap.servers", "?"))
    what = "TLS failed" if error.code() == KafkaError._SSL else "authentication failed"
    message = redact(f"{cluster_label(props)} refused {principal(props)}: {what}: {error.str()}")
    now = time.monotonic()
    with _lock:
        _refusals[bootstrap] = (now, message)
        key = (bootstrap, message)
        due = now - _logged.get(key, float("-inf")) >= LOG_EVERY_S
        if due:
            _logged[key] = now
    if due:
        log.error("%s", message)


def recent_refusal(props: Mapping[str, Any], since: float | None = None) -> str | None:
    """The last connection refusal of this cluster, if it is recent (and, with ``since``, came
    at or after that ``time.monotonic()`` moment)."""
    bootstrap = str(props.get("bootstrap.servers", "?"))
    with _lock:
        entry = _refusals.get(bootstrap)
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
