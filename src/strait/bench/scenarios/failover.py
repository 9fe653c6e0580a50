"""Consumer failover: records a consumer group re-reads or skips after moving to the destination.

Per system, on its own fresh topic: the topic is pre-filled and copied in full; then a consumer
group consumes part of each partition on the source (different depths, committing every
``commit_every`` records and at its last record) and stops. The group's offsets reach the
destination through each system's continuous group sync:

- Strait: the route's ``groups`` (the leader translates exactly through the offset map every
  1 s); then ``strait failover`` (plan and apply) is run too and must find the same offsets;
- MirrorMaker 2: its checkpoint connector (``emit.checkpoints.enabled``, offset syncs every
  ``offset.lag.max`` records, ``sync.group.offsets.enabled`` with a 1 s interval), which writes
  the translated offsets to the same group on the target while the group is inactive there.

The replicator then stops (the source cluster is gone), and a consumer of the group on the
destination resumes where the group's committed offsets say (a partition without one starts at
the earliest record, as ``auto.offset.reset=earliest``) and reads to the end. Per partition it
counts records it reads again (already consumed on the source) and records it never reads
(skipped). The records carry their source partition and sequence number, so neither count
depends on destination offsets.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from strait import clients
from strait.bench import workload
from strait.bench.records import decode, encode
from strait.bench.scenarios.harness import Bench, DestinationCount, ratio, run_safely, running, topic_name

# Where the group stops in each partition, as a fraction of the partition (far behind to nearly
# caught up: MirrorMaker's offset-sync store keeps fewer syncs for older offsets).
DEPTHS = (0.013, 0.25, 0.5, 0.77, 0.9, 0.995)
MM2_OFFSET_LAG_MAX = 100  # MirrorMaker's default: an offset sync at least every 100 records


def failover(
    bench: Bench,
    *,
    records: int = 60_000,
    partitions: int = 6,
    size: int = 100,
    commit_every: int = 500,
    mm2_sync_wait_s: float = 120.0,
    delivery: str | None = None,
) -> dict[str, Any]:
    """A group fails over from source to destination: records re-read and skipped, per system.
    ``delivery``: Strait's route delivery (None: the default, at-least-once); an exactly-once
    route writes its offset map inside its transactions, which the map's cost then shows."""
    runs = []
    for system in bench.order(0):
        bench.log(f"failover: {system}, {records:,} records in {partitions} partitions, group stops at {DEPTHS}")
        run = _failover_run(bench, system, records, partitions, size, commit_every, mm2_sync_wait_s, delivery)
        runs.append(run)
        bench.log(
            f"  -> re-read {run.get('re_read')}, skipped {run.get('skipped')}, untranslated partitions "
            f"{run.get('untranslated_partitions')}, offsets on the destination after "
            f"{run.get('translated_after_s')} s" + (f" FAILED: {run['error']}" if run.get("error") else "")
        )
        cost = run.get("offset_map")
        if cost:
            bench.log(
                f"  -> offset map: {cost['map_records']} records, {cost['runs']} runs, {cost['bytes']} bytes, "
                f"{cost['bytes_per_gb_copied']} bytes per GB copied, {cost['map_records_per_s']} records/s"
            )
    by = {r["system"]: r for r in runs}
    strait, mm2 = by.get("strait", {}), by.get("mm2", {})
    return {
        "scenario": "failover",
        "params": {
            "records": records,
            "partitions": partitions,
            "size": size,
            "depths": list(DEPTHS),
            "commit_every": commit_every,
            "strait_delivery": delivery or "at-least-once",
            "mm2_offset_lag_max": MM2_OFFSET_LAG_MAX,
            "mm2_sync_group_offsets_interval_s": 1,
            "mm2_emit_checkpoints_interval_s": 1,
        },
        "runs": runs,
        "ratios": {
            "re_read": ratio(strait.get("re_read"), mm2.get("re_read")),
            "skipped": ratio(strait.get("skipped"), mm2.get("skipped")),
        },
    }


def stop_offsets(per_partition: Mapping[int, int]) -> dict[int, int]:
    """Where the group stops in each partition (the offset it commits: the next record to read)."""
    return {p: max(1, min(n - 1, round(n * DEPTHS[p % len(DEPTHS)]) + 7)) for p, n in per_partition.items()}


def count_resume(stop: int, total: int, seqs: Sequence[int]) -> dict[str, int]:
    """Pure: a resumed consumer read ``seqs`` (in order) from a partition of ``total`` records
    after the group had consumed ``stop`` of them on the source."""
    after = {s for s in seqs if s >= stop}
    return {
        "re_read": sum(1 for s in seqs if s < stop),
        "skipped": (total - stop) - len(after),
        "first_seq": seqs[0] if seqs else total,
    }


