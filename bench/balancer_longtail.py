"""Long-tail benchmark: pipelined window vs batch submission, same cluster, same data, one run.

Starts a 4-broker sandbox, creates one big partition on broker 1 and many small ones on broker 2,
then moves them all (big -> broker 3, small -> broker 4) under a replication throttle, first in
`batch` mode (submit N, wait for all N, like kafka-reassign-partitions) and then in `pipeline`
mode, moving the data back unthrottled in between. Prints both wall times and the ratio.

Run: python bench/balancer_longtail.py [--small 24] [--big-mb 4] [--throttle 150000] [--window 4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from strait import clients
from strait.balancer import executor
from strait.balancer.gateway import KafkaGateway
from strait.balancer.plan import InterBrokerMove, Plan
from strait.balancer.state import StateStore
from strait.balancer.window import Caps
from strait.sandbox import Sandbox, SandboxSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=24, help="number of small partitions (60 KB each)")
    parser.add_argument("--big-mb", type=float, default=4.0, help="size of the big partition in MB")
    parser.add_argument("--throttle", type=int, default=150_000, help="replication throttle, bytes/s")
    parser.add_argument("--window", type=int, default=4, help="moves in flight (batch size in batch mode)")
    args = parser.parse_args()

    state_dir = Path(tempfile.mkdtemp(prefix="strait-longtail-"))
    sb = Sandbox.up(SandboxSpec(clusters=("lt",), brokers=4, racks=2, log_dirs=1, zookeeper=False,
                                state_dir=state_dir))
    try:
        props = {"bootstrap.servers": sb.clusters["lt"].bootstrap}
        assignments = {0: [1], **{p: [2] for p in range(1, args.small + 1)}}
        admin = clients.legacy_admin(props)
        admin.create_topics({"tail": {"num_partitions": -1, "replication_factor": -1, "assignments": assignments}})
        admin.close()
        time.sleep(2)
        producer = clients.producer(props, **{"acks": "all", "linger.ms": 2, "batch.num.messages": 16})
        counts = {0: int(args.big_mb * 1000), **{p: 60 for p in range(1, args.small + 1)}}
        for p, n in counts.items():
            for _ in range(n):
                producer.produce("tail", b"r" * 1000, partition=p)
                producer.poll(0)
        producer.flush(60)

        gw = KafkaGateway(props)
        store = StateStore(props)
        forward = tuple(
            InterBrokerMove("tail", p, (1,), (3,), {}, counts[p] * 1000) if p == 0
            else InterBrokerMove("tail", p, (2,), (4,), {}, counts[p] * 1000)
            for p in assignments
        )
        back = tuple(InterBrokerMove(m.topic, m.partition, m.target, m.source, {}, m.bytes) for m in forward)
        caps = Caps(in_flight=args.window, broker_in=args.window, broker_out=args.window, disk=args.window)
        wide = Caps(in_flight=64, broker_in=64, broker_out=64, disk=64)
        times: dict[str, float] = {}
        for mode in ("batch", "pipeline"):
            run = executor.start(gw, store, Plan(operation="long-tail", moves=forward),
                                 executor.Options(mode=mode, caps=caps, throttle=args.throttle))
            t0 = time.monotonic()
            final = run.run()
            times[mode] = time.monotonic() - t0
            print(f"{mode:8s}: {times[mode]:6.1f}s ({final.done} moves done, {final.failed} failed)", flush=True)
            executor.start(gw, store, Plan(operation="undo", moves=back), executor.Options(caps=wide)).run()
        gw.close()
        print(f"pipeline is {times['batch'] / times['pipeline']:.2f}x faster than batch "
              f"(1 x {args.big_mb} MB + {args.small} x 60 KB, window {args.window}, throttle {args.throttle} B/s)")
    finally:
        sb.down()


if __name__ == "__main__":
    main()
