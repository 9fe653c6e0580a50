"""MirrorMaker 2 (the benchmark's peer) copies between the secured sandbox clusters.

`src` is SASL_SSL with SCRAM-SHA-512, `dst` mutual TLS; the benchmark runner translates their
librdkafka properties into the Java clients' (`strait.bench.mirrormaker.java_client_properties`).
MirrorMaker runs as the super user: its Connect group and internal topics are not Strait's.
"""

from __future__ import annotations

import stat
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.bench.mirrormaker import MirrorMaker2
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration

RECORDS = 50


def _end_offset(props: Mapping[str, Any], topic: str) -> int:
    consumer = clients.consumer(props, **{"group.id": f"mm2-check-{uuid.uuid4().hex[:6]}"})
    try:
        if topic not in consumer.list_topics(topic, timeout=10).topics:
            return 0
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    except Exception:
        return 0  # not created yet, or no leader yet
    finally:
        consumer.close()


def test_mirrormaker_copies_from_scram_to_mtls(secure_sandbox: Sandbox, tmp_path: Path) -> None:
    src, dst = secure_sandbox.clusters["src"], secure_sandbox.clusters["dst"]
    topic = f"mirrored-{uuid.uuid4().hex[:6]}"
    admin = clients.admin(src.admin_props())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = clients.producer(src.admin_props())
    for i in range(RECORDS):
        producer.produce(topic, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    mm2 = MirrorMaker2(
        src_bootstrap=src.bootstrap,
        dst_bootstrap=dst.bootstrap,
        workdir=tmp_path / "mm2",
        tasks=1,
        heap="256m",
        src_props=src.admin_props(),
        dst_props=dst.admin_props(),
    )
    started = time.monotonic()
    mm2.start([topic])
    try:
        deadline = time.monotonic() + 240  # a MirrorMaker JVM starts slowly on a loaded two-core machine
        while _end_offset(dst.admin_props(), topic) < RECORDS:
            assert time.monotonic() < deadline, f"MirrorMaker copied nothing in 240s; see {mm2.logs()}"
            assert mm2.pids(), f"MirrorMaker exited; see {mm2.logs()}"
            time.sleep(1)
        print(f"\nMirrorMaker 2 copied {RECORDS} records over SCRAM/TLS -> mTLS in {time.monotonic() - started:.0f}s")
    finally:
        mm2.stop()

    config = next((tmp_path / "mm2").glob("mm2-node-*.properties"))
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    log = "".join(p.read_text(errors="replace") for p in mm2.logs())
    assert src.admin_props()["sasl.password"] not in log
    assert "PRIVATE KEY" not in log