def mm2_extra(group: str) -> dict[str, str]:
    """MirrorMaker's checkpoint machinery, on, for this run's group only."""
    return {
        "emit.offset-syncs.enabled": "true",
        "offset-syncs.topic.replication.factor": "1",
        "offset.lag.max": str(MM2_OFFSET_LAG_MAX),
        "emit.checkpoints.enabled": "true",
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "refresh.groups.enabled": "true",
        "refresh.groups.interval.seconds": "2",
        "groups": re.escape(group),
    }


def _failover_run(
    bench: Bench,
    system: str,
    records: int,
    partitions: int,
    size: int,
    commit_every: int,
    mm2_wait_s: float,
    delivery: str | None = None,
) -> dict[str, Any]:
    run_dir = bench.run_dir(topic_name("failover", system))
    tag = uuid.uuid4().hex[:6]
    topic = topic_name("failover", tag, system)
    group = topic_name("failover-app", tag, system)
    workload.create_topics(bench.src, [topic], partitions)
    counts = workload.prefill(bench.src, topic, partitions, records, size)
    totals = {p: counts[(topic, p)] for p in range(partitions)}
    replicator = bench.replicator(
        system,
        run_dir,
        parallelism=1,
        mm2_extra=mm2_extra(group) if system == "mm2" else None,
        strait_groups={"include": [re.escape(group)], "interval_s": 1} if system == "strait" else None,
        delivery=delivery if system == "strait" else None,
    )
    result: dict[str, Any] = {
        "system": system,
        "replicator": replicator.describe(),
        "logs": str(run_dir),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }

    def body() -> None:
        started = time.monotonic()
        with running(replicator, [topic]):
            if not DestinationCount(bench.dst, {topic: partitions}).wait_for(records, 600):
                raise RuntimeError(f"{system} did not copy all {records} records within 600 s")
            result["copied_after_s"] = round(time.monotonic() - started, 2)
            stops = stop_offsets(totals)
            _consume_on_source(bench.src, group, topic, stops, commit_every)
            committed_at = time.monotonic()
            # Both systems' continuous group sync (Strait: the route's `groups`, run by the leader).
            translated, detail = _synced(bench.dst, group, topic, partitions, mm2_wait_s)
            result["translated_after_s"] = round(time.monotonic() - committed_at, 2)
            result["translation"] = detail
            if system == "strait":
                # And the one-shot `strait failover`: the same exact offsets (it commits only
                # what would move the group forward, so nothing here).
                planned, result["failover"] = _strait_failover(bench, group, partitions)
                result["failover_equals_sync"] = planned == translated
                # What the offset map of this copy costs (its runs are all published by now:
                # the failover found every partition's translation exact and replicated).
                copied = records * len(encode(0, 0, 0, size))
                result["offset_map"] = map_cost(bench.dst, "bench", topic, copied, result["copied_after_s"])
        # The replicator is stopped: the source is gone; the group resumes on the destination.
        per_partition: dict[int, dict[str, Any]] = {}
        committed, read = _resume_on_destination(bench.dst, group, topic, partitions)
        for p, seqs in read.items():
            row = count_resume(stops[p], totals[p], seqs)
            per_partition[p] = {
                "records": totals[p],
                "source_committed": stops[p],
                "destination_committed": committed.get(p),
                "synced": translated.get(p),
                **row,
            }
        result.update(
            per_partition=per_partition,
            consumed_on_source=sum(stops.values()),
            re_read=sum(r["re_read"] for r in per_partition.values()),
            skipped=sum(r["skipped"] for r in per_partition.values()),
            untranslated_partitions=sum(1 for r in per_partition.values() if r["destination_committed"] is None),
            load_average_at_end=[round(x, 2) for x in os.getloadavg()],
        )

    return run_safely(result, body)


def map_cost(
    props: Mapping[str, Any], route: str, topic: str, copied_bytes: int, copy_s: float | None
) -> dict[str, Any]:
    """The route's offset map for ``topic``: its records, runs and bytes, bytes per GB (10^9 bytes)
    copied, and the map records written per second over the copy (``copy_s``)."""
    from strait.offsetmap.cost import per_gigabyte
    from strait.offsetmap.store import map_size

    found = map_size(props, route, [topic])
    per_gb = per_gigabyte(found.bytes, copied_bytes)
    return {
        "map_records": found.records,
        "runs": found.runs,
        "partitions": found.partitions,
        "bytes": found.bytes,
        "copied_bytes": copied_bytes,
        "bytes_per_gb_copied": None if per_gb is None else round(per_gb, 1),
        # The same records in the JSON encoding written before the binary one.
        "json_bytes": found.json_bytes,
        "map_records_per_s": round(found.records / copy_s, 2) if copy_s else None,
        "counted": "key and value bytes of the map records (no batch framing)",
    }


