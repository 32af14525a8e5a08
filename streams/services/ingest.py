"""HTTP ingest for producers without a Kafka client (F5, F6).

`POST /v1/events` takes one event (a JSON object) or a batch (``{"events": [...]}``) with a
producer's API key. Every event is validated exactly as the router validates Kafka input
(`decode_ingest_event`); a batch is accepted whole or refused whole, so nothing is ever
half-accepted. Each producer key has its own token bucket (by default 3x the baseline rate),
so one producer's retry storm is answered with 429 and Retry-After while the others go on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson
from confluent_kafka import Producer

from streams.adapters.ingest import decode_ingest_event, encode_json_event
from streams.adapters.kafka_clients import ProduceTracker, flush, produce
from streams.domain.models import Event
from streams.domain.ratelimit import TokenBucket
from streams.errors import DecodeError, HookstreamError, ValidationError
from streams.settings import Settings

JSON_HEADERS = [("content-type", b"application/json")]
MAX_BATCH = 500


class PayloadTooLargeError(HookstreamError):
    """The request or one of its events is larger than the limit (413)."""


@dataclass(frozen=True, slots=True)
class Throttled:
    """Over the producer's limit: try again after ``retry_after_s`` (429)."""

    retry_after_s: int


class IngestLimiter:
    """One token bucket per producer key, in this worker."""

    def __init__(self, rate: float, burst: float) -> None:
        self._rate = rate
        self._burst = burst
        self._buckets: dict[str, TokenBucket] = {}

    def admit(self, producer: str, count: int, now: float) -> Throttled | None:
        """Take ``count`` tokens for ``producer``, or none at all (all or nothing)."""
        bucket = self._buckets.get(producer)
        if bucket is None:
            bucket = self._buckets[producer] = TokenBucket(self._rate, self._burst, now=now)
        if count > bucket.burst:
            return Throttled(math.ceil(count / self._rate))
        bucket.wait(now)  # refill
        if bucket.tokens < count:
            return Throttled(max(1, math.ceil((count - bucket.tokens) / self._rate)))
        bucket.tokens -= count
        return None


def parse_events(
    body: bytes, tenant_id: str | None, settings: Settings, now_ms: int
) -> list[Event]:
    """Validate a request body into events; raise ValidationError or PayloadTooLargeError naming
    the problem. A tenant key may only publish for its own tenant."""
    limit = settings.max_payload_bytes
    if len(body) > limit * MAX_BATCH:
        raise PayloadTooLargeError(f"the request is larger than {limit * MAX_BATCH} bytes")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValidationError({"body": f"not JSON: {exc}"}) from exc
    items = (
        document.get("events")
        if isinstance(document, dict) and "events" in document
        else [document]
    )
    if not isinstance(items, list) or not items:
        raise ValidationError({"events": "must be a non-empty list of events"})
    if len(items) > MAX_BATCH:
        raise ValidationError({"events": f"at most {MAX_BATCH} events per request"})
    events: list[Event] = []
    for index, item in enumerate(items):
        where = f"events[{index}]" if len(items) > 1 else "event"
        own = tenant_id is None or not isinstance(item, dict)
        if not own and item.setdefault("tenant_id", tenant_id) != tenant_id:
            raise ValidationError({f"{where}.tenant_id": "must be the key's own tenant"})
        raw = orjson.dumps(item)
        try:
            events.append(decode_ingest_event(raw, "application/json", now_ms, max_bytes=limit))
        except DecodeError as exc:
            if exc.reason == "oversize":
                raise PayloadTooLargeError(f"{where} is larger than {limit} bytes") from exc
            raise ValidationError({where: str(exc)}) from exc
    return events


async def publish(settings: Settings, producer: Producer, events: list[Event]) -> None:
    """Write the events to the ingest topic and wait until Kafka has them all."""
    acks = ProduceTracker()
    topic = settings.topic("events")
    for event in events:
        produce(
            producer,
            topic,
            event.tenant_id,
            encode_json_event(event),
            headers=JSON_HEADERS,
            on_delivery=acks,
        )
    await flush(producer, acks)
