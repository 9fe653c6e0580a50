"""Non-blocking raw-batch I/O for the batch pipeline: one kafka-python network selector shared
by the source and the destination cluster, so one thread drives fetches and produces at once.

Why kafka-python 3 (see also :mod:`strait.worker.batch.wire`): its request classes are generated
from Kafka's own JSON schemas and carry the ``records`` field as plain bytes both ways, and its
connection layer speaks SASL and TLS with the options :func:`strait.clients.kafka_python_options`
builds. Every call here returns a kafka-python ``Future`` (or answers at once from a cache);
:meth:`Links.poll` drives both clusters' sockets.

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
import logging
import ssl
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import kafka.errors as errors

from strait.clients import kafka_python_options
from strait.worker.batch.compat import DestinationTopic
from strait.worker.batch.outcomes import error_name
from strait.worker.batch.select import AbortedTransaction
from strait.worker.batch.wire import (
    FETCH_MAX_VERSION,
    PRODUCE_MAX_VERSION,
    READ_COMMITTED,
    FetchedPartition,
    Produced,
    WireError,
)

TOPIC_RESOURCE = 2
# Requests outstanding per connection: the pipeline keeps at most 5 batches in flight per
# partition itself; a connection carries several partitions' requests.
MAX_IN_FLIGHT_PER_CONNECTION = 64

# Bytes asked of a socket per read call. kafka-python's transports read 4 KB per call, so a fetch
# answer of 8 MB took 2,048 Python-level calls (each a TLS read over TLS). See read_available.
READ_CHUNK_BYTES = 256 * 1024

log = logging.getLogger(__name__)

Key = tuple[str, int]
# Blocking requests try this many brokers, each not yet connected given this long to connect.
CALL_TRIES = 3
CONNECT_WAIT_MS = 5_000


def read_available(
    sock: Any, chunk_bytes: int = READ_CHUNK_BYTES, *, short_read_drains: bool = False
) -> tuple[bytes, Exception | None]:
    """Everything the non-blocking ``sock`` (plain or TLS) has now, read ``chunk_bytes`` at a
    time, and the error that ended the connection, if one did (kafka-python's transports read
    4 KB per call; see :data:`READ_CHUNK_BYTES`). ``short_read_drains``: a read shorter than
    asked means nothing is left (a plain TCP socket; a TLS read ends at each TLS record)."""
    received: list[bytes] = []
    error: Exception | None = None
    while True:
        try:
            data = sock.recv(chunk_bytes)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            break
        except Exception as exc:
            error = errors.KafkaConnectionError(exc)
            break
        if not data:
            error = errors.KafkaConnectionError("socket disconnected")
            break
        received.append(data)
        if short_read_drains and len(data) < chunk_bytes:
            break  # nothing left now: spare the call that would say so
    return (received[0] if len(received) == 1 else b"".join(received)), error


class FrameView:
    """One received response frame, read by kafka-python's decoders without copying it: a read
    of the rest (the response body) is a view; small reads (header fields) are bytes."""

    __slots__ = ("_pos", "_view")

    def __init__(self, data: bytes | memoryview) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read(self, nbytes: int | None = None) -> bytes | memoryview:
        start = self._pos
        if nbytes is None:
            self._pos = len(self._view)
            return self._view[start:]
        self._pos = min(len(self._view), start + nbytes)
        return bytes(self._view[start : self._pos])

    def seek(self, position: int) -> None:
        self._pos = position

    def tell(self) -> int:
        return self._pos


_SIZE = struct.Struct(">i")


def _frames_parser_class() -> type:
    """kafka-python's response parser (``KafkaProtocol``) keeping each response's bytes as
    received until the frame is whole, then decoding it from one buffer.

    kafka-python's own parser zero-fills a buffer of the frame's size, copies every received
    slice into it, and copies the whole frame twice more before decoding (a bytearray slice and
    ``bytes()`` of it): for a fetch answer of 8 MB, 24 MB written beyond the decode itself. Here
    a frame that arrived in one read is decoded where it lies; one that arrived in several is
    joined once.
    """
    global _FRAMES
    if _FRAMES is None:
        from kafka.protocol.parser import KafkaProtocol

        class Frames(KafkaProtocol):  # type: ignore[misc]
            # Set by adopt(): this parser is an existing KafkaProtocol given this class.
            _size_bytes: bytes
            _frame_size: int | None
            _parts: list[memoryview]
            _have: int

            def adopt(self) -> None:
                self._size_bytes, self._frame_size, self._parts, self._have = b"", None, [], 0

            def receive_bytes(self, data: bytes) -> list[Any]:
                responses = []
                view = memoryview(data)
                i, n = 0, len(view)
                while True:
                    if self._frame_size is None:
                        if i >= n:
                            break
                        need = 4 - len(self._size_bytes)
                        self._size_bytes += bytes(view[i : i + need])
                        i += need
                        if len(self._size_bytes) < 4:
                            break
                        (size,) = _SIZE.unpack(self._size_bytes)
                        self._size_bytes = b""
                        self._validate_frame_size(size)
                        self._frame_size, self._parts, self._have = size, [], 0
                    take = min(self._frame_size - self._have, n - i)
                    if take:
                        self._parts.append(view[i : i + take])
                        self._have += take
                        i += take
                    if self._have < self._frame_size:
                        break
                    parts = self._parts
                    frame = parts[0] if len(parts) == 1 else b"".join(parts)
                    self._frame_size, self._parts, self._have = None, [], 0
                    responses.append(self._process_response(FrameView(frame)))
                return responses

        _FRAMES = Frames
    return _FRAMES


_FRAMES: type | None = None


def adopt_parser(protocol: Any) -> None:
    """Give a connection's response parser (``protocol.parser``) the :func:`_frames_parser_class`
    behaviour, if it is kafka-python's own and has not started a frame yet."""
    from kafka.protocol.parser import KafkaProtocol

    parser: Any = getattr(protocol, "parser", None)
    if type(parser) is not KafkaProtocol or parser._receiving or parser._header.tell():
        return
    parser.__class__ = _frames_parser_class()
    parser.adopt()


