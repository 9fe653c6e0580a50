"""The record pipelines' librdkafka settings: what each pipeline asks of its consumer.

librdkafka itself validates the settings here (a real ``Consumer`` is made; no broker is
needed to build one), so a property name or value it does not know fails the test.
"""

from __future__ import annotations

from typing import Any

import pytest

from strait.worker import fetch
from strait.worker.fetch import RecordPipeline
from strait.worker.pipeline import CATCHUP_SETTINGS, PipelineSettings

# librdkafka's own default: a partition whose queue was full is not fetched for a whole second.
LIBRDKAFKA_FETCH_QUEUE_BACKOFF_MS = 1000


class _Producer:
    def flush(self, timeout: float) -> int:
        return 0


def _consumer_settings(monkeypatch: pytest.MonkeyPatch, settings: PipelineSettings) -> dict[str, Any]:
    made: list[Any] = []
    real = fetch.clients.consumer

    def consumer(props: Any, **overrides: Any) -> Any:
        made.append((real(props, **overrides), overrides))
        return made[-1][0]

    monkeypatch.setattr(fetch.clients, "consumer", consumer)
    pipeline = RecordPipeline(
        name="catchup",
        source={"bootstrap.servers": "127.0.0.1:1"},
        destination={"bootstrap.servers": "127.0.0.1:1"},
        group_id="g",
        client_id="c",
        settings=settings,
        producer=_Producer(),
    )
    pipeline.stop(0)  # never started: closes the consumer
    assert len(made) == 1
    return made[0][1]


@pytest.mark.parametrize("settings", [PipelineSettings(), CATCHUP_SETTINGS], ids=["realtime", "catchup"])
def test_a_full_fetch_queue_is_refilled_within_milliseconds(
    monkeypatch: pytest.MonkeyPatch, settings: PipelineSettings
) -> None:
    # A catch-up partition's queue fills and empties many times a second; librdkafka's 1 s
    # default left the loop waiting in consume() for most of each second.
    overrides = _consumer_settings(monkeypatch, settings)
    assert overrides["fetch.queue.backoff.ms"] == settings.fetch_queue_backoff_ms
    assert 0 < settings.fetch_queue_backoff_ms <= LIBRDKAFKA_FETCH_QUEUE_BACKOFF_MS // 20
    assert overrides["queued.max.messages.kbytes"] == settings.queued_max_kbytes
