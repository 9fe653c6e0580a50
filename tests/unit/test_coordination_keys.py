"""The compact form of partition sets the coordination store writes (ranges per topic)."""

from __future__ import annotations

import json
import random

from strait.coordination.model import PartitionKey, WorkerRecord, WorkerState, decode_keys, encode_keys, split_encoded


def _keys(seed: int) -> set[PartitionKey]:
    rng = random.Random(seed)
    keys = {PartitionKey("r", f"t{i % 7}", i) for i in range(rng.randrange(0, 3000))}
    keys |= {PartitionKey("r2", "x", p) for p in rng.sample(range(50_000), rng.randrange(0, 5000))}
    return keys


def test_runs_become_ranges() -> None:
    keys = {PartitionKey("r", "t", p) for p in [0, 1, 2, 3, 7, 9, 10]} | {PartitionKey("r", "u", 5)}
    assert encode_keys(keys) == [["r", "t", "0-3,7,9-10"], ["r", "u", "5"]]
    assert decode_keys(encode_keys(keys)) == keys
    assert encode_keys(()) == [] and decode_keys([]) == frozenset()


def test_round_trip_and_pieces_respect_the_limit() -> None:
    for seed in range(20):
        keys = _keys(seed)
        entries = encode_keys(keys)
        assert decode_keys(entries) == keys
        for limit in (100, 1_000, 30_000):
            pieces = split_encoded(entries, limit)
            assert pieces and frozenset().union(*(decode_keys(p) for p in pieces)) == keys
            assert all(len(json.dumps(p)) <= limit + 200 for p in pieces)


def test_a_worker_record_holds_ranges_and_reads_either_form() -> None:
    holding = frozenset(PartitionKey("r", "t", p) for p in range(20_000))
    record = WorkerRecord("w", WorkerState.ACTIVE, holding=holding)
    data = record.to_json()
    assert "holding" not in data and len(json.dumps(data)) < 200
    assert WorkerRecord.from_json("w", data, live=True, drain=False).holding == holding
    legacy = record.to_json(legacy_holding=True)
    del legacy["held"]  # what a worker of the previous version writes
    assert WorkerRecord.from_json("w", legacy, live=True, drain=False).holding == holding
