"""The dispatcher lane: `routed`, `backfill` and every `retry.<delay>` tier to HTTP.

One confluent-kafka consumer (group ``<group_id>-dispatch``, range assignment, so partition p of
every lane lands on the same worker) feeds deliveries into concurrent attempts. Each record is
settled on its own: delivered, handed to a retry tier, or dead-lettered, and an `OffsetTracker`
commits each partition only up to its lowest unsettled record (D1). Records of a retry tier
wait for their due time in memory; the tier's partition is paused while no later record can be
due yet, so the lane never polls in a loop and never fires early (D6). Live records never wait
behind retries: a retry occupies a timer, not a dispatch slot, until it is due.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streams import metrics
from streams.adapters import codec
from streams.adapters.commits import AsyncCommitter
from streams.adapters.delivery import attempt
from streams.adapters.http import Transport
from streams.adapters.kafka_clients import (
    LaneThread,
    ProduceError,
    commit,
    coordinates,
    make_consumer,
    take,
)
from streams.adapters.registry import SubscriptionRegistry
from streams.adapters.topic_reader import read_since
from streams.domain.backoff import RetryPolicy
from streams.domain.breaker import (
    BreakerConfig,
    BreakerRegistry,
    BreakerState,
    breaker_signal,
    origin_of,
)
from streams.domain.classify import parse_retry_after
from streams.domain.concurrency import overloaded
from streams.domain.dedup import RESET_MARK, RecentSuccesses
from streams.domain.models import (
    Attempt,
    DeadLetter,
    Delivery,
    HealthOutcome,
    Lane,
    OutcomeClass,
    Subscription,
    SubscriptionStatus,
)
from streams.domain.offsets import OffsetTracker
from streams.domain.ratelimit import rate_raised, released_by_raise
from streams.domain.recovery import breaker_reset_due
from streams.domain.settle import settle
from streams.errors import DecodeError, HookstreamError
from streams.lanes.flow import Ended, FlowControl
from streams.lanes.outbox import Outbox
from streams.settings import Settings

log = logging.getLogger(__name__)

TP = tuple[str, int]
COMMIT_INTERVAL_S = 0.2
# How long a rebalance waits for attempts under way on revoked partitions.
REVOKE_GRACE_S = 10.0
# Retries of one tier partition held in memory waiting for their due time; past this the
# partition is paused until half of them have fired (memory stays bounded, nothing polls).
READ_AHEAD = 2000
# Lanes whose deliveries are parked (dead-lettered with the subscription's status as reason)
# instead of attempted while the subscription is suspended or disabled: the live lane's
# deliveries already in flight finish (H4); waiting retries and backfills do not go out.
PARKED_LANES = frozenset({Lane.RETRY, Lane.BACKFILL, Lane.REPLAY})
# Lanes whose deliveries are settled without an attempt when they already succeeded (Q1):
# copies replayed after a crash or rebalance. Replays, backfills, probes and tests always go.
DEDUPED_LANES = frozenset({Lane.LIVE, Lane.RETRY})
# At most this many deliveries settled but not committed: while commits fail (the broker is
# away), the lane stops taking new work instead of delivering what it cannot record.
UNCOMMITTED_CAP_PER_SLOT = 4
# The intake buffer is dispatch_concurrency x this many deliveries (taken in, not settled).
BUFFER_PER_SLOT = 32
# One partition of `routed` or `backfill` may fill at most this share of the intake buffer:
# beyond it that partition's intake pauses (until half of it has settled) and the others' goes
# on, so a subscription whose deliveries pile up (a slow endpoint, a tenant out of fair slots)
# does not keep every other partition's deliveries waiting in Kafka (F3, F7).
PARTITION_SHARE = 8
# While a partition is paused, its queued deliveries to slow or stalled origins are deferred
# (FlowControl.shed_slow) at most this often.
SHED_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A delivery from a retry tier, held in memory until it is due."""

    handle: asyncio.TimerHandle
    delivery: Delivery
    deferred_ms: int  # when it was written to the tier (the record's timestamp)


