"""The batch pipeline's socket reads and produce answers (strait.worker.batch.transport.read_available): everything a
non-blocking socket holds comes out whole and in order, plain or TLS, in far fewer calls than
kafka-python's 4 KB reads, and a closed peer is an error."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError

from strait.sandbox.certs import issue_all
from strait.worker.batch import answers, transport
from strait.worker.batch.answers import produced_partitions
from strait.worker.batch.protocol import Produced
from strait.worker.batch.transport import read_available

PAYLOAD = os.urandom(3 * 1024 * 1024 + 17)


class Counting:
    """A socket that counts its recv calls."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.calls = 0

    def recv(self, size: int) -> bytes:
        self.calls += 1
        data: bytes = self.sock.recv(size)
        return data


def read_until(reader: Counting, size: int, *, short_read_drains: bool) -> bytes:
    import selectors

    got: list[bytes] = []
    total = 0
    with selectors.DefaultSelector() as selector:
        selector.register(reader.sock, selectors.EVENT_READ)
        while total < size:
            pending = isinstance(reader.sock, ssl.SSLSocket) and reader.sock.pending()
            if not pending:
                assert selector.select(30), "no data within 30 s"
            data, error = read_available(reader, short_read_drains=short_read_drains)
            got.append(data)
            total += len(data)
            if error is not None:  # the sender closed after its last byte: read with it
                assert isinstance(error, KafkaConnectionError)
                break
    return b"".join(got)


def send_then_close(sock: Any, data: bytes) -> threading.Thread:
    def run() -> None:
        sock.sendall(data)
        sock.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def plain_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_a_plain_socket_is_read_whole_in_large_chunks(plain_pair: tuple[socket.socket, socket.socket]) -> None:
    sender, receiver = plain_pair
    receiver.setblocking(False)
    reader = Counting(receiver)
    thread = send_then_close(sender, PAYLOAD)
    assert read_until(reader, len(PAYLOAD), short_read_drains=True) == PAYLOAD
    thread.join(30)
    # kafka-python's 4 KB reads would take 769 calls for these 3 MB, plus one per wake-up.
    assert reader.calls < len(PAYLOAD) // 4096 // 4
    data, error = read_available(reader, short_read_drains=True)
    assert data == b"" and isinstance(error, KafkaConnectionError)


def test_nothing_to_read_is_no_error(plain_pair: tuple[socket.socket, socket.socket]) -> None:
    _, receiver = plain_pair
    receiver.setblocking(False)
    assert read_available(receiver) == (b"", None)


@pytest.fixture
def tls_pair(tmp_path: Path, plain_pair: tuple[socket.socket, socket.socket]) -> Iterator[tuple[Any, Any]]:
    pki = issue_all(broker="broker", clients=(), run="reads")
    cert, key, ca = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.write_bytes(pki.broker.cert_pem)
    key.write_bytes(pki.broker.key_pem)
    ca.write_bytes(pki.ca_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(ca)
    raw_server, raw_client = plain_pair
    server_side: list[Any] = []
    accept = threading.Thread(
        target=lambda: server_side.append(server_ctx.wrap_socket(raw_server, server_side=True)), daemon=True
    )
    accept.start()
    client = client_ctx.wrap_socket(raw_client, server_hostname="localhost")
    accept.join(30)
    (server,) = server_side
    yield server, client
    client.close()


def test_a_tls_socket_is_read_whole_a_record_at_a_time(tls_pair: tuple[Any, Any]) -> None:
    server, client = tls_pair
    client.setblocking(False)
    reader = Counting(client)
    thread = send_then_close(server, PAYLOAD)
    assert read_until(reader, len(PAYLOAD), short_read_drains=False) == PAYLOAD
    thread.join(30)
    # A TLS read returns at most one record (16 KB): 4 times fewer calls than 4 KB reads.
    assert reader.calls < len(PAYLOAD) // 4096 // 2


def test_the_link_reads_through_large_reads_on_both_transports() -> None:
    from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

    manager = transport.manager_class()
    assert manager is transport.manager_class()  # made once
    for kind in (KafkaTCPTransport, KafkaSSLTransport):
        large = transport._with_large_reads(kind)
        assert issubclass(large, kind)
        assert getattr(large, "_sock_recv") is not getattr(kind, "_sock_recv")  # noqa: B009


class Answer:
    """A produce response whose partitions count how often they are read."""

    def __init__(self, partitions: int) -> None:
        self.reads = 0
        self._topics = [
            SimpleNamespace(
                name="t",
                partition_responses=[
                    SimpleNamespace(index=p, error_code=0, base_offset=10 * p) for p in range(partitions)
                ],
            )
        ]

    @property
    def responses(self) -> list[Any]:
        self.reads += 1
        return self._topics


def test_a_produce_answer_is_read_once_for_all_its_partitions() -> None:
    # The pipeline asks each partition's answer of a request separately: read anew each time, a
    # request carrying 64 partitions' batches built 4,096 answers.
    answers = [Answer(64) for _ in range(3)]
    for answer in answers:
        for p in range(64):
            assert produced_partitions(answer)[("t", p)] == Produced(0, 10 * p, None)
    assert [a.reads for a in answers] == [1, 1, 1]


def test_answers_kept_are_bounded_and_never_mixed_up() -> None:
    first = Answer(1)
    produced_partitions(first)
    for _ in range(answers.ANSWERS_KEPT + 1):
        produced_partitions(Answer(1))
    produced_partitions(first)  # pushed out by newer ones: read again, correctly
    assert first.reads == 2
    assert len(answers._answers.produced) <= answers.ANSWERS_KEPT


def _fetch_answer(correlation_id: int, blobs: list[bytes]) -> bytes:
    """A framed FetchResponse v12 (flexible header) carrying ``blobs`` as partitions' records."""
    import struct

    from kafka.protocol.api_header import ResponseHeader
    from kafka.protocol.consumer import FetchResponse

    topic = FetchResponse.FetchableTopicResponse
    body = FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic(
                topic="t",
                partitions=[
                    topic.PartitionData(
                        partition_index=p,
                        error_code=0,
                        high_watermark=7,
                        last_stable_offset=7,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=blob,
                    )
                    for p, blob in enumerate(blobs)
                ],
            )
        ],
        version=12,
    ).encode(version=12)
    frame = ResponseHeader(correlation_id=correlation_id).encode(flexible=True) + bytes(body)
    return struct.pack(">i", len(frame)) + frame


