"""A client speaking the wrong security.protocol for a listener is told so, not "cannot reach".

A plaintext client at the TLS port of the secure sandbox's `src` (SASL_SSL) and a TLS client at
the plaintext port of the default sandbox's `src`: the balancer's gateway (what `strait balance`
builds first) refuses with an error naming the cluster and the likely cause, a
``security.protocol`` mismatch, and a librdkafka client's failed call is explained the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaException

from strait import access_errors, clients
from strait.balancer.errors import ClusterError
from strait.balancer.gateway import KafkaGateway
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration


def _gateway_refusal(props: Mapping[str, Any]) -> str:
    started = time.monotonic()
    with pytest.raises(ClusterError) as refused:
        KafkaGateway(props).close()
    print(f"gateway refused after {time.monotonic() - started:.1f}s: {refused.value}")  # for the report, not a limit
    return " ".join(str(refused.value).split())


def _explained(props: Mapping[str, Any]) -> str:
    admin = clients.admin(props, log_level=0)
    deadline = time.monotonic() + 120
    while True:
        try:
            admin.list_topics(timeout=2)
        except KafkaException as exc:
            admin.poll(0)  # serve the error callback that records the cause
            said = access_errors.explain(props, exc)
            if "security.protocol mismatch" in said or time.monotonic() > deadline:
                return said
        else:
            raise AssertionError("a client with the wrong security.protocol was answered")


def test_a_plaintext_client_at_a_tls_port_is_told_to_check_security_protocol(secure_sandbox: Sandbox) -> None:
    state = secure_sandbox.clusters["src"]
    props = {"bootstrap.servers": state.bootstrap}  # no security.protocol: PLAINTEXT
    access_errors.name_clusters({"src-plain": props})
    said = _gateway_refusal(props)
    assert f"cluster src-plain ({state.bootstrap})" in said, said
    assert "security.protocol mismatch" in said and "set security.protocol to SSL or SASL_SSL" in said, said
    said = _explained(props)
    assert "security.protocol mismatch" in said and "set security.protocol to SSL or SASL_SSL" in said, said


def test_a_tls_client_at_a_plaintext_port_is_told_the_listener_is_plaintext(
    sandbox: Sandbox, secure_sandbox: Sandbox
) -> None:
    state = sandbox.clusters["src"]
    tls = secure_sandbox.clusters["dst"].props()  # a real CA and client certificate; only the port is wrong
    props = {**tls, "bootstrap.servers": state.bootstrap}
    access_errors.name_clusters({"src-tls": props})
    said = _gateway_refusal(props)
    assert f"cluster src-tls ({state.bootstrap})" in said, said
    assert "security.protocol mismatch" in said and "plaintext" in said, said
    said = _explained(props)
    assert "security.protocol mismatch" in said, said
