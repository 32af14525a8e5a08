"""A flood of poison input is dead-lettered one by one and logged as a few summary lines (Q2, O4).

Before, each of 11,000 malformed events on `events` wrote its own WARNING line. The router now
logs the first at once and then one line per interval with a count; every event still reaches
the DLQ with its reason and raw bytes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness

pytestmark = pytest.mark.integration

POISON = 3000
INTERVAL_S = 10.0  # RepeatedWarning's default, as the router uses it


async def test_Q2_O4_a_poison_flood_reaches_the_dlq_in_full_and_the_log_in_summary(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="streams.lanes.router")
    settings = make_settings()
    json_ct: list[tuple[str, str | bytes | None]] = [("content-type", b"application/json")]
    started = time.monotonic()
    async with PipelineHarness(settings) as h:
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
        for n in range(POISON):
            if n % 2:
                producer.produce(settings.topic("events"), key=b"acme", value=b"\xc3\x01bad avro")
            else:
                producer.produce(
                    settings.topic("events"), key=b"acme", value=b"{not json", headers=json_ct
                )
            producer.poll(0)
        producer.flush(30)
        letters = await h.dead_letters_until(POISON, timeout_s=180)
        assert h.pipeline.failed is None
    elapsed = time.monotonic() - started

    assert len(letters) == POISON
    assert all(letter.raw is not None and letter.reason for letter in letters)
    lines = [
        r for r in caplog.records
        if r.name == "streams.lanes.router" and r.getMessage().startswith("invalid event")
    ]  # fmt: skip
    # the first at once, then at most one per interval, and the rest when the router stops
    assert 1 <= len(lines) <= 2 + math.ceil(elapsed / INTERVAL_S), [r.getMessage() for r in lines]
    counted = 1 + sum(int(r.__dict__.get("repeated", 0)) for r in lines[1:])
    assert counted == POISON
