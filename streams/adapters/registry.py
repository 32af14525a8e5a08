"""The subscription registry: the compacted `subscriptions` topic, materialised in memory.

Every worker reads the whole topic (all partitions, from the beginning) and keeps following it,
so the router can find matching subscriptions by tenant and event type through an index (P7)
and the dispatcher can look up a subscription's URL, secrets and timeout. A tombstone deletes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from streams.adapters import codec
from streams.adapters.kafka_clients import make_consumer, produce, watermarks
from streams.domain.filters import SubscriptionIndex
from streams.domain.models import Subscription, SubscriptionStatus
from streams.errors import DecodeError, HookstreamError
from streams.settings import Settings

log = logging.getLogger(__name__)


class SubscriptionRegistry:
    """An in-memory view of every subscription, kept current from the topic."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._topic = settings.topic("subscriptions")
        self._subs: dict[str, Subscription] = {}
        self._index = SubscriptionIndex()
        self._consumer: Consumer | None = None
        self._targets: dict[int, int] = {}
        self.ready = asyncio.Event()

    # --- reading --------------------------------------------------------------------------
    def get(self, subscription_id: str) -> Subscription | None:
        return self._subs.get(subscription_id)

    def match(self, tenant_id: str, event_type: str) -> list[Subscription]:
        """Active subscriptions of ``tenant_id`` whose filters match ``event_type``."""
        subs = self._subs
        return [subs[sid] for sid in self._index.match(tenant_id, event_type) if sid in subs]

    def all(self) -> list[Subscription]:
        return list(self._subs.values())

    def __len__(self) -> int:
        return len(self._subs)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record of the topic: an upsert, or a tombstone that deletes."""
        if key is None:
            return
        sub_id = key.decode()
        if value is None:
            self._subs.pop(sub_id, None)
            self._index.remove(sub_id)
            return
        try:
            sub = codec.decode(Subscription, value)
        except DecodeError as exc:
            log.error(
                "undecodable subscription record skipped",
                extra={"subscription_id": sub_id, "error": str(exc)},
            )
            return
        self._subs[sub.id] = sub
        self._index.upsert(
            sub.id, sub.tenant_id, sub.filters, active=sub.status is SubscriptionStatus.ACTIVE
        )

    # --- following the topic --------------------------------------------------------------
    def _open(self) -> Consumer:
        consumer = make_consumer(
            self._settings,
            f"registry-{uuid.uuid4().hex[:8]}",
            **{"enable.partition.eof": False, "fetch.wait.max.ms": 100},
        )
        try:
            marks = watermarks(consumer, self._topic)
        except HookstreamError:
            consumer.close()
            raise
        parts = sorted(marks)
        self._targets = {part: high for part, (_low, high) in marks.items() if high > 0}
        consumer.assign([TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in parts])
        return consumer

    def _poll(self, consumer: Consumer, timeout_s: float) -> None:
        for msg in consumer.consume(1000, timeout_s):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("registry consumer error: %s", err)
                continue
            self.apply(msg.key(), msg.value())
            part = msg.partition()
            if part in self._targets and (msg.offset() or 0) + 1 >= self._targets[part]:
                del self._targets[part]

    def load(self, timeout_s: float = 30.0) -> None:
        """Read the topic up to its current end, synchronously (CLI use)."""
        consumer = self._open()
        try:
            deadline = time.monotonic() + timeout_s
            while self._targets and time.monotonic() < deadline:
                self._poll(consumer, 0.2)
            if self._targets:
                raise HookstreamError(f"timed out reading {self._topic}")
        finally:
            consumer.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the topic until ``stop`` is set; `ready` is set once caught up."""
        loop = asyncio.get_running_loop()
        consumer = await loop.run_in_executor(None, self._open)
        self._consumer = consumer
        try:
            while not stop.is_set():
                await loop.run_in_executor(None, self._poll, consumer, 0.2)
                if not self._targets and not self.ready.is_set():
                    log.info("subscription registry ready: %d subscriptions", len(self._subs))
                    self.ready.set()
        finally:
            await loop.run_in_executor(None, consumer.close)


def publish_subscription(producer: Producer, settings: Settings, sub: Subscription) -> None:
    """Write a subscription to the registry topic (the caller flushes)."""
    produce(producer, settings.topic("subscriptions"), sub.id, codec.encode(sub))


def delete_subscription(producer: Producer, settings: Settings, subscription_id: str) -> None:
    """Write a tombstone: the subscription is deleted (an explicit act, never a suspension)."""
    producer.produce(settings.topic("subscriptions"), key=subscription_id.encode(), value=None)
