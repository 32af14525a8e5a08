"""The dispatcher lane: `routed`, `backfill` and every `retry.<delay>` tier to HTTP.

One confluent-kafka consumer (group ``<group_id>-dispatch``, range assignment, so partition p of
every lane lands on the same worker) feeds deliveries into concurrent attempts. Each record is
settled on its own (delivered, handed to a retry tier, or dead-lettered); an `OffsetTracker`
commits each partition only up to its lowest unsettled record (D1). Retries wait for their due
time in memory (`TierTimers`, never early: D6), holding a timer, not a dispatch slot; quiet
backfill and tier partitions are left out of the fetches until they move (`IdleLanes`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import threading
import time
from collections.abc import Callable

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    Message,
    Producer,
)

from streams import metrics
from streams.adapters import codec, stage_clock
from streams.adapters.breaker_log import BreakerLog
from streams.adapters.commits import AsyncCommitter
from streams.adapters.http import Transport
from streams.adapters.kafka_clients import (
    TP,
    ProduceError,
    coordinates,
    make_consumer,
    take,
)
from streams.adapters.lane_thread import LaneThread
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.backoff import RetryPolicy
from streams.domain.breaker import origin_of
from streams.domain.commit_gate import CommitGate
from streams.domain.dedup import RecentSuccesses
from streams.domain.models import Delivery, Lane, Subscription, SubscriptionStatus
from streams.domain.offsets import OffsetTracker
from streams.domain.ratelimit import rate_raised
from streams.errors import DecodeError, HookstreamError
from streams.lanes.breakers import FleetBreakers, routed_share, worker_id
from streams.lanes.dispatch_rebalance import Rebalancing
from streams.lanes.flow import FlowControl
from streams.lanes.idle import IdleLanes
from streams.lanes.intake import PARTITION_SHARE, IntakePacer, serve_group_events
from streams.lanes.outbox import Outbox
from streams.lanes.sending import Sender
from streams.lanes.tiers import TierTimers
from streams.settings import Settings

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 0.2
# Lanes whose deliveries are parked (dead-lettered with the subscription's status as reason)
# instead of attempted while the subscription is suspended or disabled: the live lane's
# deliveries already in flight finish (H4); waiting retries and backfills do not go out.
PARKED_LANES = frozenset({Lane.RETRY, Lane.BACKFILL, Lane.REPLAY})
# Lanes whose deliveries are settled without an attempt when they already succeeded or are
# under way here (Q1): copies replayed after a crash or rebalance, a backfill's copies of what
# went live in the settle time after a re-enable (R2). Replays, probes and tests always go.
DEDUPED_LANES = frozenset({Lane.LIVE, Lane.RETRY, Lane.BACKFILL})
# At most this many settled, uncommitted deliveries, and this many records waiting once Kafka has
# acknowledged none for a moment (the broker is away): the lane stops starting and taking new
# work instead of delivering what it cannot record (`streams.domain.commit_gate`).
UNCOMMITTED_CAP_PER_SLOT = 4
STALLED_CAP_PER_SLOT = 0.25
# The intake buffer is dispatch_concurrency x this many deliveries (taken in, not settled).
BUFFER_PER_SLOT = 32


class Dispatcher(Rebalancing):
    def __init__(
        self,
        settings: Settings,
        registry: SubscriptionRegistry,
        producer: Producer,
        transport: Transport,
        tiers: list[tuple[float, str]],
        partitions: int,
        breaker_log: BreakerLog,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._producer = producer
        self._transport = transport
        self._clock = clock
        self._rand = rand
        self._tiers = tiers
        self._tier_delay = {topic: delay for delay, topic in tiers}
        self._policy = RetryPolicy(
            schedule=tuple(delay for delay, _ in tiers),
            jitter=settings.retry_jitter,
            window=settings.retry_window,
        )
        self._assigned: set[TP] = set()
        self._lanes = [settings.topic("routed"), settings.topic("backfill")] + [t for _, t in tiers]
        self._idle = IdleLanes(settings, self._lanes[1:], self._assigned, partitions)
        self._outbox = Outbox(settings, producer, tiers, partitions, self._idle.wrote)
        self._breaker_log = breaker_log
        share = functools.partial(
            routed_share, self._assigned, settings.topic("routed"), partitions
        )
        self._breakers = FleetBreakers(settings, breaker_log, worker_id(), share, clock)
        self._tracker = OffsetTracker()
        self._recent = RecentSuccesses(settings.dedup_window)
        self._send = Sender(
            settings,
            registry,
            self._outbox,
            transport,
            self._policy,
            self._breakers,
            self._recent,
            clock,
            rand,
        )
        # deliveries handed to flow control and not settled yet: a copy of one of them (the
        # router's replay lands right behind the original) is not sent alongside it
        self._pending_at: dict[TP, dict[int, str]] = {}
        self._pending: dict[str, int] = {}
        self._committer = AsyncCommitter("dispatch")
        self._rebalances = 0  # raised by the rebalance callbacks (see `take`)
        self._lock = threading.Lock()  # tracker access from rebalance callbacks
        self._flow = FlowControl(
            slots=settings.dispatch_concurrency,
            origin_max_in_flight=settings.origin_max_in_flight,
            attempt=self._send.attempt,
            defer=self._send.defer,
            settled=self._settled,
            lookup=registry.get,
            clock=clock,
            adaptive=settings.adaptive_concurrency,
            on_decrease=metrics.record_concurrency_decrease,
            ramp=self._breakers.ramp_rate,
            paced_topics=frozenset({settings.topic("backfill")}),
        )
        self._tiers_held = TierTimers(self._spawn, self._is_assigned, clock)
        registry.on_change(self._subscription_changed)  # acts once `run` has a loop
        self._intake = IntakePacer(
            self._flow, self._is_assigned, set(self._tier_delay), settings.topic("backfill")
        )
        self._consumer: Consumer | None = None
        self._reads: LaneThread | None = None  # the thread of the consumer's calls, in `run`
        self._loop: asyncio.AbstractEventLoop | None = None
        self.settled_count = 0

    # --- intake ---------------------------------------------------------------------------
    def _take(self, msg: Message) -> None:
        began = stage_clock.now()
        topic, part, offset = coordinates(msg)
        tp = (topic, part)
        with self._lock:
            if tp not in self._assigned:
                return
            self._tracker.consumed(tp, offset)
        try:
            delivery = codec.decode(Delivery, msg.value() or b"")
        except DecodeError as exc:
            self._send.dead_letter_raw(msg, exc)
            self._settled(tp, offset)
            return
        stage_clock.stamp("taken", delivery.delivery_id, began)
        if topic in self._tier_delay:
            kind, stamp = msg.timestamp()
            deferred_ms = stamp if kind != TIMESTAMP_NOT_AVAILABLE else 0
            self._tiers_held.schedule(tp, offset, delivery, deferred_ms)
        else:
            self._spawn(tp, offset, delivery)

    def _subscription_changed(self, old: Subscription | None, new: Subscription) -> None:
        """On the registry's thread: changed limits apply to what already waits (F1)."""
        loop = self._loop
        if old is None or loop is None or loop.is_closed():
            return
        if (old.rate_limit, old.max_in_flight) != (new.rate_limit, new.max_in_flight):
            raised = rate_raised(old.rate_limit, new.rate_limit)
            now_ms = int(self._clock() * 1000)
            loop.call_soon_threadsafe(self._limits_changed, new, now_ms, raised)

    def _limits_changed(self, sub: Subscription, changed_ms: int, raised: bool) -> None:
        """``sub``'s flow takes its new limits. On a raised rate, deliveries deferred at the old
        rate come back now, paced at the new one (those not read yet as they are read)."""
        self._flow.limits_changed(sub, raised=raised)
        if not raised:
            return
        released = self._tiers_held.rate_raised(sub.id, changed_ms)
        log.info(
            "rate limit raised: %d deferred deliveries released",
            released,
            extra={"subscription_id": sub.id, "rate_limit": sub.rate_limit},
        )

    def _spawn(self, tp: TP, offset: int, delivery: Delivery) -> None:
        """A delivery is ready: park it, or hand it to flow control to be attempted."""
        if tp not in self._assigned:
            return  # revoked while waiting: the new owner has it
        delivery_id = delivery.delivery_id
        if delivery.lane in DEDUPED_LANES and (
            delivery_id in self._pending or self._recent.seen(delivery_id, self._clock())
        ):
            # delivered already, or under way here: its first copy settles the pair (Q1)
            metrics.record_duplicate_suppressed(delivery.lane.value)
            self._settled(tp, offset)
            return
        sub = self._registry.get(delivery.subscription_id)
        if sub is None:
            self._send.park(delivery, "subscription_deleted")
        elif sub.status is not SubscriptionStatus.ACTIVE and delivery.lane in PARKED_LANES:
            self._send.park(delivery, sub.status.value)  # H4: recovered on re-enable (R2)
        else:
            self._pending_at.setdefault(tp, {})[offset] = delivery_id
            self._pending[delivery_id] = self._pending.get(delivery_id, 0) + 1
            self._flow.submit(tp, offset, delivery, sub)
            return
        self._settled(tp, offset)

    def breaker_state(self, url: str) -> str:
        """The fleet's shared breaker state of ``url``'s origin (S4, H8)."""
        return self._breakers.state(origin_of(url))

    def _breaker_closed(self, origin: str) -> None:
        """F4: ``origin``'s breaker closed: what this worker deferred for it comes back now."""
        held = self._send.held.pop(origin)
        self._tiers_held.release(held, origin, self._settings.breaker_cooldown + 5)

    def _settled(self, tp: TP, offset: int) -> None:
        with self._lock:
            self._tracker.settled(tp, offset)
        self.settled_count += 1
        pending = self._pending_at.get(tp)
        if pending is not None:
            delivery_id = pending.pop(offset, None)
            if delivery_id is not None:
                self._unpend(delivery_id)

    # --- the loop -------------------------------------------------------------------------
    def _commit_soon(self, consumer: Consumer, seal: bool) -> None:
        """Commit without waiting: with ``seal``, close what was settled so far in the outbox;
        then send the positions of the closed batches whose records Kafka has acknowledged.
        Kafka's answer arrives through the consumer's ``on_commit`` (`AsyncCommitter`) during a
        later ``take``; intake never stops for it. Runs only in the lane's own coroutine, so a
        rebalance callback (inside ``take``) never runs halfway through it."""
        if seal:
            with self._lock:
                positions = self._tracker.to_commit()
                self._tracker.mark_committed(positions)  # pending in the committer until taken
                settled = self.settled_count
            self._outbox.seal(positions, settled)
        ready, mark = self._outbox.committable()
        self._committer.send(consumer, ready, mark)

    async def _commit_now(self) -> None:
        """Flush and commit everything settled, and wait for Kafka to take it (the intake is
        at its cap of settled-but-uncommitted deliveries, or the lane is stopping)."""
        consumer = self._consumer
        assert consumer is not None
        with self._lock:
            positions = self._tracker.to_commit()
            self._tracker.mark_committed(positions)
            settled = self.settled_count
        self._outbox.seal(positions, settled)
        await self._outbox.flush()
        ready, mark = self._outbox.committable()  # every batch: all of them are acknowledged
        reads = self._reads
        assert reads is not None
        await reads.call(
            functools.partial(self._committer.commit_sync, consumer, ready, max(mark, settled))
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Dispatch until ``stop`` is set, then finish in-flight attempts and commit."""
        await self._registry.ready.wait()
        # H8: a worker that starts while an origin is open knows it before it sends anything
        while not await asyncio.to_thread(self._breaker_log.ready.wait, 5.0):
            log.warning("waiting for the shared breakers to be read")
        self._loop = asyncio.get_running_loop()
        self._breakers.bind(self._loop, self._breaker_closed)
        consumer = self._consumer = make_consumer(
            self._settings, "dispatch", on_commit=self._committer.on_commit
        )
        self._tiers_held.bind(self._loop, consumer)
        consumer.subscribe(self._lanes, on_assign=self._on_assign, on_revoke=self._on_revoke)
        reads = self._reads = LaneThread("dispatch-reads")  # every call on the consumer
        buffer_cap = self._settings.dispatch_concurrency * BUFFER_PER_SLOT
        partition_cap = max(1, buffer_cap // PARTITION_SHARE)
        # one batch could otherwise overfill a partition's share before its pause takes effect
        batch = min(self._settings.dispatch_batch_size, partition_cap)
        slots = self._settings.dispatch_concurrency
        uncommitted_cap = slots * UNCOMMITTED_CAP_PER_SLOT
        gate = CommitGate(uncommitted_cap, max(1, int(slots * STALLED_CAP_PER_SLOT)))
        read = functools.partial(take, consumer, batch, 0.05, self._rebalance_count)
        last_commit = time.monotonic()
        watch = asyncio.create_task(self._idle.watch(stop))
        try:
            while not stop.is_set():
                self._tiers_held.apply(consumer)  # the consumer's calls stay on this side
                self._idle.step(consumer, lambda: self._intake.paused | self._tiers_held.busy())
                self._intake.pace(consumer, partition_cap)
                self._intake.shed_slow()
                # commits go on while intake waits, so a full buffer does not hold them back
                self._producer.poll(0)  # serve delivery reports: they make batches committable
                seal = time.monotonic() - last_commit >= COMMIT_INTERVAL_S
                self._commit_soon(consumer, seal)
                if seal:
                    last_commit = time.monotonic()
                uncommitted = self.settled_count - self._committer.confirmed_mark
                waiting, silent_s = self._outbox.unacknowledged(time.monotonic())
                self._flow.hold(gate.held(uncommitted, waiting, silent_s))
                if self._flow.busy >= buffer_cap:
                    await asyncio.sleep(0.01)  # intake waits; queues are bounded per subscription
                    continue
                if self.settled_count - self._committer.confirmed_mark >= uncommitted_cap:
                    await self._commit_or_wait()
                    last_commit = time.monotonic()
                    continue
                for msg in await reads.call(read):
                    if msg.error() is None:
                        self._take(msg)
                    else:
                        log.warning("dispatch consumer error: %s", msg.error())
        finally:
            watch.cancel()
            await self._shutdown(consumer)

    async def _commit_or_wait(self) -> None:
        """Too much is settled, not committed: commit first; if Kafka cannot take it, wait (Q1)."""
        try:
            await self._commit_now()
        except ProduceError:
            raise
        except HookstreamError as exc:
            log.warning("commit failed, intake waits: %s", exc)
            await asyncio.sleep(0.5)
            held = self._intake.paused | self._tiers_held.paused() | set(self._idle.paused)
            assert self._consumer is not None and self._reads is not None
            serve = functools.partial(serve_group_events, self._consumer, held)
            for msg in await self._reads.call(serve):  # a dropped member rejoins (D1)
                if msg.error() is None:
                    self._take(msg)

    async def _shutdown(self, consumer: Consumer, deadline_s: float = 20.0) -> None:
        """One deadline for in-flight attempts; then flush, commit and leave the group."""
        for tp in self._tiers_held.partitions():
            self._cancel_timers([tp])
        await self._flow.drain(deadline_s)
        reads = self._reads
        assert reads is not None
        try:
            await self._commit_now()
        finally:
            await reads.call(consumer.close)
            reads.stop()
