"""The batch copier microbenchmark runs and prints its tables (figures only, nothing timed)."""

from __future__ import annotations

from strait.worker.batch import bench
from strait.worker.batch.records import split_batches


def test_blob_of_lz4_batches() -> None:
    blob = bench.make_blob(1024, 16 * 1024)
    batches = split_batches(blob).batches
    assert len(batches) == 16 and all(b.size == 1024 and b.crc_ok() for b in batches)
    assert bench.copy_pass(blob) == len(blob)


def test_quick_run_prints_tables() -> None:
    out = bench.run(min_seconds=0.01, blob_bytes=64 * 1024, quick=True)
    assert "| 1,024 B |" in out and "pure Python MB/s" in out and "MB/s per core" in out
    assert "ProduceRequest build + encode" in out
