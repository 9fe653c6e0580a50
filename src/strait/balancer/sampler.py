"""Taking traffic samples from a live cluster: the I/O half of `strait.balancer.traffic`.

A sample reads, for every partition, its log-start and log-end offsets (ListOffsets, one call
for the whole cluster), its size (DescribeLogDirs, through the balancer's gateway, which also
gives the model planned with) and every consumer group's committed offsets. No JMX agent is
involved. `measure` takes two samples `window_s` apart and returns the later model and the rates.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from strait import clients
from strait.balancer.errors import ClusterError
from strait.balancer.model import ClusterModel, PartitionKey
from strait.balancer.traffic import PartitionSample, Sample, Traffic, rates

log = logging.getLogger(__name__)
_TIMEOUT_S = 30.0


class ModelSource(Protocol):
    def load_model(self) -> ClusterModel: ...


def offsets(admin: Any, keys: Iterable[PartitionKey]) -> dict[PartitionKey, tuple[int, int]]:
    """(log-start, log-end) offset of each partition, by ListOffsets on its leader."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    wanted = sorted(set(keys))
    if not wanted:
        return {}
    found: dict[PartitionKey, list[int]] = {k: [0, 0] for k in wanted}
    specs = ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest()))  # type: ignore[no-untyped-call]
    for slot, spec in specs:
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted}, request_timeout=_TIMEOUT_S)
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)][slot] = int(
                    clients.admin_result(future, _TIMEOUT_S, "ListOffsets").offset
                )
            except KafkaException as exc:  # a partition without a leader now: no rate this time
                log.debug("ListOffsets %s-%s: %s", tp.topic, tp.partition, exc)
                found.pop((tp.topic, tp.partition), None)
    return {k: (v[0], v[1]) for k, v in found.items()}


def committed(admin: Any) -> dict[tuple[str, str, int], int]:
    """Every consumer group's committed offset per partition; empty where groups cannot be read."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    try:
        listing = clients.admin_result(admin.list_consumer_groups(request_timeout=_TIMEOUT_S), _TIMEOUT_S, "groups")
    except KafkaException as exc:
        log.info("cannot list consumer groups, read rates left out: %s", exc)
        return {}
    found: dict[tuple[str, str, int], int] = {}
    for group in sorted(g.group_id for g in listing.valid):
        try:
            futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            result = clients.admin_result(futures[group], _TIMEOUT_S, f"offsets of group {group}")
        except KafkaException as exc:
            log.info("cannot read the offsets of group %s: %s", group, exc)
            continue
        for tp in result.topic_partitions or ():
            if tp.offset >= 0:
                found[(group, tp.topic, tp.partition)] = int(tp.offset)
    return found


def sample(source: ModelSource, admin: Any, clock: Callable[[], float] = time.monotonic) -> tuple[ClusterModel, Sample]:
    """The model now and a sample of it (sizes from the model, offsets and commits from `admin`)."""
    model = source.load_model()
    at = clock()
    ends = offsets(admin, model.partitions)
    groups = committed(admin)
    parts = {
        key: PartitionSample(start, end, model.partitions[key].size)
        for key, (start, end) in ends.items()
        if key in model.partitions
    }
    return model, Sample(at, parts, groups)


def measure(
    source: ModelSource,
    props: Mapping[str, Any],
    window_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[ClusterModel, Traffic]:
    """Sample, wait `window_s`, sample again: the later model and each partition's rates."""
    if window_s <= 0:
        raise ValueError(f"the traffic window must be positive, got {window_s}")
    admin = clients.admin(props)
    try:
        _, first = sample(source, admin, clock)
        sleep(window_s)
        model, second = sample(source, admin, clock)
    except ClusterError:
        raise
    except Exception as exc:
        raise ClusterError(f"sampling traffic failed: {exc}") from exc
    return model, rates(first, second)
