"""Retry-tier deliveries the dispatcher holds in memory until they are due (D6, F1, F4).

Records of a retry tier wait for their due time on an event-loop timer; a tier partition is
paused while it holds `READ_AHEAD` of them (memory stays bounded, nothing polls) and resumed
once half have fired. Timers fire while the lane's read thread may be inside ``consume``, so a
resume is only noted there and made by `apply`, which the dispatcher calls between two reads:
the consumer is never used by two threads at once (librdkafka's Python binding does not
promise that it may be). Some come back before their due time, on purpose: deferrals that only a
since-raised rate limit held back (F1), and deliveries the breaker deferred, once it closes
(F4). A retry waiting out its backoff keeps its time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from streams.domain.models import Delivery
from streams.domain.ratelimit import released_by_raise

log = logging.getLogger(__name__)

TP = tuple[str, int]
# Retries of one tier partition held in memory waiting for their due time; past this the
# partition is paused until half of them have fired (memory stays bounded, nothing polls).
READ_AHEAD = 2000


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A delivery from a retry tier, held in memory until it is due."""

    handle: asyncio.TimerHandle
    delivery: Delivery
    deferred_ms: int  # when it was written to the tier (the record's timestamp)


class TierTimers:
    def __init__(
        self,
        ready: Callable[[TP, int, Delivery], None],
        assigned: Callable[[TP], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ready = ready  # a delivery is due: the dispatcher's intake takes it
        self._assigned = assigned
        self._clock = clock
        self._timers: dict[TP, dict[int, _Waiting]] = {}
        self._paused: set[TP] = set()  # tier partitions waiting for their read-ahead to fire
        self._resume: set[TP] = set()  # paused partitions to resume at the next `apply`
        self._raised: dict[str, int] = {}  # subscription -> when its rate limit last went up
        self._early: dict[str, float] = {}  # released by a breaker's close, still on its way
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: Consumer | None = None

    def bind(self, loop: asyncio.AbstractEventLoop, consumer: Consumer) -> None:
        self._loop = loop
        self._consumer = consumer

    def schedule(self, tp: TP, offset: int, delivery: Delivery, deferred_ms: int) -> None:
        """Hold a retry (or deferral) in memory until it is due, never firing early (D6);
        a deferral that only a since-raised rate limit holds back is due now (F1)."""
        assert self._loop is not None and self._consumer is not None
        now = self._clock()
        wait = max(0.0, delivery.due_at / 1000 - now)
        if self._due_by_raise(delivery, deferred_ms, int(now * 1000)):
            wait = 0.0
        elif self._early and self._early.pop(delivery.delivery_id, 0.0) >= now:
            wait = 0.0  # deferred by a breaker that has closed since (F4)
        pending = self._timers.setdefault(tp, {})
        handle = self._loop.call_later(wait, self._fire, tp, offset, delivery)
        pending[offset] = _Waiting(handle, delivery, deferred_ms)
        if len(pending) >= READ_AHEAD and tp not in self._paused:
            # `schedule` runs between two reads (the dispatcher's `_take`): pause at once, unless
            # the partition is still paused, its resume not made yet
            if tp in self._resume:
                self._resume.discard(tp)
            else:
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

    def rate_raised(self, subscription_id: str, changed_ms: int) -> int:
        """F1: deliveries deferred at ``subscription_id``'s old, lower rate come back now (to
        be paced at the new one); those not read yet come back as they are read. Returns how
        many came back."""
        self._raised[subscription_id] = changed_ms
        now_ms = int(self._clock() * 1000)
        return self._release(
            lambda w: (
                w.delivery.subscription_id == subscription_id
                and self._due_by_raise(w.delivery, w.deferred_ms, now_ms)
            )
        )

    def release(self, delivery_ids: set[str], origin: str, within_s: float) -> int:
        """F4: ``origin``'s breaker, which these deliveries waited for, closed: they come back
        now (paced by the recovery ramp), not at their due time; those still on their way to
        the tier (deferred a moment ago) come back as soon as they are read, for ``within_s``."""
        if not delivery_ids:
            return 0
        released = self._release(lambda w: w.delivery.delivery_id in delivery_ids)
        now = self._clock()
        self._early = {i: t for i, t in self._early.items() if t >= now}
        until = now + within_s
        self._early.update((i, until) for i in delivery_ids)
        log.info("breaker closed: %d deferred deliveries back", released, extra={"origin": origin})
        return released

    def _release(self, due: Callable[[_Waiting], bool]) -> int:
        released = 0
        for tp, pending in list(self._timers.items()):
            for offset, waiting in list(pending.items()):
                if due(waiting):
                    waiting.handle.cancel()
                    self._fire(tp, offset, waiting.delivery)
                    released += 1
        return released

    def _fire(self, tp: TP, offset: int, delivery: Delivery) -> None:
        pending = self._timers.get(tp, {})
        pending.pop(offset, None)
        if tp in self._paused and len(pending) <= READ_AHEAD // 2:
            self._paused.discard(tp)
            self._resume.add(tp)  # made by `apply`, between two reads
        self._ready(tp, offset, delivery)

    def apply(self, consumer: Consumer) -> None:
        """Resume the tier partitions whose read-ahead has half fired. The dispatcher calls
        this between two reads, when no other thread uses ``consumer``."""
        if not self._resume:
            return
        resume = [TopicPartition(t, p) for t, p in self._resume if self._assigned((t, p))]
        self._resume.clear()
        if resume:
            consumer.resume(resume)

    def cancel(self, tps: list[TP]) -> None:
        """Partitions were revoked (or the lane stops): drop what they hold."""
        for tp in tps:
            for waiting in self._timers.pop(tp, {}).values():
                waiting.handle.cancel()
            self._paused.discard(tp)
            self._resume.discard(tp)  # a revoked partition's pause was lifted on revoke

    def paused(self) -> set[TP]:
        """The tier partitions paused at the consumer now (a resume owed included)."""
        return self._paused | self._resume

    def busy(self) -> set[TP]:
        """The tier partitions paused here, and those with retries waiting in memory: the lane
        is in use, so it stays in the fetches (`IdleLanes` leaves it alone)."""
        return self.paused() | {tp for tp, pending in self._timers.items() if pending}

    def partitions(self) -> list[TP]:
        return list(self._timers)
