"""The router lane: `events` -> `archive` + one `routed` delivery per matching subscription.

Batches are read and routed one after another while Kafka acknowledges the records of earlier
ones; every `COMMIT_INTERVAL_S` the positions of the batches whose records are all acknowledged
are committed, so an offset never moves past an event whose archive and routed records are not
confirmed (D1). Those commits are sent without waiting for Kafka's answer (`AsyncCommitter`):
reading never stops for one. An event that cannot be decoded goes to `dlq` with its reason and
raw bytes, and routing goes on (Q2). Matching goes through the registry's index, so its cost
grows with the matching subscriptions, not with all of them (P7).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from streams import metrics
from streams.adapters import codec, stage_clock
from streams.adapters.commits import AsyncCommitter
from streams.adapters.ingest import decode_ingest_event
from streams.adapters.kafka_clients import (
    FOLLOW_FETCH_WAIT_MS,
    BatchAcks,
    coordinates,
    header,
    make_consumer,
    take,
)
from streams.adapters.lane_thread import LaneThread
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.idempotency import delivery_id
from streams.domain.models import DeadLetter, Delivery, Event, Lane
from streams.errors import DecodeError
from streams.logging import RepeatedWarning
from streams.settings import Settings

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 0.2
#: Routing pauses while this many batches' worth of produced records wait for their acks.
UNACKED_BATCHES = 8


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
        self._acks = BatchAcks()
        self._committer = AsyncCommitter("router")
        self._rebalances = 0  # raised by the rebalance callbacks (see `take`)
        # Poison input or a broker away repeats these thousands of times a second: one line
        # per interval with a count; every invalid event still reaches the DLQ with its reason.
        self._invalid_log = RepeatedWarning(log, "invalid event dead-lettered", count_by="reason")
        self._consumer_error_log = RepeatedWarning(log, "router consumer error", count_by="error")
        self._archive = settings.topic("archive")
        self._routed = settings.topic("routed")
        self._dlq = settings.topic("dlq")
        self.routed_count = 0
        self.invalid_count = 0
        self._batch_began = 0.0  # when the batch being routed began (the stage clock's)

    def route(self, msg: Message) -> int:
        """Archive one ingest record and fan it out; dead-letter it if it is malformed.

        Returns the number of deliveries created, or -1 for a dead-lettered record.
        """
        now_ms = int(self._clock() * 1000)
        value = msg.value() or b""
        try:
            event = decode_ingest_event(
                value,
                header(msg, "content-type"),
                now_ms,
                max_bytes=self._settings.max_payload_bytes,
            )
        except DecodeError as exc:
            self._dead_letter(msg, value, exc, now_ms)
            return -1
        archived = codec.encode(event)
        self._acks.produce(self._producer, self._archive, event.tenant_id, archived)
        matched = self._registry.match(event.tenant_id, event.type)
        event_body = archived[codec.HEADER_SIZE :]  # encoded once, spliced into each delivery
        for sub in matched:
            self._emit(event, event_body, sub.id, now_ms)
        return len(matched)

    def _emit(self, event: Event, event_body: bytes, subscription_id: str, now_ms: int) -> None:
        delivery = Delivery(
            delivery_id=delivery_id(event.id, subscription_id),
            subscription_id=subscription_id,
            tenant_id=event.tenant_id,
            event=event,
            attempt=1,
            lane=Lane.LIVE,
            routed_at=now_ms,
        )
        value = codec.encode_delivery(delivery, event_body)
        self._acks.produce(self._producer, self._routed, subscription_id, value)
        stage_clock.stamp("routing", delivery.delivery_id, self._batch_began)
        stage_clock.stamp("produced", delivery.delivery_id)
        self.routed_count += 1

    def _dead_letter(self, msg: Message, value: bytes, exc: DecodeError, now_ms: int) -> None:
        self.invalid_count += 1
        metrics.record_invalid_event(exc.reason)
        metrics.record_dead_letter(exc.reason)
        key = msg.key()
        tenant = key.decode("utf-8", errors="replace") if key else None
        self._invalid_log(reason=exc.reason, error=str(exc))
        letter = DeadLetter(
            reason=exc.reason,
            dead_at=now_ms,
            tenant_id=tenant,
            raw=value,
            last_error=str(exc)[:500],
        )
        self._acks.produce(self._producer, self._dlq, tenant or "invalid", codec.encode(letter))

    def _route_batch(self, msgs: list[Message]) -> None:
        """Route one consumed batch and seal it with the positions it covers."""
        positions: dict[tuple[str, int], int] = {}
        events = deliveries = 0
        self._batch_began = stage_clock.now()
        for msg in msgs:
            if msg.error() is not None:
                self._consumer_error_log(error=str(msg.error()))
                continue
            created = self.route(msg)
            if created >= 0:
                events += 1
                deliveries += created
            topic, part, offset = coordinates(msg)
            positions[(topic, part)] = offset + 1
        if positions:
            self._acks.seal(positions)
            metrics.record_routed(events, deliveries)

    def _flush_logs(self, *, force: bool = False) -> None:
        self._invalid_log.flush(force=force)
        self._consumer_error_log.flush(force=force)

    def _commit_soon(self, consumer: Consumer) -> None:
        """Commit the acked batches' positions without waiting for Kafka's answer."""
        self._committer.send(consumer, self._acks.committable())

    async def _commit_now(self, consumer: Consumer, reads: LaneThread) -> None:
        """Commit every acked position and wait for Kafka to take it (at shutdown)."""
        positions = self._acks.committable()
        await reads.call(functools.partial(self._committer.commit_sync, consumer, positions))

    def _rebalance_count(self) -> int:
        return self._rebalances

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Commit what is acked before the partitions go; forget the rest (at-least-once).

        Runs inside the lane's own ``consume``, so no commit of the lane is being made on the
        event loop meanwhile; librdkafka sends this one after those already sent."""
        self._rebalances += 1
        tps = [(p.topic, p.partition) for p in partitions]
        try:
            self._producer.flush(10)
            self._committer.commit_sync(consumer, self._acks.committable())
        except Exception as exc:  # the new owner replays from the last commit
            log.warning("router commit on revoke failed: %s", exc)
        self._acks.forget(tps)
        self._committer.forget(tps)

    async def run(self, stop: asyncio.Event) -> None:
        """Route until ``stop`` is set. Waits for the registry to be current first.

        Routing goes on while the previous batches' records are being acknowledged; acked
        positions are committed every `COMMIT_INTERVAL_S`. Reading pauses while more than
        `UNACKED_BATCHES` batches' worth of produced records wait for their acks.
        """
        await self._registry.ready.wait()
        loop = asyncio.get_running_loop()
        consumer = make_consumer(
            self._settings,
            "router",
            on_commit=self._committer.on_commit,
            **{"fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS},
        )
        consumer.subscribe(
            [self._settings.topic("events")], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        batch = self._settings.dispatch_batch_size
        max_unacked = batch * UNACKED_BATCHES
        reads = LaneThread("router-reads")  # every call on the consumer goes through it
        read = functools.partial(take, consumer, batch, 0.1, self._rebalance_count)
        wait_for_acks = functools.partial(self._producer.poll, 0.05)
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                if self._acks.unacked >= max_unacked:
                    await reads.call(wait_for_acks)
                else:
                    self._route_batch(await reads.call(read))
                self._producer.poll(0)  # serve delivery reports
                if time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                    self._commit_soon(consumer)
                    last_commit = time.monotonic()
                    self._flush_logs()
        finally:
            self._flush_logs(force=True)
            try:
                await loop.run_in_executor(None, self._producer.flush, 30)
                await self._commit_now(consumer, reads)
            finally:
                await reads.call(consumer.close)
                reads.stop()
