"""One attempt through the fleet's shared breaker, and the ways a delivery leaves without one.

`Sender` is the dispatcher's half that talks to endpoints: `attempt` asks the shared breaker
(H7, H8), sends the request, settles the outcome and feeds the breaker and the recovery ramp
(F4); `defer` hands a delivery back to a retry tier without an attempt (a deferral: not an
attempt, no health count, nothing dropped), `park` and `dead_letter_raw` dead-letter what cannot
be attempted at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Message

from streams import metrics
from streams.adapters import stage_clock
from streams.adapters.delivery import attempt
from streams.adapters.http import Transport
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.backoff import RetryPolicy
from streams.domain.breaker import breaker_signal, origin_of
from streams.domain.classify import parse_retry_after
from streams.domain.concurrency import overloaded
from streams.domain.dedup import RecentSuccesses
from streams.domain.fleet_breaker import Step
from streams.domain.models import (
    DeadLetter,
    Delivery,
    HealthOutcome,
    OutcomeClass,
    Subscription,
)
from streams.domain.recovery import breaker_reset_due
from streams.domain.settle import settle
from streams.errors import DecodeError
from streams.lanes.breakers import BreakerHeld, FleetBreakers
from streams.lanes.flow import Ended
from streams.lanes.outbox import Outbox
from streams.settings import Settings

log = logging.getLogger(__name__)


class Sender:
    def __init__(
        self,
        settings: Settings,
        registry: SubscriptionRegistry,
        outbox: Outbox,
        transport: Transport,
        policy: RetryPolicy,
        breakers: FleetBreakers,
        recent: RecentSuccesses,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = lambda: 0.5,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._outbox = outbox
        self._transport = transport
        self._policy = policy
        self._breakers = breakers
        self._recent = recent
        self._clock = clock
        self._rand = rand
        self._reenabled_seen: dict[str, int] = {}
        #: deliveries deferred by the breaker, per origin: they come back when it closes (F4)
        self.held = BreakerHeld()

    async def attempt(self, sub: Subscription, delivery: Delivery) -> Ended:
        """One attempt through the breaker: a Retry-After pause, and whether it was overload."""
        stage_clock.stamp("started", delivery.delivery_id)
        now_ms = int(self._clock() * 1000)
        origin = origin_of(sub.url)
        if breaker_reset_due(sub, self._reenabled_seen):
            self._breakers.reset(origin, sub.updated_at, now_ms)  # R1: closed, and a ramp (F4)
        decision = await self._breakers.admit(origin, now_ms)
        if decision.step is Step.DEFER:
            # H7: not an attempt, not a failure: the delivery comes back when the breaker
            # will admit again (or when it closes), and nothing is dropped.
            if self._breakers.state(origin) != "closed":  # back at the close (F4)
                self.held.add(origin, delivery.delivery_id)
            self.defer(delivery, decision.retry_at_ms or now_ms + 1000, "breaker_open")
            return Ended(attempted=False)
        lane = delivery.lane.value
        stage_clock.stamp("sending", delivery.delivery_id)
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
            self._breakers.record(origin, signal, decision.step is Step.PROBE, done_ms)
        self._outbox.settle(outcome)
        overload = overloaded(result.status, result.failure)
        if overload:
            self._breakers.overloaded(origin, done_ms)  # F4: a ramp under way halves
        return Ended(
            pause_s=self._pause_after(result.status, result.retry_after, done_ms),
            overloaded=overload,
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

    def defer(self, delivery: Delivery, due_ms: int, reason: str) -> None:
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
        self._outbox.dead_letter(self._dead_letter(delivery, reason, now_ms))
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

    def park(self, delivery: Delivery, reason: str) -> None:
        """Dead-letter a delivery that is not attempted (its subscription is gone or not
        active, H4); a re-enable's backfill brings it back (R2)."""
        self._outbox.dead_letter(self._dead_letter(delivery, reason, int(self._clock() * 1000)))

    @staticmethod
    def _dead_letter(delivery: Delivery, reason: str, now_ms: int) -> DeadLetter:
        return DeadLetter(
            reason=reason,
            dead_at=now_ms,
            tenant_id=delivery.tenant_id,
            subscription_id=delivery.subscription_id,
            delivery=delivery,
            attempts=delivery.attempt - 1,
            first_attempt_at=delivery.first_attempt_at,
        )

    def dead_letter_raw(self, msg: Message, exc: DecodeError) -> None:
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
