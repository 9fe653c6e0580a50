"""The chaos load: sequence-numbered records to every partition of some topics, plus bursts.

One thread produces everything, so each partition's sequence numbers go out in order; bursts
and new partitions are requests that thread picks up. The producer is idempotent with
`acks=all`, and remembers per partition exactly which sequence numbers the source acknowledged:
that, not a count, is what the copy is judged against, so a record whose produce failed during
a broker kill is neither expected nor mistaken for a loss.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException

from strait import clients
from strait.bench.records import encode

Key = tuple[str, int]

# Bursts go out in slices, so steady traffic on other partitions keeps flowing meanwhile.
_BURST_SLICE = 2_000


class ChaosLoad:
    """Steady sequence-numbered traffic at `rate_per_partition`, with bursts on request."""

    def __init__(self, props: Mapping[str, Any], *, rate_per_partition: float, size: int = 100) -> None:
        self._producer = clients.producer(
            props,
            **{
                "enable.idempotence": True,
                "linger.ms": 5,
                # New partitions become writable a second after an expansion, not five minutes.
                "topic.metadata.refresh.interval.ms": 1000,
                "queue.buffering.max.messages": 200_000,
                # Brokers die on purpose here: their disconnections are expected, not news.
                "log_level": 2,
            },
        )
        self._rate = rate_per_partition
        self._size = size
        self._lock = threading.Lock()
        self._partitions: dict[str, int] = {}
        self._next: dict[Key, int] = {}
        self._acked: dict[Key, bytearray] = {}
        self._bursts: dict[Key, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self.failed = 0  # records the source did not acknowledge
        self.crash: str | None = None  # why the producing thread died, if it did
        self.errors: list[str] = []  # the first few produce errors, for the report

    def add(self, topic: str, partitions: int) -> None:
        """Produce to `topic` (or to its new partitions after an expansion)."""
        with self._lock:
            self._partitions[topic] = max(partitions, self._partitions.get(topic, 0))

    def burst(self, topic: str, partitions: tuple[int, ...], records: int) -> list[int]:
        """Send `records` extra records to each of `partitions`, as fast as the producer goes.

        Returns the partitions the burst goes to: those of `partitions` that exist (an expansion
        the schedule counted on may have been skipped).
        """
        with self._lock:
            existing = [p for p in partitions if p < self._partitions.get(topic, 0)]
            for partition in existing:
                key = (topic, partition)
                self._bursts[key] = self._bursts.get(key, 0) + records
        return existing

    def start(self) -> ChaosLoad:
        self._thread.start()
        return self

    def stop(self, flush_timeout_s: float = 120.0) -> int:
        """Stop producing and wait for outstanding acknowledgements; returns records left unacknowledged."""
        self._stop.set()
        self._thread.join(timeout=60)
        return int(self._producer.flush(flush_timeout_s))

    def acked(self) -> dict[Key, bytes]:
        """Per partition, one byte per sequence number sent: 1 when the source acknowledged it."""
        with self._lock:
            return {key: bytes(flags) for key, flags in self._acked.items()}

    def produced(self) -> int:
        with self._lock:
            return sum(flags.count(1) for flags in self._acked.values())

    def partitions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._partitions)

    def _run(self) -> None:
        try:
            self._produce()
        except Exception as exc:  # recorded: a load that died early would prove little
            self.crash = f"{type(exc).__name__}: {exc}"
            raise

    def _produce(self) -> None:
        tick = 0.05
        carry = 0.0
        while not self._stop.is_set():
            started = time.monotonic()
            with self._lock:
                keys = [(t, p) for t, n in self._partitions.items() for p in range(n)]
                bursts = {k: min(n, _BURST_SLICE) for k, n in self._bursts.items() if n > 0}
            carry += self._rate * tick
            steady, carry = int(carry), carry - int(carry)
            for key in keys:
                sent = self._send(key, steady + bursts.get(key, 0))
                if key in bursts:
                    with self._lock:
                        self._bursts[key] -= max(0, sent - steady)
            self._producer.poll(0)
            time.sleep(max(0.0, tick - (time.monotonic() - started)))

    def _send(self, key: Key, count: int) -> int:
        """Produce up to `count` records to one partition; how many were handed to the producer."""
        topic, partition = key
        sent = 0
        for _ in range(count):
            seq = self._next.get(key, 0)
            try:
                self._producer.produce(
                    topic,
                    value=encode(partition, seq, int(time.time() * 1_000_000), self._size),
                    partition=partition,
                    on_delivery=self._delivered(key, seq),
                )
            except BufferError:
                self._producer.poll(0.05)
                return sent
            except KafkaException as exc:
                # Typically a partition the producer's metadata does not know yet (just added):
                # nothing was sent, so the sequence number is not used; try again next tick.
                self._note(str(exc))
                return sent
            self._next[key] = seq + 1
            with self._lock:
                flags = self._acked.setdefault(key, bytearray())
                flags.extend(b"\0" * (seq + 1 - len(flags)))
            sent += 1
        return sent

    def _delivered(self, key: Key, seq: int) -> Any:
        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                self.failed += 1
                self._note(str(err))
                return
            with self._lock:
                self._acked[key][seq] = 1

        return done

    def _note(self, error: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(error)