def _parsers() -> tuple[Any, Any]:
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.parser import KafkaProtocol

    parsers = (KafkaProtocol(client_id="x"), KafkaProtocol(client_id="x"))
    transport.adopt_parser(SimpleNamespace(parser=parsers[1]))
    for parser in parsers:
        for _ in range(6):
            parser.send_request(
                FetchRequest(
                    replica_id=-1,
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=1,
                    isolation_level=1,
                    session_id=0,
                    session_epoch=-1,
                    topics=[],
                    forgotten_topics_data=[],
                    rack_id="",
                    version=12,
                )
            )
    return parsers


@pytest.mark.parametrize("seed", range(8))
def test_responses_parsed_without_copies_are_kafka_pythons_however_the_bytes_arrive(seed: int) -> None:
    import random

    rng = random.Random(seed)
    wire = b"".join(
        _fetch_answer(i + 1, [os.urandom(rng.choice([0, 1, 5, 4096, 70_000])) for _ in range(rng.randint(0, 3))])
        for i in range(6)
    )
    theirs, ours = _parsers()
    assert type(ours) is transport._frames_parser_class() and type(theirs) is not type(ours)
    # Cut anywhere: inside the 4-byte size, inside a header, several frames in one piece.
    cuts = sorted({*rng.sample(range(1, len(wire)), rng.randint(1, 40)), 1, 2, 3, 5})
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True) if a < b]
    got: list[tuple[int, Any]] = []
    expected: list[tuple[int, Any]] = []
    for piece in pieces:
        got += ours.receive_bytes(piece)
        expected += theirs.receive_bytes(piece)
    assert [c for c, _ in got] == [c for c, _ in expected] == [1, 2, 3, 4, 5, 6]

    def records(answers: list[tuple[int, Any]]) -> list[bytes]:
        return [bytes(p.records) for _, r in answers for t in r.responses for p in t.partitions]

    assert records(got) == records(expected)
    assert [r for _, r in got] == [r for _, r in expected]


def test_a_parser_that_started_a_frame_is_left_as_it_is() -> None:
    from kafka.protocol.parser import KafkaProtocol

    parser = KafkaProtocol(client_id="x")
    parser.receive_bytes(b"\x00\x00")  # half a size: a frame has begun
    transport.adopt_parser(SimpleNamespace(parser=parser))
    assert type(parser) is KafkaProtocol
    transport.adopt_parser(SimpleNamespace(parser=None))  # no parser yet: nothing to do


def test_an_impossible_frame_size_is_refused_as_before() -> None:
    from kafka.errors import InvalidReceiveError

    _, ours = _parsers()
    with pytest.raises(InvalidReceiveError):
        ours.receive_bytes(b"\xff\xff\xff\xff")