def _with_large_reads(transport_class: type) -> type:
    """``transport_class`` (kafka-python's TCP or SSL transport) reading ``READ_CHUNK_BYTES`` per
    call, its connection's responses parsed by :func:`_frames_parser_class`."""

    class LargeReads(transport_class):  # type: ignore[valid-type,misc]
        _adopted = False

        def _sock_recv(self) -> tuple[bytes, Exception | None]:
            if not self._adopted:  # before the connection's parser has seen any byte
                adopt_parser(self._protocol)
                self._adopted = True
            data, error = read_available(self._sock, short_read_drains=not isinstance(self._sock, ssl.SSLSocket))
            if error is not None:
                log.info("%s: %s", self, error)
            return data, error

    LargeReads.__name__ = LargeReads.__qualname__ = f"LargeReads{transport_class.__name__}"
    return LargeReads


def _manager_class() -> type:
    """kafka-python's connection manager, its transports reading :data:`READ_CHUNK_BYTES` at a time."""
    global _MANAGER
    if _MANAGER is None:
        from kafka.net.manager import KafkaConnectionManager
        from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

        large = {cls: _with_large_reads(cls) for cls in (KafkaTCPTransport, KafkaSSLTransport)}

        class Manager(KafkaConnectionManager):  # type: ignore[misc]
            async def _build_transport(self, node: Any, timeout_at: float | None = None) -> Any:
                transport = await super()._build_transport(node, timeout_at=timeout_at)
                cls = large.get(type(transport))
                if cls is not None:  # same object, same state: only _sock_recv differs
                    transport.__class__ = cls
                return transport

        _MANAGER = Manager
    return _MANAGER


_MANAGER: type | None = None


