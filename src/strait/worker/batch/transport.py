"""kafka-python's transports as the batch pipeline uses them: large socket reads and a response
parser that decodes each frame where it lies.

kafka-python 3 reads 4 KB per socket call and copies every response frame several times before
decoding it; a batch pipeline moves fetch answers of many megabytes, so its connections get
transports that read :data:`READ_CHUNK_BYTES` per call (:func:`read_available`) and a parser
(:func:`adopt_parser`) that joins a frame's pieces once. :func:`manager_class` is the connection
manager that hands out such transports; :class:`strait.worker.batch.link.ClusterLink` uses it.
"""

from __future__ import annotations

import logging
import ssl
import struct
from typing import Any

import kafka.errors as errors

# Bytes asked of a socket per read call. kafka-python's transports read 4 KB per call, so a fetch
# answer of 8 MB took 2,048 Python-level calls (each a TLS read over TLS). See read_available.
READ_CHUNK_BYTES = 256 * 1024

log = logging.getLogger(__name__)


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


def manager_class() -> type:
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
