"""The router lane: `events` -> `archive` + one `routed` delivery per matching subscription.

A batch is read, every event decoded and routed, the producer flushed, and only then are the
batch's offsets committed (D1). An event that cannot be decoded goes to `dlq` with its reason and
raw bytes, and routing goes on (Q2). Matching goes through the registry's index, so its cost
grows with the matching subscriptions, not with all of them (P7).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from confluent_kafka import Message, Producer

from streams import metrics
from streams.adapters import codec
from streams.adapters.kafka_clients import (
    ProduceTracker,
    commit,
    coordinates,
    flush,
    header,
    make_consumer,
    produce,
)
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.idempotency import delivery_id
from streams.domain.models import DeadLetter, Delivery, Event, Lane
from streams.errors import DecodeError
from streams.settings import Settings

log = logging.getLogger(__name__)


class Router:
    def __init__(
        self,
        settings: Settings,
        registry: SubscriptionRegistry,
        producer: Producer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._producer = producer
        self._clock = clock
        self._tracker = ProduceTracker()
        self._archive = settings.topic("archive")
        self._routed = settings.topic("routed")
        self._dlq = settings.topic("dlq")
        self.routed_count = 0
        self.invalid_count = 0

    def route(self, msg: Message) -> int:
        """Archive one ingest record and fan it out; dead-letter it if it is malformed.

        Returns the number of deliveries created, or -1 for a dead-lettered record.
        """
        now_ms = int(self._clock() * 1000)
        value = msg.value() or b""
        try:
            event = codec.decode_ingest_event(
                value,
                header(msg, "content-type"),
                now_ms,
                max_bytes=self._settings.max_payload_bytes,
            )
        except DecodeError as exc:
            self._dead_letter(msg, value, exc, now_ms)
            return -1
        produce(
            self._producer,
            self._archive,
            event.tenant_id,
            codec.encode(event),
            on_delivery=self._tracker,
        )
        matched = self._registry.match(event.tenant_id, event.type)
        for sub in matched:
            self._emit(event, sub.id, now_ms)
        return len(matched)

    def _emit(self, event: Event, subscription_id: str, now_ms: int) -> None:
        delivery = Delivery(
            delivery_id=delivery_id(event.id, subscription_id),
            subscription_id=subscription_id,
            tenant_id=event.tenant_id,
            event=event,
            attempt=1,
            lane=Lane.LIVE,
            routed_at=now_ms,
        )
        produce(
            self._producer,
            self._routed,
            subscription_id,
            codec.encode(delivery),
            on_delivery=self._tracker,
        )
        self.routed_count += 1

    def _dead_letter(self, msg: Message, value: bytes, exc: DecodeError, now_ms: int) -> None:
        self.invalid_count += 1
        metrics.record_invalid_event(exc.reason)
        metrics.record_dead_letter(exc.reason)
        key = msg.key()
        tenant = key.decode("utf-8", errors="replace") if key else None
        log.warning("invalid event dead-lettered", extra={"reason": exc.reason, "error": str(exc)})
        letter = DeadLetter(
            reason=exc.reason,
            dead_at=now_ms,
            tenant_id=tenant,
            raw=value,
            last_error=str(exc)[:500],
        )
        produce(
            self._producer,
            self._dlq,
            tenant or "invalid",
            codec.encode(letter),
            on_delivery=self._tracker,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Route until ``stop`` is set. Waits for the registry to be current first."""
        await self._registry.ready.wait()
        loop = asyncio.get_running_loop()
        consumer = make_consumer(self._settings, "router")
        consumer.subscribe([self._settings.topic("events")])
        try:
            while not stop.is_set():
                msgs = await loop.run_in_executor(
                    None, consumer.consume, self._settings.dispatch_batch_size, 0.1
                )
                positions: dict[tuple[str, int], int] = {}
                events = deliveries = 0
                for msg in msgs:
                    if msg.error() is not None:
                        log.warning("router consumer error: %s", msg.error())
                        continue
                    created = self.route(msg)
                    if created >= 0:
                        events += 1
                        deliveries += created
                    topic, part, offset = coordinates(msg)
                    positions[(topic, part)] = offset + 1
                if positions:
                    await flush(self._producer, self._tracker)
                    await loop.run_in_executor(None, commit, consumer, positions)
                    metrics.record_routed(events, deliveries)
        finally:
            await loop.run_in_executor(None, consumer.close)
