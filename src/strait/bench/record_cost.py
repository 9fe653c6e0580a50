"""The record copy loop's own cost per record, without Kafka brokers: ``python -m strait.bench.record_cost``.

One :class:`~strait.worker.fetch.RecordPipeline` copies a topic of ``--records`` records of
``--size`` bytes to another topic of librdkafka's built-in mock cluster (``test.mock.num.brokers``:
in-process brokers written in C, no JVM), with the real consumer, idempotent producer, delivery
reports and a :class:`~strait.metrics.stages.RouteObserver`. The loop runs on this thread, so
``time.thread_time()`` is the Python loop's CPU per record (its C calls included; librdkafka's
own threads and the mock brokers excluded), divided by the records acknowledged: the mock
cluster keeps only about 40,800 records of 100 B per partition, so fewer than ``--records`` are
copied (the rest is skipped as a retention gap). Repeated ``--repeats`` times; the best run is the
one least disturbed by other work on the machine, and the load average is printed next to it.

``--delivery exactly-once`` copies with a :class:`~strait.worker.transactional.TransactionalPipeline`
instead (the mock cluster has a transaction coordinator and group coordinator): records and
checkpoints in transactions of ``--transaction-ms``, the loop's commits included in its CPU.

To compare with another version of the code, run this file with ``PYTHONPATH`` pointing at that
version's ``src`` (the pipeline's constructor and ``_step`` are all it uses).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from strait import clients
from strait.metrics.stages import RouteObserver
from strait.worker.fetch import RecordPipeline
from strait.worker.pipeline import CATCHUP_SETTINGS, PartitionState
from strait.worker.task import PartitionTask

SOURCE, DESTINATION = "cost-source", "cost-destination"


def mock_cluster() -> tuple[Any, str]:
    """A mock cluster (alive as long as the returned handle) and its bootstrap servers."""
    owner = clients.producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = owner.list_topics(timeout=10).brokers.values()
    return owner, ",".join(f"{b.host}:{b.port}" for b in brokers)


def load(bootstrap: str, records: int, size: int, compression: str) -> None:
    """Create both topics (the mock cluster makes a topic of one partition when a client that
    may auto-create asks for its metadata) and write the source topic."""
    producer = clients.producer(
        {"bootstrap.servers": bootstrap, "log_level": 3},
        **{"compression.type": compression, "linger.ms": 50, "queue.buffering.max.messages": 1_000_000},
    )
    for topic in (SOURCE, DESTINATION):
        producer.list_topics(topic, timeout=10)
    value = os.urandom(size)
    for _ in range(records):
        while True:
            try:
                producer.produce(SOURCE, value, b"key", partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    producer.close()


def copy_once(
    bootstrap: str, records: int, group: str, delivery: str = "at-least-once", transaction_ms: int = 100
) -> dict[str, float]:
    """Copy the whole source topic once; wall and loop-thread CPU time."""
    props = {"bootstrap.servers": bootstrap, "log_level": 3}
    common: dict[str, Any] = {
        "name": "catchup",
        "source": props,
        "destination": props,
        "group_id": group,
        "client_id": group,
        "settings": CATCHUP_SETTINGS,
        "observer": RouteObserver("cost"),
    }
    pipeline: RecordPipeline
    if delivery == "exactly-once":
        from strait.worker.transactional import TransactionalPipeline

        pipeline = TransactionalPipeline(
            transactional_id=lambda name: f"strait.{group}.{name}",
            checkpoint_group=f"strait.{group}",
            transaction_interval_s=transaction_ms / 1000,
            **common,
        )
    else:
        pipeline = RecordPipeline(**common)
    state = PartitionState(PartitionTask("cost", SOURCE, 0, DESTINATION))
    pipeline.add(state, 0)
    # The loop's CPU is counted over the whole copy: until the first acknowledgement (metadata,
    # producer id, first fetch) the loop produces up to its producer queue's bound, so a window
    # opened at the first acknowledgements would leave most produce calls outside it and count
    # their reports inside. Waiting costs no thread CPU; the rate is timed from the first
    # acknowledgement on. Records are those acknowledged (state.records), not the checkpoint's
    # move: the mock cluster keeps only the last few MB of a partition, and a copy from 0 skips
    # what it deleted (a retention gap; 159,174 of 200,000 records of 100 B).
    deadline = time.monotonic() + 660
    cpu = time.thread_time()
    while not state.records and time.monotonic() < deadline and not state.error:
        pipeline._step()
    start_records = state.records
    wall = time.perf_counter()
    while (state.checkpoint or 0) < records and time.monotonic() < deadline and not state.error:
        pipeline._step()
    if state.error:
        raise SystemExit(f"the copy failed: {state.error}")
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    copied = state.records
    timed = copied - start_records
    pipeline._stopping.set()
    pipeline._shutdown()  # flushes, then closes both clients
    return {
        "records": copied,
        "wall_s": round(wall, 3),
        "loop_cpu_s": round(cpu, 3),
        "records_per_s": round(timed / wall) if wall else 0.0,
        "loop_us_per_record": round(1e6 * cpu / copied, 3) if copied else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delivery", choices=("at-least-once", "exactly-once"), default="at-least-once")
    parser.add_argument("--transaction-ms", type=int, default=100, help="exactly-once: transaction interval")
    args = parser.parse_args()
    owner, bootstrap = mock_cluster()
    load(bootstrap, args.records, args.size, args.compression)
    runs = [
        copy_once(bootstrap, args.records, f"cost-{n}", args.delivery, args.transaction_ms) for n in range(args.repeats)
    ]
    best = min(runs, key=lambda r: r["loop_us_per_record"])
    print(
        json.dumps(
            {
                "records": args.records,
                "size": args.size,
                "compression": args.compression,
                "delivery": args.delivery,
                "best": best,
                "runs": runs,
                "load_average": [round(x, 2) for x in os.getloadavg()],
            },
            indent=1,
        )
    )
    del owner


if __name__ == "__main__":
    main()
