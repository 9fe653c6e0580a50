"""Non-blocking raw-batch I/O for the batch pipeline: one kafka-python network selector shared
by the source and the destination cluster, so one thread drives fetches and produces at once.

Why kafka-python 3: its request classes are generated from Kafka's own JSON schemas and carry
the ``records`` field as plain bytes both ways (no hand-written encoder is needed; the versions
used are in :mod:`strait.worker.batch.protocol`), and its connection layer speaks SASL and TLS
with the options :func:`strait.clients.kafka_python_options` builds. Every call here returns a
kafka-python ``Future`` (or answers at once from a cache); :meth:`Links.poll` drives both
clusters' sockets. The sockets' reads and the response parser are in
:mod:`strait.worker.batch.transport`; answers are read into plain values in
:mod:`strait.worker.batch.answers`.

Requests:

- Fetch (v4-12): many partitions of one source leader in one sessionless request, each from its
  own offset, ``read_committed`` (the answer carries the aborted transactions).
- Produce (v3-9): one batch per partition per request, several partitions of one destination
  leader in one request, ``acks=all``.
- InitProducerId: one idempotent producer id and epoch per partition copy (a rewind or a new
  owner takes a new one, so sequences always start at 0 and never need repair).
- Metadata and DescribeConfigs: blocking, rare (start of a partition, a leader change).
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from strait.clients import kafka_python_options
from strait.worker.batch.answers import Key as Key
from strait.worker.batch.answers import fetched_partitions as fetched_partitions
from strait.worker.batch.answers import leaders_of
from strait.worker.batch.answers import produced_partitions as produced_partitions
from strait.worker.batch.compat import DestinationTopic
from strait.worker.batch.outcomes import error_name
from strait.worker.batch.protocol import FETCH_MAX_VERSION, PRODUCE_MAX_VERSION, READ_COMMITTED, WireError
from strait.worker.batch.transport import manager_class

TOPIC_RESOURCE = 2
# Requests outstanding per connection: the pipeline keeps at most 5 batches in flight per
# partition itself; a connection carries several partitions' requests.
MAX_IN_FLIGHT_PER_CONNECTION = 64

# Connections to each destination broker ("lanes"). A broker reads, handles and answers one
# request per connection at a time, and over TLS the reading includes decrypting the whole
# request on one network thread, so more lanes let a broker decrypt one request while it appends
# another. Each partition always uses the same lane (ClusterLink.lane_of), so its batches and
# their sequences still arrive in order. One lane unless the worker's batch_produce_lanes says
# more: on the 2-core benchmark machine a quiet TLS copy already kept about 85 % of both cores busy (the
# brokers encrypting and decrypting), leaving extra lanes little idle CPU, and each lane splits
# the requests further (more of the loop's CPU per batch). `strait bench security
# --produce-lanes default,4` measures both in one run.

# Blocking requests try this many brokers, each not yet connected given this long to connect.
CALL_TRIES = 3
CONNECT_WAIT_MS = 5_000


class ClusterLink:
    """A kafka-python network client to one cluster, on a (shared) network selector.

    ``lanes``: connections to each broker, each its own kafka-python client; produce requests
    take the lane of their partitions (:meth:`lane_of`), everything else the first lane.
    """

    def __init__(
        self, props: Mapping[str, Any], *, net: Any, client_id: str, request_timeout_ms: int, lanes: int = 1
    ) -> None:
        from kafka.net.compat import KafkaNetClient

        options = kafka_python_options(dict(props))
        options.pop("api_version", None)
        self.timeout_ms = request_timeout_ms
        configs = {
            "client_id": client_id,
            "request_timeout_ms": request_timeout_ms,
            "receive_message_max_bytes": 128 * 1024 * 1024,
            "max_in_flight_requests_per_connection": MAX_IN_FLIGHT_PER_CONNECTION,
            **options,
        }
        self._lanes: list[Any] = []
        try:
            for _ in range(max(1, lanes)):
                client = KafkaNetClient(net=net, manager=manager_class()(net, **configs), **configs)
                self._lanes.append(client)
                client._manager.bootstrap(timeout_ms=request_timeout_ms)
        except Exception:
            self.close()
            raise
        self.client: Any = self._lanes[0]

    def close(self) -> None:
        for client in self._lanes:
            client._manager.close()

    def lane_of(self, key: Key) -> int:
        """The lane (connection to its leader) that carries ``key``'s produce requests, always the
        same for a partition."""
        lanes = len(self._lanes)
        return 0 if lanes == 1 else (zlib.crc32(key[0].encode()) + key[1]) % lanes

    def _any_node(self) -> int:
        node = self.client.least_loaded_node(bootstrap_fallback=True)
        if node is None:
            raise WireError("no broker available")
        return int(node)

    def _call(self, request: Any) -> Any:
        """A blocking request (Metadata, DescribeConfigs) to a broker that can answer.

        Brokers already connected first, then the least loaded one, then the others, at most
        ``CALL_TRIES`` of them; one not connected gets ``CONNECT_WAIT_MS`` to become ready, so
        that a broker killed with -9 does not hold the pipeline's only thread (and every
        partition with it) for the whole request timeout (30 s).
        """
        last: Exception = WireError("no broker available")
        for node in self._nodes_to_try()[:CALL_TRIES]:
            wait_ms = self.timeout_ms if self.client.is_ready(node) else min(self.timeout_ms, CONNECT_WAIT_MS)
            try:
                return self.client.send_and_receive(node, request, timeout_ms=wait_ms)
            except Exception as exc:
                last = exc
        raise last

    def _nodes_to_try(self) -> list[int]:
        known = [int(b.node_id) for b in self.client._manager.cluster.brokers()]
        ready = [n for n in known if self.client.is_ready(n)]
        order = [*ready]
        with contextlib.suppress(Exception):  # no broker known at all: only the known ones
            order.append(self._any_node())
        order += known
        return list(dict.fromkeys(order))  # first occurrence of each, in that order

    def send(self, node_id: int, request: Any, *, lane: int = 0) -> Any:
        """Send without waiting: the answer's future, a failed one if the request cannot go out.

        Never raises: kafka-python raises ``UnknownBrokerIdError`` for a node its own metadata
        no longer lists (a broker killed, while our Metadata answer still named it leader), and
        that ended the pipeline's loop; now it is a failed request like a refused connection.
        """
        from kafka.future import Future

        client = self._lanes[lane]
        try:
            client.maybe_connect(node_id)
            return client.send(node_id, request)
        except Exception as exc:
            return Future().failure(exc)

    # -- blocking, rare --------------------------------------------------------------------

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition to leader node id of ``topic`` now (partitions without a leader left out)."""
        return leaders_of(self._call(_metadata_request(topic)), topic)

    def leaders_async(self, topic: str) -> Any:
        """:meth:`leaders` without waiting: a future of the same dict (or of its error), asked of
        a connected broker when there is one."""
        from kafka.future import Future

        out = Future()
        try:
            node = next(iter(self._nodes_to_try()))
        except StopIteration:
            return out.failure(WireError("no broker available"))

        def answered(response: Any) -> None:
            try:
                leaders = leaders_of(response, topic)
            except Exception as exc:
                out.failure(exc)
            else:
                out.success(leaders)

        self.send(node, _metadata_request(topic)).add_callback(answered).add_errback(out.failure)
        return out

    def topic_configs(self, topic: str, names: Iterable[str]) -> dict[str, str | None]:
        """The named configs of ``topic`` (DescribeConfigs)."""
        from kafka.protocol.admin import DescribeConfigsRequest

        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=list(names)
                )
            ],
            include_synonyms=False,
            include_documentation=False,
            max_version=4,
        )
        response = self._call(request)
        for result in response.results:
            if result.error_code:
                raise WireError(f"configs of {topic}: {error_name(result.error_code)}", result.error_code)
            return {c.name: c.value for c in result.configs}
        return {}

    def destination_topic(self, topic: str) -> DestinationTopic:
        """What batch mode needs to know of a destination topic."""
        return DestinationTopic.from_configs(self.topic_configs(topic, ["compression.type", "max.message.bytes"]))

    def compacted(self, topic: str) -> bool:
        """True when ``topic``'s cleanup.policy includes compact."""
        policy = self.topic_configs(topic, ["cleanup.policy"]).get("cleanup.policy") or ""
        return "compact" in policy

    # -- non-blocking ----------------------------------------------------------------------

    def init_producer_id(self) -> Any:
        """InitProducerId without a transactional id: a future of the answer (see :func:`identity_of`)."""
        from kafka.future import Future
        from kafka.protocol.producer import InitProducerIdRequest

        request = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1, max_version=4
        )
        try:
            node = self._any_node()
        except Exception as exc:  # no broker reachable now: a failed request, asked again later
            return Future().failure(exc)
        return self.send(node, request)

    def fetch(
        self,
        node_id: int,
        offsets: Mapping[Key, int],
        *,
        partition_max_bytes: Mapping[Key, int],
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int = 1,
    ) -> Any:
        """One sessionless Fetch of several partitions of one leader, each from its offset."""
        from kafka.protocol.consumer import FetchRequest

        topics: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                FetchRequest.FetchTopic.FetchPartition(
                    partition=partition,
                    current_leader_epoch=-1,
                    fetch_offset=offset,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                    partition_max_bytes=partition_max_bytes[(topic, partition)],
                )
            )
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=READ_COMMITTED,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[],
            rack_id="",
            min_version=4,
            max_version=FETCH_MAX_VERSION,
        )
        return self.send(node_id, request)

    def produce(
        self,
        node_id: int,
        batches: Mapping[Key, bytes | bytearray],
        *,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> Any:
        """One Produce request (acks=all), one batch per partition, the bytes sent as they are,
        on the lane of its first partition (the caller groups partitions by :meth:`lane_of`);
        ``transactional_id`` for transactional batches."""
        from kafka.protocol.producer import ProduceRequest

        topics: dict[str, list[Any]] = {}
        for (topic, partition), data in batches.items():
            topics.setdefault(topic, []).append(
                # The batch as it is (kafka-python copies it into the request's bytes anyway).
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=data)
            )
        request = ProduceRequest(
            transactional_id=transactional_id,
            acks=-1,
            timeout_ms=timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()],
            min_version=3,
            max_version=PRODUCE_MAX_VERSION,
        )
        return self.send(node_id, request, lane=self.lane_of(next(iter(batches))))


def _metadata_request(topic: str) -> Any:
    from kafka.protocol.metadata import MetadataRequest

    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False, max_version=12
    )


class Links:
    """The source and destination links of one pipeline, sharing one network selector;
    ``lanes``: connections to each destination broker for produce requests (default one)."""

    def __init__(
        self,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        lanes: int | None = None,
    ) -> None:
        from kafka.net.selector import NetworkSelector

        self._net = NetworkSelector(client_id=client_id)
        self.source = ClusterLink(source, net=self._net, client_id=client_id, request_timeout_ms=request_timeout_ms)
        try:
            self.destination = ClusterLink(
                destination,
                net=self._net,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                lanes=lanes if lanes is not None else 1,
            )
        except Exception:
            self.source.close()
            raise

    def poll(self, timeout_s: float) -> None:
        """Drive both clusters' sockets for up to ``timeout_s`` (less once anything arrives)."""
        self._net.poll(timeout_ms=max(0.0, timeout_s) * 1000)

    def close(self) -> None:
        self.source.close()
        self.destination.close()
        self._net.close()
