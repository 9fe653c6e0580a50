"""The one place where Strait creates Kafka clients.

confluent-kafka (librdkafka) carries the data path and the admin calls it supports;
kafka-python covers the admin APIs librdkafka lacks (KIP-455 partition reassignment,
KIP-113 log dirs). Cluster properties are librdkafka-style maps and pass through unchanged,
so TLS/SASL settings configured for a cluster reach every client made for it.

A reload rotates SASL credentials (:func:`rotate_credentials`): every librdkafka client made here
is kept in a registry of weak references with the credentials it uses. kafka-python clients take
their options once, when made, and keep them for every connection they open later.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from strait import access_errors
from strait.secrets import is_secret_key, remember

ClusterProps = Mapping[str, Any]

# librdkafka's own log lines (connection refused, authentication failed...) go through Python
# logging under this name, not raw onto stderr: a person's terminal shows them formatted like
# Strait's, they can be filtered by level, and secrets in them are masked (strait.secrets).
LIBRDKAFKA_LOG = logging.getLogger("strait.librdkafka")
# How often admin clients' queued log lines are handed to Python logging.
_ADMIN_LOG_PUMP_S = 1.0

# librdkafka names -> kafka-python keyword names, for the settings taken over as they are.
_KAFKA_PYTHON_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "client.id": "client_id",
}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# kafka-python speaks these; OAUTHBEARER would need a token provider object, not properties.
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")
# TLS settings, turned into one ssl.SSLContext that means what librdkafka makes of them.
_TLS_KEYS = frozenset(
    {
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.certificate.pem",
        "ssl.key.pem",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.crl.location",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
    }
)
# Security settings with nothing to do for kafka-python: it uses the Kerberos ticket cache that
# librdkafka's kinit fills, and these only tune how librdkafka gets the ticket.
_KAFKA_PYTHON_IGNORED = frozenset(
    {
        "sasl.kerberos.principal",
        "sasl.kerberos.keytab",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin",
    }
)
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")


class UnsupportedProperty(ValueError):
    """A security property of a cluster that kafka-python (the balancer's admin client) cannot honour."""


def _merge(props: ClusterProps, overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = _current_credentials({**props, **overrides})
    for key, value in merged.items():
        if isinstance(value, str) and is_secret_key(key):
            remember(value)  # masked in every log line and error message from now on
    merged.setdefault("logger", LIBRDKAFKA_LOG)
    # librdkafka leaves Nagle's algorithm on, where the Java client (MirrorMaker's) sets
    # TCP_NODELAY on every socket: a small request written while an earlier one is unacknowledged
    # can then wait for the peer's delayed ACK (up to 40 ms on Linux). A cluster may still set it.
    merged.setdefault("socket.nagle.disable", True)
    # A refused SASL handshake or certificate only shows here; remember it so the call that
    # then times out can say why (strait.access_errors).
    merged.setdefault("error_cb", partial(access_errors.on_client_error, dict(props)))
    return merged


# The properties a client's SASL credentials are recognised by: the cluster and the credentials.
_CREDENTIAL_SIGNATURE = ("bootstrap.servers", "sasl.username", "sasl.password")


def _signature(props: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(props.get(key) for key in _CREDENTIAL_SIGNATURE)


class _Rotations:
    """Credentials a reload replaced, each with the ones in force now (see rotate_credentials)."""

    def __init__(self) -> None:
        self._replaced: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def add(self, old: tuple[Any, ...], new: tuple[Any, ...]) -> None:
        with self._lock:
            self._replaced = {was: (new if now == old else now) for was, now in self._replaced.items()}
            self._replaced[old] = new
            self._replaced.pop(new, None)  # back to earlier credentials: they are in force again

    def current(self, signature: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._replaced.get(signature)


_rotations = _Rotations()


def _current_credentials(props: dict[str, Any]) -> dict[str, Any]:
    """``props`` with the credentials a reload put in place of the ones it names, if it did."""
    current = _rotations.current(_signature(props))
    if current is not None:
        props["sasl.username"], props["sasl.password"] = current[1], current[2]
    return props


class _LiveClients:
    """The librdkafka clients alive in this process, each with the SASL credentials it uses.

    Weak references only: a client closed and dropped by its owner leaves the registry with it.
    """

    def __init__(self) -> None:
        self._clients: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def add(self, client: Any, config: Mapping[str, Any]) -> None:
        if config.get("sasl.username") is None and config.get("sasl.password") is None:
            return  # nothing to rotate
        with self._lock:
            self._clients[client] = _signature(config)

    def rotate(self, old: tuple[Any, ...], new: tuple[Any, ...]) -> int:
        with self._lock:
            clients = [client for client, signature in self._clients.items() if signature == old]
        for client in clients:
            with self._lock:
                self._clients[client] = new
            # A client takes them only between its calls: one waiting in consume() or a metadata
            # request holds the call back for as long (seconds). A thread each, so no client
            # waits for another, nor the reload for any of them.
            threading.Thread(
                target=_set_credentials, args=(client, str(new[1]), str(new[2])), name="strait-credentials", daemon=True
            ).start()
        return len(clients)


def _set_credentials(client: Any, username: str, password: str) -> None:
    try:
        client.set_sasl_credentials(username, password)
    except Exception as exc:  # a client being closed meanwhile: it makes no connection any more
        logging.getLogger(__name__).debug("a client did not take the new credentials: %s", exc)


_live = _LiveClients()


def rotate_credentials(props: dict[str, Any], credentials: Mapping[str, str]) -> int:
    """Give a cluster's live librdkafka clients new SASL credentials; returns how many took them.

    ``props`` is the cluster's property map every client of the cluster is made from (the running
    configuration's ``clusters.<name>``): the new values are written into it, so clients made
    from now on use them. Only values of keys it already holds change (never its size), so a
    thread copying it at that moment reads a whole map. A live client (made with the old
    credentials of the same ``bootstrap.servers``) takes them with ``set_sasl_credentials`` (on a
    thread of its own, once a call it is in returns): its open connections stay authenticated as
    they are, its next ones authenticate anew. A client
    made later from a copy of the old map (a component that copied it when it started) is made
    with the new credentials too.
    """
    old = _signature(props)
    for key, value in credentials.items():
        if key not in props:
            raise KeyError(f"{key}: not set for this cluster; a new credential key needs a restart")
        remember(value)
    for key, value in credentials.items():
        props[key] = value
    _rotations.add(old, _signature(props))
    return _live.rotate(old, _signature(props))


class _AdminLogPump:
    """Serves the log queues of live admin clients.

    With a Python logger, librdkafka queues its log lines until the client is polled; consumers
    and producers are polled by their loops, admin clients never are. One daemon thread polls
    them all (poll(0) only serves logs and callbacks; admin results have their own queue).
    """

    def __init__(self) -> None:
        self._clients: weakref.WeakSet[AdminClient] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, client: AdminClient) -> None:
        with self._lock:
            self._clients.add(client)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="strait-librdkafka-logs", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(_ADMIN_LOG_PUMP_S)
            self._serve()

    def _serve(self) -> None:
        # A function of its own, so no client outlives the round in a local: a loop variable
        # left bound to the last client polled kept that client alive for good (it was polled
        # again each second), and an abandoned one printed librdkafka's FAIL lines at exit.
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            try:
                client.poll(0)
            except Exception:  # a client being torn down: nothing to serve
                LIBRDKAFKA_LOG.debug("serving an admin client's logs failed", exc_info=True)


_pump = _AdminLogPump()


def admin(props: ClusterProps, **overrides: Any) -> AdminClient:
    """A librdkafka admin client for a cluster."""
    config = _merge(props, overrides)
    client = AdminClient(config)
    _pump.add(client)
    _live.add(client, config)
    return client


# How long a background lookup of a topic a client meets for the first time may take.
_ASSIGNED_TOPIC_LOOKUP_S = 10.0


class _TopicLookups:
    """Metadata lookups of the topics a client meets for the first time, each on a short-lived
    thread, so the caller (a pipeline's loop) is not held up. ``wait`` is for ``close``: the
    handle must not be destroyed under a call in progress."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._known: set[str] = set()
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def ask(self, topics: Iterable[str]) -> None:
        with self._lock:
            new = sorted(set(topics) - self._known)
            if not new:
                return
            self._known.update(new)
            self.threads = [t for t in self.threads if t.is_alive()]
            for topic in new:
                lookup = threading.Thread(target=self._ask, args=(topic,), name="topic-lookup", daemon=True)
                self.threads.append(lookup)
                lookup.start()

    def wait(self) -> None:
        with self._lock:
            threads, self.threads = self.threads, []
        for lookup in threads:
            lookup.join(_ASSIGNED_TOPIC_LOOKUP_S + 1)

    def _ask(self, topic: str) -> None:
        started = time.monotonic()
        try:
            self._client.list_topics(topic, timeout=_ASSIGNED_TOPIC_LOOKUP_S)
        except Exception as exc:  # only a head start: librdkafka asks by itself later
            logging.getLogger(__name__).debug("looking up %s failed: %s", topic, exc)
            return
        logging.getLogger(__name__).debug("metadata of new topic %s in %.3fs", topic, time.monotonic() - started)


class Consumer(confluent_kafka.Consumer):
    """librdkafka's consumer, asking at once for the metadata of a topic it is assigned for the first time.

    librdkafka (2.16) does not request metadata for a topic it first meets in ``assign`` or
    ``incremental_assign``: its one-second timer finds the topic unknown and asks then, so a
    partition of a newly added topic started fetching up to a second late (0.4 to 1.1 s on the
    sandbox; about 0.1 s with the lookup). ``look_up`` starts the lookups earlier still (the
    copier's thread, while the pipeline's loop has yet to assign); ``close`` waits for lookups
    still under way.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._lookups = _TopicLookups(self)

    def look_up(self, topics: Iterable[str]) -> None:
        """Ask for these topics' metadata in the background (once per topic)."""
        self._lookups.ask(topics)

    def assign(self, partitions: Any) -> None:
        self._lookups.ask(tp.topic for tp in partitions)
        super().assign(partitions)

    def incremental_assign(self, partitions: Any) -> None:
        self._lookups.ask(tp.topic for tp in partitions)
        super().incremental_assign(partitions)

    def close(self, *args: Any, **kwargs: Any) -> None:
        self._lookups.wait()
        super().close(*args, **kwargs)


class Producer(confluent_kafka.Producer):
    """librdkafka's producer; ``look_up`` asks for a topic's metadata before its first record.

    A first ``produce()`` to a topic the producer does not know waits for a metadata round trip
    before the record can be sent (the record waits in librdkafka's unassigned queue). A
    pipeline asks when it is given a partition, so that round trip overlaps the fetch of the
    partition's first records instead of following it.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._lookups = _TopicLookups(self)

    def look_up(self, topics: Iterable[str]) -> None:
        """Ask for these topics' metadata in the background (once per topic)."""
        self._lookups.ask(topics)

    def close(self, *args: Any, **kwargs: Any) -> Any:
        self._lookups.wait()
        return super().close(*args, **kwargs)


def consumer(props: ClusterProps, **overrides: Any) -> Consumer:
    """A librdkafka consumer; callers pass group/offset settings as overrides (dots allowed via dict)."""
    config = _merge(props, overrides)
    client = Consumer(config)
    _live.add(client, config)
    return client


def producer(props: ClusterProps, **overrides: Any) -> Producer:
    """A librdkafka producer."""
    config = _merge(props, overrides)
    client = Producer(config)
    _live.add(client, config)
    return client


def kafka_python_options(props: ClusterProps) -> dict[str, Any]:
    """Translate librdkafka-style cluster properties to kafka-python keyword arguments.

    TLS settings become one ``ssl_context`` (CA file, directory or inline PEM; client
    certificate as PEM files, inline PEM or a PKCS#12 keystore; CRL, ciphers, host name and
    certificate verification switches). A security property kafka-python cannot honour raises
    :class:`UnsupportedProperty` naming it, rather than being dropped: a dropped one would only
    show later as a refused or hanging connection. Other (tuning) properties are left out.
    """
    options: dict[str, Any] = {}
    props = _current_credentials(dict(props))
    for key, value in props.items():
        target = _KAFKA_PYTHON_KEYS.get(key)
        if target is not None:
            options[target] = value
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            mechanism = str(value).strip().upper()
            if mechanism not in _SASL_MECHANISMS:
                raise UnsupportedProperty(
                    f"{key}={value}: the balancer's admin client (kafka-python) supports {', '.join(_SASL_MECHANISMS)}"
                )
            options["sasl_mechanism"] = mechanism
        elif key == "security.protocol":
            protocol = str(value).strip().upper()  # librdkafka takes any case, kafka-python only upper
            if protocol not in _PROTOCOLS:
                raise UnsupportedProperty(f"security.protocol={value}: expected one of {', '.join(_PROTOCOLS)}")
            options["security_protocol"] = protocol
        elif key in _TLS_KEYS or key in _KAFKA_PYTHON_IGNORED:
            continue
        elif key.startswith(_SECURITY_PREFIXES):
            raise UnsupportedProperty(
                f"{key}: the balancer's admin client (kafka-python) has no equivalent of this property"
            )
    if options.get("security_protocol") in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl_context(props)
    return options


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes", "on")


def ssl_context(props: ClusterProps) -> ssl.SSLContext:
    """A client SSLContext meaning what librdkafka makes of the cluster's ``ssl.*`` properties."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not _flag(props.get("enable.ssl.certificate.verification", True)):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        algorithm = str(props.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
        if algorithm not in ("https", "none"):
            raise UnsupportedProperty(f"ssl.endpoint.identification.algorithm={algorithm}: expected https or none")
        ctx.check_hostname = algorithm == "https"
    ca = props.get("ssl.ca.location")
    if props.get("ssl.ca.pem"):
        ctx.load_verify_locations(cadata=str(props["ssl.ca.pem"]))
    elif ca and str(ca) != "probe":
        if os.path.isdir(str(ca)):
            ctx.load_verify_locations(capath=str(ca))
        else:
            ctx.load_verify_locations(cafile=str(ca))
    else:
        ctx.load_default_certs()  # librdkafka's default too: the system's trust store
    if props.get("ssl.crl.location"):
        ctx.load_verify_locations(cafile=str(props["ssl.crl.location"]))
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if props.get("ssl.cipher.suites"):
        ctx.set_ciphers(str(props["ssl.cipher.suites"]))
    _load_client_certificate(ctx, props)
    return ctx


def _load_client_certificate(ctx: ssl.SSLContext, props: ClusterProps) -> None:
    password = props.get("ssl.key.password")
    if props.get("ssl.certificate.location"):
        ctx.load_cert_chain(
            str(props["ssl.certificate.location"]),
            str(props["ssl.key.location"]) if props.get("ssl.key.location") else None,
            password=str(password) if password else None,
        )
    elif props.get("ssl.certificate.pem"):
        _load_pem_chain(ctx, str(props["ssl.certificate.pem"]), str(props.get("ssl.key.pem") or ""), password)
    elif props.get("ssl.keystore.location"):
        from cryptography.hazmat.primitives.serialization import (
            BestAvailableEncryption,
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )

        secret = props.get("ssl.keystore.password")
        with open(str(props["ssl.keystore.location"]), "rb") as fh:
            key, cert, chain = pkcs12.load_key_and_certificates(fh.read(), str(secret).encode() if secret else None)
        if key is None or cert is None:
            raise UnsupportedProperty("ssl.keystore.location: the keystore holds no private key and certificate")
        # Written back out only to a private temporary file that is gone once loaded.
        encryption = BestAvailableEncryption(str(secret).encode()) if secret else NoEncryption()
        key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption).decode()
        certs_pem = "".join(c.public_bytes(Encoding.PEM).decode() for c in [cert, *chain])
        _load_pem_chain(ctx, certs_pem, key_pem, secret)
    elif props.get("ssl.key.location") or props.get("ssl.key.pem"):
        raise UnsupportedProperty("ssl.key.*: a client key needs its certificate (ssl.certificate.location or .pem)")


def _load_pem_chain(ctx: ssl.SSLContext, certificate: str, key: str, password: Any) -> None:
    # SSLContext reads certificates and keys from files only: a private folder, removed at once.
    with tempfile.TemporaryDirectory(prefix="strait-tls-") as folder:
        path = os.path.join(folder, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n" + certificate if key else certificate)
        ctx.load_cert_chain(path, password=str(password) if password else None)


def legacy_admin(props: ClusterProps, **overrides: Any) -> Any:
    """A kafka-python admin client, for reassignment and log-dir APIs that librdkafka lacks."""
    from kafka.admin import KafkaAdminClient

    options = kafka_python_options(props)
    options.update(overrides)
    return KafkaAdminClient(**options)


def admin_result(future: Future[Any], timeout_s: float, what: str) -> Any:
    """An admin future's result; a future that never completes raises KafkaException too
    (a plain TimeoutError would escape every handler written for Kafka errors)."""
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError as exc:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what}: no answer within {timeout_s:.0f}s")) from exc


# A group coordinator that is loading or moving (a broker just started) answers these; a client
# that never joins the group is told instead of waiting, so asking again is the caller's job.
_COORDINATOR_NOT_READY = frozenset(
    {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR}
)


def committed_offsets(consumer: confluent_kafka.Consumer, tps: list[Any], timeout_s: float) -> list[Any]:
    """``consumer.committed(tps)``, asked again while the group coordinator is not ready."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return list(consumer.committed(tps, timeout=max(0.1, deadline - time.monotonic())))
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_NOT_READY or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)
