"""Reading the archive by time: how many events a subscription missed (H5, R2)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import TopicPartition

from streams.adapters import codec
from streams.adapters.kafka_clients import make_consumer, watermarks
from streams.domain.filters import matches
from streams.domain.models import Event, Subscription
from streams.errors import DecodeError
from streams.settings import Settings


def count_waiting(
    settings: Settings,
    sub: Subscription,
    since_ms: int,
    limit: int = 100_000,
    timeout_s: float = 30.0,
) -> int:
    """Events of ``sub``'s tenant and filters archived at or after ``since_ms`` (capped)."""
    topic = settings.topic("archive")
    consumer = make_consumer(settings, f"count-{uuid.uuid4().hex[:8]}")
    try:
        marks = watermarks(consumer, topic)
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, part, since_ms) for part in marks], timeout=10
        )
        ends = {part: high for part, (_low, high) in marks.items()}
        todo = [tp for tp in starts if 0 <= tp.offset < ends[tp.partition]]
        if not todo:
            return 0
        consumer.assign(todo)
        remaining = {tp.partition for tp in todo}
        count = 0
        deadline = time.monotonic() + timeout_s
        while remaining and count < limit and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                part, offset = msg.partition(), msg.offset()
                if msg.error() is not None or part is None or offset is None:
                    continue
                if offset + 1 >= ends[part]:
                    remaining.discard(part)
                if msg.key() != sub.tenant_id.encode():
                    continue
                try:
                    event = codec.decode(Event, msg.value() or b"")
                except DecodeError:
                    continue
                if event.tenant_id == sub.tenant_id and matches(sub.filters, event.type):
                    count += 1
        return count
    finally:
        consumer.close()