def _breaker_changed(origin: str, old: BreakerState, new: BreakerState, at_ms: int) -> None:
    metrics.record_breaker_transition(new.value)
    log.info("breaker %s -> %s", old.value, new.value, extra={"origin": origin})


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        registry: SubscriptionRegistry,
        producer: Producer,
        transport: Transport,
        tiers: list[tuple[float, str]],
        partitions: int,
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
        self._outbox = Outbox(settings, producer, tiers, partitions)
        self._reenabled_seen: dict[str, int] = {}
        self._breakers = BreakerRegistry(
            BreakerConfig(
                consecutive_failures=settings.breaker_failures,
                failure_rate=settings.breaker_failure_rate,
                min_attempts=settings.breaker_min_attempts,
                window_s=settings.breaker_window,
                cooldown_s=settings.breaker_cooldown,
                max_cooldown_s=settings.breaker_max_cooldown,
            ),
            on_transition=_breaker_changed,
        )
        self._lanes = [settings.topic("routed"), settings.topic("backfill")] + [t for _, t in tiers]
        self._tracker = OffsetTracker()
        self._recent = RecentSuccesses(settings.dedup_window)
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
            attempt=self._attempt,
            defer=self._defer,
            settled=self._settled,
            lookup=registry.get,
            clock=clock,
            adaptive=settings.adaptive_concurrency,
            on_decrease=metrics.record_concurrency_decrease,
        )
        self._timers: dict[TP, dict[int, _Waiting]] = {}
        self._raised: dict[str, int] = {}  # subscription -> when its rate limit last went up
        registry.on_change(self._subscription_changed)  # acts once `run` has a loop
        self._paused: set[TP] = set()  # retry tiers waiting for their read-ahead to fire
        self._intake_paused: set[TP] = set()  # partitions holding their share of the buffer
        self._next_shed = 0.0
        self._assigned: set[TP] = set()
        self._consumer: Consumer | None = None
        self._reads: LaneThread | None = None  # the thread of the consumer's calls, in `run`
        self._loop: asyncio.AbstractEventLoop | None = None
        self.settled_count = 0

    # --- rebalance ------------------------------------------------------------------------
    def _rebalance_count(self) -> int:
        return self._rebalances

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        self._recall_successes(self._recallable(consumer, partitions))
        with self._lock:
            self._assigned.update((p.topic, p.partition) for p in partitions)

    def _recallable(self, consumer: Consumer, partitions: list[TopicPartition]) -> list[int]:
        """The assigned partition numbers whose recent successes should be read back: all but
        those an operator rewound (`RESET_MARK` on any lane's committed offset, R4)."""
        numbers = {p.partition for p in partitions}
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException as exc:
            log.warning("committed offsets not read: %s", exc)
            return sorted(numbers)
        rewound = {tp.partition for tp in committed if tp.metadata == RESET_MARK}
        if rewound:
            log.info("partitions %s were rewound by an operator: sent again", sorted(rewound))
        return sorted(numbers - rewound)

    def _recall_successes(self, partitions: list[int]) -> None:
        """Read the ledger's recent successes of newly assigned partitions (the attempts topic
        is co-partitioned with the lanes), so copies of them are not sent again (Q1)."""
        if not partitions:
            return
        now = self._clock()
        since_ms = int((now - self._settings.dedup_window) * 1000)
        topic = self._settings.topic("attempts")
        found = 0
        try:
            for msg in read_since(self._settings, topic, partitions, since_ms):
                try:
                    att = codec.decode(Attempt, msg.value() or b"")
                except DecodeError:
                    continue
                if att.outcome is OutcomeClass.SUCCESS:
                    self._recent.add(att.delivery_id, att.started_at / 1000)
                    found += 1
        except HookstreamError as exc:  # at-least-once still holds; only more copies go out
            log.warning("recent successes not read back: %s", exc)
        log.info(
            "recalled %d recent successes of partitions %s in %.2fs",
            found,
            partitions,
            self._clock() - now,
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        tps = [(p.topic, p.partition) for p in partitions]
        # librdkafka keeps a partition paused across a rebalance that hands it back to this
        # worker, while the pause bookkeeping goes with the partition (`_cancel_timers`): lift
        # the pauses here, or such a partition would never be read again (D1)
        try:
            consumer.resume(partitions)
        except KafkaException as exc:
            log.warning("revoked partitions not resumed: %s", exc)
        # Let attempts already under way on these partitions finish and settle first (one
        # deadline), so their offsets are committed and the new owner does not send them again.
        deadline = time.monotonic() + REVOKE_GRACE_S
        while time.monotonic() < deadline and any(self._flow.running[tp] > 0 for tp in tps):
            time.sleep(0.05)
        try:
            positions = self._release_on_loop(tps)
        except Exception as exc:  # nothing committed: the new owner replays from the last commit
            log.warning("revoked partitions not released: %s", exc)
            positions = {}
        try:
            if self._producer.flush(10) == 0:
                commit(consumer, positions)
        except Exception as exc:  # the new owner replays from the last commit: at-least-once
            log.warning("commit on revoke failed: %s", exc)
        # the dispatcher's coroutine is inside `take` now: it touches neither of these meanwhile
        self._outbox.forget(tps)
        self._committer.forget(tps)
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._cancel_timers, tps)

    def _release(self, tps: list[TP]) -> dict[TP, int]:
        """Write the outbox's buffered health outcomes and digests, then take revoked
        partitions' positions out of the tracker. On the event loop, where deliveries settle,
        both happen between two settlements: every delivery settled under those positions has
        every record produced, so committing them after a producer flush loses none (D1, D10)."""
        self._outbox.write_buffered()
        with self._lock:
            positions = {tp: pos for tp in tps if (pos := self._tracker.position(tp)) is not None}
            self._tracker.revoke(tps)
            self._assigned.difference_update(tps)
        return positions

    async def _released(self, tps: list[TP]) -> dict[TP, int]:
        return self._release(tps)

    def _release_on_loop(self, tps: list[TP]) -> dict[TP, int]:
        """`_release` on the dispatcher's event loop, waited for: a rebalance callback runs on
        the lane's read thread, while the outbox belongs to the loop. In place when the loop is
        this thread's, or not running (nothing settles on it)."""
        loop = self._loop
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if loop is None or here or not loop.is_running():
            return self._release(tps)
        try:
            released = asyncio.run_coroutine_threadsafe(self._released(tps), loop)
        except RuntimeError:  # closed meanwhile
            return self._release(tps)
        return released.result(timeout=REVOKE_GRACE_S)

    def _cancel_timers(self, tps: list[TP]) -> None:
        self._flow.forget(set(tps))
        for tp in tps:
            for delivery_id in self._pending_at.pop(tp, {}).values():
                self._unpend(delivery_id)
            for waiting in self._timers.pop(tp, {}).values():
                waiting.handle.cancel()
            self._paused.discard(tp)
            self._intake_paused.discard(tp)

    # --- intake ---------------------------------------------------------------------------
    def _take(self, msg: Message) -> None:
        topic, part, offset = coordinates(msg)
        tp = (topic, part)
        with self._lock:
            if tp not in self._assigned:
                return
            self._tracker.consumed(tp, offset)
        try:
            delivery = codec.decode(Delivery, msg.value() or b"")
        except DecodeError as exc:
            self._dead_letter_raw(msg, exc)
            self._settled(tp, offset)
            return
        if topic in self._tier_delay:
            kind, stamp = msg.timestamp()
            self._schedule(tp, offset, delivery, stamp if kind != TIMESTAMP_NOT_AVAILABLE else 0)
        else:
            self._spawn(tp, offset, delivery)

    def _schedule(self, tp: TP, offset: int, delivery: Delivery, deferred_ms: int) -> None:
        """Hold a retry (or deferral) in memory until it is due, never firing early (D6);
        a deferral that only a since-raised rate limit holds back is due now (F1)."""
        assert self._loop is not None and self._consumer is not None
        now = self._clock()
        wait = max(0.0, delivery.due_at / 1000 - now)
        if self._due_by_raise(delivery, deferred_ms, int(now * 1000)):
            wait = 0.0
        pending = self._timers.setdefault(tp, {})
        handle = self._loop.call_later(wait, self._fire, tp, offset, delivery)
        pending[offset] = _Waiting(handle, delivery, deferred_ms)
        if len(pending) >= READ_AHEAD and tp not in self._paused:
            self._consumer.pause([TopicPartition(tp[0], tp[1])])
            self._paused.add(tp)

    def _due_by_raise(self, delivery: Delivery, deferred_ms: int, now_ms: int) -> bool:
        return released_by_raise(
            never_attempted=delivery.first_attempt_at is None,
            deferred_ms=deferred_ms,
            raised_ms=self._raised.get(delivery.subscription_id),
            due_ms=delivery.due_at,
            now_ms=now_ms,
        )

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
        """``sub``'s flow takes its new limits. On a raised rate, deliveries deferred at the
        old, lower rate come back now, to be paced at the new one; those not read yet come
        back as they are read (`_schedule`)."""
        self._flow.limits_changed(sub, raised=raised)
        if not raised:
            return
        self._raised[sub.id] = changed_ms
        now_ms = int(self._clock() * 1000)
        released = 0
        for tp, pending in list(self._timers.items()):
            for offset, waiting in list(pending.items()):
                delivery = waiting.delivery
                if delivery.subscription_id == sub.id and self._due_by_raise(
                    delivery, waiting.deferred_ms, now_ms
                ):
                    waiting.handle.cancel()
                    self._fire(tp, offset, delivery)
                    released += 1
        log.info(
            "rate limit raised: %d deferred deliveries released",
            released,
            extra={"subscription_id": sub.id, "rate_limit": sub.rate_limit},
        )

    def _fire(self, tp: TP, offset: int, delivery: Delivery) -> None:
        pending = self._timers.get(tp, {})
        pending.pop(offset, None)
        if tp in self._paused and len(pending) <= READ_AHEAD // 2:
            self._paused.discard(tp)
            if self._consumer is not None and tp in self._assigned:
                self._consumer.resume([TopicPartition(tp[0], tp[1])])
        self._spawn(tp, offset, delivery)

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
            self._park(delivery, "subscription_deleted")
        elif sub.status is not SubscriptionStatus.ACTIVE and delivery.lane in PARKED_LANES:
            self._park(delivery, sub.status.value)  # H4: recovered on re-enable (R2)
        else:
            self._pending_at.setdefault(tp, {})[offset] = delivery_id
            self._pending[delivery_id] = self._pending.get(delivery_id, 0) + 1
            self._flow.submit(tp, offset, delivery, sub)
            return
        self._settled(tp, offset)

    def _unpend(self, delivery_id: str) -> None:
        left = self._pending.pop(delivery_id, 1) - 1
        if left > 0:
            self._pending[delivery_id] = left

    def breaker_state(self, url: str) -> str:
        """The state of this worker's breaker for ``url``'s origin (S4)."""
        breaker = self._breakers.peek(origin_of(url))
        return BreakerState.CLOSED.value if breaker is None else breaker.state.value

    def _defer(self, delivery: Delivery, due_ms: int, reason: str) -> None:
        """Hand a delivery back to a retry tier without an attempt (H7, F1).

        Deferral is bounded by the same retry window as retries: a delivery that could not be
        attempted within it (a breaker open for a day) is exhausted, dead-lettered and counted
        once for health, so a dead endpoint is still suspended and nothing waits forever.
        """
        now_ms = int(self._clock() * 1000)
        # Backpressure (a full queue) never expires a delivery: the subscription is healthy,
        # only busy. A delivery the breaker keeps from a dead endpoint does, once its window
        # (from its first attempt, or from routing) has passed.
        started = delivery.first_attempt_at or delivery.routed_at or now_ms
        window_over = due_ms - started > self._settings.retry_window * 1000
        if window_over and reason == "breaker_open":
            self._expire(delivery, f"exhausted:{reason}", now_ms)
            return
        self._outbox.defer(delivery, due_ms, now_ms, self._settings.retry_jitter)
        metrics.record_deferred(reason)

    def _expire(self, delivery: Delivery, reason: str, now_ms: int) -> None:
        sub = self._registry.get(delivery.subscription_id)
        self._outbox.dead_letter(
            DeadLetter(
                reason=reason,
                dead_at=now_ms,
                tenant_id=delivery.tenant_id,
                subscription_id=delivery.subscription_id,
                delivery=delivery,
                attempts=delivery.attempt - 1,
                first_attempt_at=delivery.first_attempt_at,
            )
        )
        self._outbox.health(
            HealthOutcome(
                subscription_id=delivery.subscription_id,
                delivery_id=delivery.delivery_id,
                outcome=OutcomeClass.RETRYABLE,
                reason=reason,
                at=now_ms,
                origin=origin_of(sub.url) if sub is not None else "",
                attempts=delivery.attempt - 1,
            )
        )

    # --- delivering -----------------------------------------------------------------------
    async def _attempt(self, sub: Subscription, delivery: Delivery) -> Ended:
        """One attempt through the breaker: a Retry-After pause, and whether it was overload."""
        now_ms = int(self._clock() * 1000)
        origin = origin_of(sub.url)
        if breaker_reset_due(sub, self._reenabled_seen):
            self._breakers.forget(origin)  # R1: a re-enabled endpoint starts with a closed breaker
        breaker = self._breakers.get(origin, now_ms)
        admission = breaker.allow(now_ms)
        if not admission.admitted:
            # H7: not an attempt, not a failure: the delivery comes back when the breaker
            # will admit again, and nothing is dropped.
            self._defer(delivery, admission.retry_at_ms or now_ms + 1000, "breaker_open")
            return Ended(attempted=False)
        lane = delivery.lane.value
        metrics.add_in_flight(lane, 1)
        try:
            result = await attempt(self._transport, sub, delivery, self._clock)
        finally:
            metrics.add_in_flight(lane, -1)
        done_ms = int(self._clock() * 1000)
        outcome = settle(
            delivery, result, self._policy, now_ms=done_ms, rand=self._rand, url=sub.url
        )
        metrics.record_attempt(outcome.attempt.outcome.value, lane, result.duration_ms / 1000)
        if outcome.attempt.outcome is OutcomeClass.SUCCESS:
            self._recent.add(delivery.delivery_id, done_ms / 1000)
        signal = breaker_signal(outcome.attempt.outcome, outcome.attempt.reason)
        if signal is not None:
            breaker.record(signal, done_ms)
        self._outbox.settle(outcome)
        return Ended(
            pause_s=self._pause_after(result.status, result.retry_after, done_ms),
            overloaded=overloaded(result.status, result.failure),
        )

    def _pause_after(
        self, status: int | None, retry_after: str | None, now_ms: int
    ) -> float | None:
        """F2: a 429/503 Retry-After holds the subscription's next deliveries too, bounded by
        twice the first retry step."""
        if status not in (429, 503):
            return None
        seconds = parse_retry_after(retry_after, now_ms)
        if seconds is None:
            return None
        return min(seconds, 2 * self._policy.schedule[0])

    def _park(self, delivery: Delivery, reason: str) -> None:
        self._outbox.dead_letter(
            DeadLetter(
                reason=reason,
                dead_at=int(self._clock() * 1000),
                tenant_id=delivery.tenant_id,
                subscription_id=delivery.subscription_id,
                delivery=delivery,
                attempts=delivery.attempt - 1,
                first_attempt_at=delivery.first_attempt_at,
            )
        )

    def _settled(self, tp: TP, offset: int) -> None:
        with self._lock:
            self._tracker.settled(tp, offset)
        self.settled_count += 1
        pending = self._pending_at.get(tp)
        if pending is not None:
            delivery_id = pending.pop(offset, None)
            if delivery_id is not None:
                self._unpend(delivery_id)

    def _dead_letter_raw(self, msg: Message, exc: DecodeError) -> None:
        key = (msg.key() or b"invalid").decode("utf-8", errors="replace")
        self._outbox.dead_letter(
            DeadLetter(
                reason=exc.reason,
                dead_at=int(self._clock() * 1000),
                subscription_id=key,
                raw=msg.value(),
                last_error=str(exc)[:500],
            )
        )

    # --- the loop -------------------------------------------------------------------------
    def _commit_soon(self, consumer: Consumer, seal: bool) -> None:
        """Commit without waiting: with ``seal``, close what was settled so far in the outbox;
        then send the positions of the closed batches whose records Kafka has acknowledged.

        Kafka's answer arrives through the consumer's ``on_commit`` (`AsyncCommitter`) during a
        later ``take``; intake never stops for it. Runs only in the lane's own coroutine, so a
        rebalance callback (inside ``take``) never runs halfway through it.
        """
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
        self._loop = asyncio.get_running_loop()
        consumer = self._consumer = make_consumer(
            self._settings, "dispatch", on_commit=self._committer.on_commit
        )
        consumer.subscribe(self._lanes, on_assign=self._on_assign, on_revoke=self._on_revoke)
        reads = self._reads = LaneThread("dispatch-reads")  # every call on the consumer
        buffer_cap = self._settings.dispatch_concurrency * BUFFER_PER_SLOT
        partition_cap = max(1, buffer_cap // PARTITION_SHARE)
        # one batch could otherwise overfill a partition's share before its pause takes effect
        batch = min(self._settings.dispatch_batch_size, partition_cap)
        uncommitted_cap = self._settings.dispatch_concurrency * UNCOMMITTED_CAP_PER_SLOT
        read = functools.partial(take, consumer, batch, 0.05, self._rebalance_count)
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                self._pace_partitions(consumer, partition_cap)
                self._shed_slow()
                # commits go on while intake waits, so a full buffer does not hold them back
                self._producer.poll(0)  # serve delivery reports: they make batches committable
                seal = time.monotonic() - last_commit >= COMMIT_INTERVAL_S
                self._commit_soon(consumer, seal)
                if seal:
                    last_commit = time.monotonic()
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
            await self._shutdown(consumer)

    def _pace_partitions(self, consumer: Consumer, cap: int) -> None:
        """Pause the intake of a `routed` or `backfill` partition that holds ``cap`` deliveries
        taken in and not settled; resume it once it holds half as many."""
        held = self._flow.held
        for tp in [tp for tp in self._intake_paused if held[tp] <= cap // 2]:
            self._intake_paused.discard(tp)
            if tp in self._assigned:
                consumer.resume([TopicPartition(tp[0], tp[1])])
        for tp, count in held.items():
            if count < cap or tp in self._intake_paused or tp[0] in self._tier_delay:
                continue
            if tp in self._assigned:
                consumer.pause([TopicPartition(tp[0], tp[1])])
                self._intake_paused.add(tp)
                backfill = tp[0] == self._settings.topic("backfill")
                metrics.record_intake_paused("backfill" if backfill else "live")

    def _shed_slow(self) -> None:
        """A paused partition may be held by a slow origin's backlog: hand that back (F3)."""
        if not self._intake_paused or time.monotonic() < self._next_shed:
            return
        self._next_shed = time.monotonic() + SHED_INTERVAL_S
        shed = self._flow.shed_slow(set(self._intake_paused))
        if shed:
            log.info("deferred %d deliveries to slow endpoints out of paused partitions", shed)

    async def _commit_or_wait(self) -> None:
        """Too much is settled but not committed: commit before taking more; when Kafka cannot
        take the commit, wait, so an outage costs at most that much sent twice (Q1)."""
        try:
            await self._commit_now()
        except ProduceError:
            raise
        except HookstreamError as exc:
            log.warning("commit failed, intake waits: %s", exc)
            await asyncio.sleep(0.5)

    async def _shutdown(self, consumer: Consumer, deadline_s: float = 20.0) -> None:
        """One deadline for in-flight attempts; then flush, commit and leave the group."""
        for tp in list(self._timers):
            self._cancel_timers([tp])
        await self._flow.drain(deadline_s)
        reads = self._reads
        assert reads is not None
        try:
            await self._commit_now()
        finally:
            await reads.call(consumer.close)
            reads.stop()
