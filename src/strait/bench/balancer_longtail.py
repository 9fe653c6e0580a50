"""Long-tail benchmark: pipelined window vs batch submission, same cluster, same data, one run.

Starts a 4-broker sandbox, creates one big partition on broker 1 and many small ones on broker 2,
then moves them all (big -> broker 3, small -> broker 4) under a replication throttle, first in
`batch` mode (submit N, wait for all N, like kafka-reassign-partitions) and then in `pipeline`
mode, moving the data back unthrottled in between. Reports both wall times and the ratio.

Run: `strait bench longtail [--small 24] [--big-mb 4] [--throttle 150000] [--window 4]`
(or `python -m strait.bench.balancer_longtail` with the same options).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strait import clients
from strait.balancer import executor
from strait.balancer.gateway import KafkaGateway
from strait.balancer.plan import InterBrokerMove, Plan
from strait.balancer.state import StateStore
from strait.balancer.window import Caps
from strait.sandbox import Sandbox, SandboxSpec


def run(
    *,
    small: int = 24,
    big_mb: float = 4.0,
    throttle: int = 150_000,
    window: int = 4,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run both modes on a fresh sandbox and return their wall times and the ratio."""
    state_dir = Path(tempfile.mkdtemp(prefix="strait-longtail-"))
    load = os.getloadavg()
    sb = Sandbox.up(SandboxSpec(clusters=("lt",), brokers=4, racks=2, log_dirs=1, zookeeper=False, state_dir=state_dir))
    try:
        props = {"bootstrap.servers": sb.clusters["lt"].bootstrap}
        assignments = {0: [1], **{p: [2] for p in range(1, small + 1)}}
        admin = clients.legacy_admin(props)
        admin.create_topics({"tail": {"num_partitions": -1, "replication_factor": -1, "assignments": assignments}})
        admin.close()
        time.sleep(2)
        producer = clients.producer(props, **{"acks": "all", "linger.ms": 2, "batch.num.messages": 16})
        counts = {0: int(big_mb * 1000), **{p: 60 for p in range(1, small + 1)}}
        for p, n in counts.items():
            for _ in range(n):
                producer.produce("tail", b"r" * 1000, partition=p)
                producer.poll(0)
        producer.flush(60)

        gw = KafkaGateway(props)
        store = StateStore(props)
        forward = tuple(
            InterBrokerMove("tail", p, (1,), (3,), {}, counts[p] * 1000)
            if p == 0
            else InterBrokerMove("tail", p, (2,), (4,), {}, counts[p] * 1000)
            for p in assignments
        )
        back = tuple(InterBrokerMove(m.topic, m.partition, m.target, m.source, {}, m.bytes) for m in forward)
        caps = Caps(in_flight=window, broker_in=window, broker_out=window, disk=window)
        wide = Caps(in_flight=64, broker_in=64, broker_out=64, disk=64)
        times: dict[str, float] = {}
        for mode in ("batch", "pipeline"):
            execution = executor.start(
                gw,
                store,
                Plan(operation="long-tail", moves=forward),
                executor.Options(mode=mode, caps=caps, throttle=throttle),
            )
            t0 = time.monotonic()
            final = execution.run()
            times[mode] = time.monotonic() - t0
            log(f"{mode:8s}: {times[mode]:6.1f}s ({final.done} moves done, {final.failed} failed)")
            executor.start(gw, store, Plan(operation="undo", moves=back), executor.Options(caps=wide)).run()
        gw.close()
    finally:
        sb.down()
    ratio = times["batch"] / times["pipeline"]
    log(
        f"pipeline is {ratio:.2f}x faster than batch (1 x {big_mb} MB + {small} x 60 KB, window {window}, "
        f"throttle {throttle} B/s; load average {load[0]:.2f} at start)"
    )
    return {
        "small": small,
        "big_mb": big_mb,
        "throttle": throttle,
        "window": window,
        "batch_s": round(times["batch"], 3),
        "pipeline_s": round(times["pipeline"], 3),
        "ratio": round(ratio, 3),
        "load_average_before": [round(x, 2) for x in load],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=24, help="number of small partitions (60 KB each)")
    parser.add_argument("--big-mb", type=float, default=4.0, help="size of the big partition in MB")
    parser.add_argument("--throttle", type=int, default=150_000, help="replication throttle, bytes/s")
    parser.add_argument("--window", type=int, default=4, help="moves in flight (batch size in batch mode)")
    args = parser.parse_args()
    run(small=args.small, big_mb=args.big_mb, throttle=args.throttle, window=args.window)


if __name__ == "__main__":
    main()
