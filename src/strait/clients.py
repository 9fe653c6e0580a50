"""The one place where Strait creates Kafka clients.

confluent-kafka (librdkafka) carries the data path and the admin calls it supports;
kafka-python covers the admin APIs librdkafka lacks (KIP-455 partition reassignment,
KIP-113 log dirs). Cluster properties are librdkafka-style maps and pass through unchanged,
so TLS/SASL settings configured for a cluster reach every client made for it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
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

# librdkafka names -> kafka-python keyword names, for the security settings that both support.
_KAFKA_PYTHON_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}


def _merge(props: ClusterProps, overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(props)
    merged.update(overrides)
    for key, value in merged.items():
        if isinstance(value, str) and is_secret_key(key):
            remember(value)  # masked in every log line and error message from now on
    merged.setdefault("logger", LIBRDKAFKA_LOG)
    # A refused SASL handshake or certificate only shows here; remember it so the call that
    # then times out can say why (strait.access_errors).
    merged.setdefault("error_cb", partial(access_errors.on_client_error, dict(props)))
    return merged


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
            with self._lock:
                clients = list(self._clients)
            for client in clients:
                try:
                    client.poll(0)
                except Exception:  # a client being torn down: nothing to serve
                    LIBRDKAFKA_LOG.debug("serving an admin client's logs failed", exc_info=True)
            del clients


_pump = _AdminLogPump()


def admin(props: ClusterProps, **overrides: Any) -> AdminClient:
    """A librdkafka admin client for a cluster."""
    client = AdminClient(_merge(props, overrides))
    _pump.add(client)
    return client


def consumer(props: ClusterProps, **overrides: Any) -> Consumer:
    """A librdkafka consumer; callers pass group/offset settings as overrides (dots allowed via dict)."""
    return Consumer(_merge(props, overrides))


def producer(props: ClusterProps, **overrides: Any) -> Producer:
    """A librdkafka producer."""
    return Producer(_merge(props, overrides))


def kafka_python_options(props: ClusterProps) -> dict[str, Any]:
    """Translate librdkafka-style cluster properties to kafka-python keyword arguments."""
    options: dict[str, Any] = {}
    for key, value in props.items():
        target = _KAFKA_PYTHON_KEYS.get(key)
        if target is not None:
            options[target] = value
    return options


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
