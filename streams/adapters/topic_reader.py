"""Read a topic from the beginning (or a time) up to its current end, once: for the CLI."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from streams.adapters.kafka_clients import make_consumer, watermarks
from streams.errors import HookstreamError
from streams.settings import Settings


def scan(settings: Settings, topic: str, timeout_s: float = 60.0) -> Iterator[Message]:
    """Yield every record of ``topic`` present now, partition by partition order interleaved."""
    consumer = make_consumer(settings, f"scan-{uuid.uuid4().hex[:8]}")
    try:
        targets = {
            part: high for part, (low, high) in watermarks(consumer, topic).items() if high > low
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in targets])
        deadline = time.monotonic() + timeout_s
        while targets:
            if time.monotonic() > deadline:
                raise HookstreamError(f"timed out reading {topic}")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    continue
                part = msg.partition()
                if part not in targets:
                    continue
                if (msg.offset() or 0) + 1 >= targets[part]:
                    del targets[part]
                yield msg
    finally:
        consumer.close()
