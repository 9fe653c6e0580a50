"""The one place where Strait creates Kafka clients.

confluent-kafka (librdkafka) carries the data path and the admin calls it supports;
kafka-python covers the admin APIs librdkafka lacks (KIP-455 partition reassignment,
KIP-113 log dirs). Cluster properties are librdkafka-style maps and pass through unchanged,
so TLS/SASL settings configured for a cluster reach every client made for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

ClusterProps = Mapping[str, Any]

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
    return merged


def admin(props: ClusterProps, **overrides: Any) -> AdminClient:
    """A librdkafka admin client for a cluster."""
    return AdminClient(_merge(props, overrides))


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
