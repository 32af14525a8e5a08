"""Publishing events to the ingest topic (`hookstream publish`, the demo, tests)."""

from __future__ import annotations

from collections.abc import Iterable

from streams.adapters import codec
from streams.adapters.ingest import encode_json_event
from streams.adapters.kafka_clients import ProduceTracker, make_producer, produce
from streams.domain.models import Event
from streams.errors import HookstreamError
from streams.settings import Settings

JSON_HEADERS = [("content-type", b"application/json")]


def publish_events(settings: Settings, events: Iterable[Event], *, avro: bool = False) -> int:
    """Publish events keyed by tenant, as JSON (default) or Avro single-object; return count."""
    tracker = ProduceTracker()
    producer = make_producer(settings, on_delivery=tracker)
    topic = settings.topic("events")
    count = 0
    for event in events:
        if avro:
            produce(producer, topic, event.tenant_id, codec.encode(event))
        else:
            produce(
                producer,
                topic,
                event.tenant_id,
                encode_json_event(event),
                headers=JSON_HEADERS,
            )
        count += 1
        if count % 10000 == 0:
            producer.poll(0)
    if producer.flush(30) or tracker.failed:
        raise HookstreamError(f"publish failed: {tracker.failed[:3] or 'timed out'}")
    return count