class ClusterLink:
    """A kafka-python network client to one cluster, on a (shared) network selector."""

    def __init__(self, props: Mapping[str, Any], *, net: Any, client_id: str, request_timeout_ms: int) -> None:
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
        self.client: Any = KafkaNetClient(net=net, manager=_manager_class()(net, **configs), **configs)
        self.client._manager.bootstrap(timeout_ms=request_timeout_ms)

    def close(self) -> None:
        self.client._manager.close()

    def _any_node(self) -> int:
        node = self.client.least_loaded_node(bootstrap_fallback=True)
        if node is None:
            raise WireError("no broker available")
        return int(node)

    def _call(self, request: Any) -> Any:
        """A blocking request (Metadata, DescribeConfigs) to a broker that can answer.

        Brokers already connected first, then the least loaded one, then the others, at most
        ``CALL_TRIES`` of them; one not connected gets ``CONNECT_WAIT_MS`` to become ready. A
        broker killed with -9 used to hold the pipeline's only thread for the whole request
        timeout (30 s), every partition with it (seen in a batch-mode chaos run).
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

    def send(self, node_id: int, request: Any) -> Any:
        """Send without waiting: the answer's future, a failed one if the request cannot go out.

        Never raises: kafka-python raises ``UnknownBrokerIdError`` for a node its own metadata
        no longer lists (a broker killed, while our Metadata answer still named it leader), and
        that ended the pipeline's loop; now it is a failed request like a refused connection.
        """
        from kafka.future import Future

        try:
            self.client.maybe_connect(node_id)
            return self.client.send(node_id, request)
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
            min_bytes=1,
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

    def produce(self, node_id: int, batches: Mapping[Key, bytes | bytearray], *, timeout_ms: int) -> Any:
        """One Produce request (acks=all), one batch per partition, the bytes sent as they are."""
        from kafka.protocol.producer import ProduceRequest

        topics: dict[str, list[Any]] = {}
        for (topic, partition), data in batches.items():
            topics.setdefault(topic, []).append(
                # The batch as it is (kafka-python copies it into the request's bytes anyway).
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=data)
            )
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()],
            min_version=3,
            max_version=PRODUCE_MAX_VERSION,
        )
        return self.send(node_id, request)


def _metadata_request(topic: str) -> Any:
    from kafka.protocol.metadata import MetadataRequest

    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False, max_version=12
    )


def leaders_of(response: Any, topic: str) -> dict[int, int]:
    """Partition to leader node id of ``topic`` in a Metadata answer (no leader: left out)."""
    for t in response.topics:
        if t.name == topic:
            if t.error_code:
                raise WireError(f"metadata of {topic}: {error_name(t.error_code)}", t.error_code)
            return {int(p.partition_index): int(p.leader_id) for p in t.partitions if p.leader_id >= 0}
    raise WireError(f"{topic} not in the metadata")


def fetched_partitions(response: Any) -> dict[Key, FetchedPartition]:
    """Every partition of a fetch response by (topic, partition)."""
    out: dict[Key, FetchedPartition] = {}
    for t in response.responses:
        for p in t.partitions:
            aborted = [AbortedTransaction(a.producer_id, a.first_offset) for a in p.aborted_transactions or []]
            out[(t.topic, p.partition_index)] = FetchedPartition(
                error_code=p.error_code,
                high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset,
                log_start_offset=p.log_start_offset,
                aborted=aborted,
                records=bytes(p.records or b""),
            )
    return out


def produced_partitions(response: Any) -> dict[Key, Produced]:
    """Every partition of a produce response by (topic, partition); the same dict (not to be
    changed) for the same response.

    Each partition of a request asks for its own answer: read anew each time, a request that
    carried the batches of P partitions was read P times (P² answers built; 64 partitions of one
    leader: 4,096 per request). The last answers read on this thread are kept.
    """
    cache: OrderedDict[int, tuple[Any, dict[Key, Produced]]] | None = getattr(_answers, "produced", None)
    if cache is None:
        cache = _answers.produced = OrderedDict()
    known = cache.get(id(response))
    if known is not None and known[0] is response:
        return known[1]
    parsed = {
        (t.name, p.index): Produced(p.error_code, p.base_offset, getattr(p, "error_message", None))
        for t in response.responses
        for p in t.partition_responses
    }
    cache[id(response)] = (response, parsed)  # the response held: its id cannot be reused meanwhile
    if len(cache) > ANSWERS_KEPT:
        cache.popitem(last=False)
    return parsed


# Produce answers read lately, per thread (each pipeline has its own thread): see produced_partitions.
_answers = threading.local()
ANSWERS_KEPT = 256


class Links:
    """The source and destination links of one pipeline, sharing one network selector."""

    def __init__(
        self,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
    ) -> None:
        from kafka.net.selector import NetworkSelector

        self._net = NetworkSelector(client_id=client_id)
        self.source = ClusterLink(source, net=self._net, client_id=client_id, request_timeout_ms=request_timeout_ms)
        try:
            self.destination = ClusterLink(
                destination, net=self._net, client_id=client_id, request_timeout_ms=request_timeout_ms
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
