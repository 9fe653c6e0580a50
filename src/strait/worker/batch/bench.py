"""Microbenchmark of the batch copier's per-batch CPU work: split + select + rewrite + CRC-32C.

``python -m strait.worker.batch.bench`` prints markdown tables (figures, no pass/fail):

- CRC-32C: the C-backed ``crc32c`` package against kafka-python's pure-Python CRC;
- MB/s per core of splitting a fetched blob of lz4-marked batches, selecting them and
  rewriting each one for producing (header fields, new CRC over the whole batch);
- kafka-python's part on the way out and in: building and encoding a ProduceRequest per batch,
  decoding a FetchResponse (sockets not included).

The payloads are random bytes marked lz4 (codec bits): the copier never looks inside a
compressed payload, so its cost depends on batch sizes only, not on what the bytes are.
CPU time is ``time.process_time`` of this one thread (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from crc32c import crc32c

from strait.worker.batch.records import Codec, header_bytes, rewrite, split_batches
from strait.worker.batch.select import select_batches
from strait.worker.batch.sequences import ProducerIdentity, SequenceModel

MB = 1_000_000


def make_blob(batch_bytes: int, total_bytes: int, records_per_batch: int = 1) -> bytes:
    """Concatenated lz4-marked v2 batches of about ``batch_bytes`` each, about ``total_bytes`` in all."""
    payload_size = max(1, batch_bytes - 61)
    count = max(1, total_bytes // batch_bytes)
    parts = []
    offset = 0
    now = int(time.time() * 1000)
    for _ in range(count):
        parts.append(
            header_bytes(
                base_offset=offset,
                partition_leader_epoch=3,
                attributes=int(Codec.LZ4),
                last_offset_delta=records_per_batch - 1,
                base_timestamp=now,
                max_timestamp=now + records_per_batch,
                producer_id=1000,
                producer_epoch=0,
                base_sequence=offset,
                record_count=records_per_batch,
                payload=os.urandom(payload_size),
            )
        )
        offset += records_per_batch
    return b"".join(parts)


def _cpu(fn: Callable[[], object], min_seconds: float) -> tuple[float, int]:
    """CPU seconds per call of ``fn`` (repeated for at least ``min_seconds``) and the calls made."""
    calls = 0
    start = time.process_time()
    while True:
        fn()
        calls += 1
        spent = time.process_time() - start
        if spent >= min_seconds:
            return spent / calls, calls


def copy_pass(blob: bytes) -> int:
    """What the copier does per fetched blob: split, select, number, rewrite (one copy + CRC each)."""
    split = split_batches(blob)
    selection = select_batches(split.batches, 0, read_committed=True)
    model = SequenceModel(ProducerIdentity(7, 0))
    produced = 0
    for chosen in selection.decisions:
        batch = chosen.batch
        seq = model.assign(("t", 0), batch.record_count)
        out = rewrite(batch, producer_id=7, producer_epoch=0, base_sequence=seq)
        model.acknowledged(("t", 0), seq)
        produced += len(out)
    return produced


def bench_crc(sizes: list[int], min_seconds: float) -> list[str]:
    from kafka.record._crc32c import crc as crc32c_python

    rows = ["| buffer | crc32c (C) MB/s | pure Python MB/s | ratio |", "| --- | --- | --- | --- |"]
    for size in sizes:
        data = os.urandom(size)
        assert crc32c_python(data) == crc32c(data)
        c_s, _ = _cpu(lambda d=data: crc32c(d), min_seconds)  # type: ignore[misc]
        py_s, _ = _cpu(lambda d=data: crc32c_python(d), min_seconds)  # type: ignore[misc]
        rows.append(f"| {size:,} B | {size / c_s / MB:,.0f} | {size / py_s / MB:,.2f} | {py_s / c_s:,.0f}x |")
    return rows


def bench_copy(batch_sizes: list[int], blob_bytes: int, min_seconds: float) -> list[str]:
    rows = [
        "| batch size | batches per fetch | MB/s per core | batches/s per core | µs per batch |",
        "| --- | --- | --- | --- | --- |",
    ]
    for size in batch_sizes:
        blob = make_blob(size, max(blob_bytes, size))
        batches = len(split_batches(blob).batches)
        assert copy_pass(blob) == len(blob)
        seconds, _ = _cpu(lambda b=blob: copy_pass(b), min_seconds)  # type: ignore[misc]
        rows.append(
            f"| {size:,} B | {batches:,} | {len(blob) / seconds / MB:,.0f} | {batches / seconds:,.0f} "
            f"| {seconds / batches * 1e6:,.2f} |"
        )
    return rows


def bench_protocol(batch_sizes: list[int], min_seconds: float) -> list[str]:
    """kafka-python's share: building and encoding one ProduceRequest (v9) per batch, and decoding
    a FetchResponse (v12) that carries 1 MB of batches."""
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.producer import ProduceRequest

    topic_cls, partition_cls = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
    rows = [
        "| batch size | ProduceRequest build + encode, µs per request | MB/s per core | FetchResponse decode MB/s |",
        "| --- | --- | --- | --- |",
    ]
    for size in batch_sizes:
        blob = make_blob(size, max(1024 * 1024, size))
        batches = [bytes(b.data) for b in split_batches(blob).batches]

        def encode_all(batches: list[bytes] = batches) -> None:
            for data in batches:
                request = ProduceRequest(
                    transactional_id=None,
                    acks=-1,
                    timeout_ms=30_000,
                    topic_data=[topic_cls(name="t", partition_data=[partition_cls(index=0, records=data)])],
                    version=9,
                )
                request.encode(version=9)

        response_cls = FetchResponse.FetchableTopicResponse
        response = FetchResponse(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                response_cls(
                    topic="t",
                    partitions=[
                        response_cls.PartitionData(
                            partition_index=0,
                            error_code=0,
                            high_watermark=len(batches),
                            last_stable_offset=len(batches),
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=blob,
                        )
                    ],
                )
            ],
            version=12,
        )
        wire = response.encode(version=12)
        encode_s, _ = _cpu(encode_all, min_seconds)
        decode_s, _ = _cpu(lambda w=wire: FetchResponse.decode(w, version=12), min_seconds)  # type: ignore[misc]
        rows.append(
            f"| {size:,} B | {encode_s / len(batches) * 1e6:,.1f} | {len(blob) / encode_s / MB:,.0f} "
            f"| {len(blob) / decode_s / MB:,.0f} |"
        )
    return rows


def run(*, min_seconds: float = 1.0, blob_bytes: int = 1024 * 1024, quick: bool = False) -> str:
    crc_sizes = [1024, 65536] if quick else [1024, 16384, 1024 * 1024]
    batch_sizes = [1024] if quick else [1024, 16384, 65536, 1024 * 1024]
    lines = ["CRC-32C, one core (CPU time):", "", *bench_crc(crc_sizes, min_seconds), ""]
    lines += [
        f"split + select + rewrite + CRC of lz4 batches, fetched blobs of {blob_bytes / MB:.1f} MB, one core:",
        "",
        *bench_copy(batch_sizes, blob_bytes, min_seconds),
        "",
        "kafka-python protocol classes, one core (one partition per produce request):",
        "",
        *bench_protocol(batch_sizes, min_seconds),
        "",
        f"load average when run: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-seconds", type=float, default=1.0, help="CPU seconds per figure (default 1)")
    parser.add_argument("--blob-mb", type=float, default=1.0, help="bytes per fetched blob, MB (default 1)")
    args = parser.parse_args()
    print(run(min_seconds=args.min_seconds, blob_bytes=int(args.blob_mb * 1024 * 1024)))


if __name__ == "__main__":
    main()