def _consume_on_source(
    props: Mapping[str, Any], group: str, topic: str, stops: Mapping[int, int], commit_every: int
) -> None:
    """The application: reads each partition up to its stop, committing as it goes, then stops."""
    consumer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in stops])
    position = dict.fromkeys(stops, 0)
    done: set[int] = set()
    deadline = time.monotonic() + 300
    try:
        while len(done) < len(stops):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the source group read only {position} of {dict(stops)}")
            for message in consumer.consume(1000, 0.5):
                p = message.partition() or 0
                if message.error() is not None or p in done:
                    continue
                position[p] = (message.offset() or 0) + 1
                if position[p] % commit_every == 0 or position[p] >= stops[p]:
                    consumer.commit(offsets=[TopicPartition(topic, p, position[p])], asynchronous=False)
                if position[p] >= stops[p]:
                    done.add(p)
                    consumer.pause([TopicPartition(topic, p)])
    finally:
        consumer.close()


def _strait_failover(bench: Bench, group: str, partitions: int) -> tuple[dict[int, int], list[dict[str, Any]]]:
    """`strait failover` for the group, once the offset map covers what the group consumed."""
    from strait.config import parse_config
    from strait.offsetmap import failover

    config = parse_config(
        {
            "clusters": {"src": bench.src, "dst": bench.dst},
            "routes": [{"name": "bench", "source": "src", "destination": "dst"}],
        },
        environ={},
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            planned = failover.plan(config, "bench", group)
        except failover.NothingToTranslate:
            planned = []
        ready = len(planned) == partitions and all(p.exact and p.not_replicated == 0 for p in planned)
        if ready or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    failover.apply(config, "bench", group, planned)
    offsets = {p.partition: p.destination_offset for p in planned if p.destination_offset is not None}
    return offsets, [p.as_dict() for p in planned]


def _synced(
    props: Mapping[str, Any], group: str, topic: str, partitions: int, wait_s: float
) -> tuple[dict[int, int], dict[str, Any]]:
    """The group's offsets on the destination as the replicator's group sync wrote them, once every
    partition has one and none changed for 5 s (or ``wait_s`` passed: partitions without one stay
    untranslated)."""
    reader = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + wait_s
    last: dict[int, int] = {}
    stable_since = time.monotonic()
    first_complete: float | None = None
    started = time.monotonic()
    try:
        while time.monotonic() < deadline:
            listed = clients.committed_offsets(reader, [TopicPartition(topic, p) for p in range(partitions)], 10)
            now = {tp.partition: tp.offset for tp in listed if tp.error is None and tp.offset >= 0}
            if now != last:
                last, stable_since = now, time.monotonic()
            if len(now) == partitions and first_complete is None:
                first_complete = time.monotonic() - started
            if len(now) == partitions and time.monotonic() - stable_since >= 5:
                break
            time.sleep(0.5)
    finally:
        reader.close()
    return last, {
        "complete_after_s": None if first_complete is None else round(first_complete, 2),
        "partitions_with_offsets": len(last),
    }


def _resume_on_destination(
    props: Mapping[str, Any], group: str, topic: str, partitions: int
) -> tuple[dict[int, int], dict[int, list[int]]]:
    """The group's consumer on the destination: from its committed offsets (earliest without one)
    to the end of each partition. Returns the committed offsets it found, and the source sequence
    numbers it reads, per partition."""
    consumer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    committed = clients.committed_offsets(consumer, tps, 15)
    start = {tp.partition: tp.offset if tp.error is None and tp.offset >= 0 else OFFSET_BEGINNING for tp in committed}
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, start[p]) for p in range(partitions)])
    seqs: dict[int, list[int]] = {p: [] for p in range(partitions)}
    position = {p: start[p] if start[p] >= 0 else 0 for p in range(partitions)}
    deadline = time.monotonic() + 300
    try:
        while any(position[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"resuming on the destination read only to {position} of {ends}")
            messages = consumer.consume(1000, 0.5)
            if not messages:
                # An exactly-once copy ends with a commit marker, which holds no record: the
                # consumer's position says it was passed.
                for tp in consumer.position(tps):
                    if tp.offset >= 0:
                        position[tp.partition] = max(position[tp.partition], tp.offset)
            for message in messages:
                if message.error() is not None:
                    continue
                p = message.partition() or 0
                position[p] = (message.offset() or 0) + 1
                stamp = decode(message.value())
                if stamp is not None:
                    seqs[p].append(stamp.seq)
    finally:
        consumer.close()
    return {p: o for p, o in start.items() if o >= 0}, seqs
