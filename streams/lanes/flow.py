"""Flow control for the dispatcher (F1-F4, F7): who may attempt what, and when.

Every delivery the dispatcher is about to attempt goes through `FlowControl.submit`, into its
subscription's FIFO queue. One pump per subscription starts the attempts in order (the first
attempts of a subscription go out in publish order, D9) and only when

1. the subscription's token bucket has a token (``rate_limit``, F1) and any Retry-After pause
   has passed (F2: it applies to the subscription's next deliveries, not only the one that got
   it),
2. the subscription has fewer than ``max_in_flight`` attempts running (F1),
3. the endpoint origin has fewer attempts running than its limit (F3: a slow or dead host
   cannot take the worker's capacity; its work waits in its own queue, holding no dispatch
   slot). The limit is ``origin_max_in_flight``, or with ``adaptive_concurrency`` an AIMD limit
   below it that an origin answering 429, 5xx, timeouts or ever slower lowers, and steady
   successes raise again (`streams.domain.concurrency`), and
4. a dispatch slot is free, granted fairly across tenants by deficit round robin (F7).

A throttled delivery is delayed, never failed, and never counts toward health. A subscription
holds only a bounded queue in memory (`queue_cap`); beyond it, a subscription held back by a
limit or by a slow origin has its deliveries deferred to a retry tier without an attempt
(settled, so the partition's commits move on), which bounds both memory and how long one
subscription can hold back a partition's commit position; and while a partition's intake is
paused, `shed_slow` defers the queued deliveries of that partition whose origin is slow, so a
hanging host cannot keep its partition's other subscriptions waiting. A busy origin that
answers quickly is not slow (its attempts end in well under `SLOW_ATTEMPT_S`), so the worker's
intake waits for it instead of paying a Kafka round trip per deferred delivery.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from streams.domain.breaker import origin_of
from streams.domain.models import Delivery, Subscription
from streams.domain.ratelimit import TokenBucket, deferred_due, queue_cap
from streams.lanes.gates import FairSlots as FairSlots
from streams.lanes.gates import OriginGate as OriginGate

TP = tuple[str, int]
#: A saturated origin whose attempts take this long on average is slow: its full queue is
#: deferred rather than held in the worker's intake buffer.
SLOW_ATTEMPT_S = 1.0
#: A saturated origin that has finished no attempt for this long is slow, whatever its average.
STALL_S = 1.0
#: Weight of the newest attempt in an origin's moving average of attempt durations.
EWMA_ALPHA = 0.2


class Ended(NamedTuple):
    """How an attempt ended, as flow control needs it."""

    #: F2: hold the subscription's next deliveries this long (a 429/503 Retry-After).
    pause_s: float | None = None
    #: The endpoint signalled overload (429, 5xx, timeout): its origin's AIMD limit goes down.
    overloaded: bool = False
    #: False when no request went out (the breaker held it back): nothing to learn from it.
    attempted: bool = True


Attempt = Callable[[Subscription, Delivery], Awaitable[Ended]]


@dataclass
class _Flow:
    """One subscription's queue and limits in this worker."""

    tenant: str
    origin: str
    queue: deque[tuple[TP, int, Delivery]] = field(default_factory=deque)
    bucket: TokenBucket | None = None
    in_flight: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(10000))
    max_in_flight: int | None = None
    paused_until: float = 0.0
    deferred_until: float = 0.0  # the latest due time handed to a throttled, deferred delivery
    pump: asyncio.Task[None] | None = None
    cap: int = 256


class FlowControl:
    def __init__(
        self,
        *,
        slots: int,
        origin_max_in_flight: int,
        attempt: Attempt,
        defer: Callable[[Delivery, int, str], None],
        settled: Callable[[TP, int], None],
        lookup: Callable[[str], Subscription | None],
        clock: Callable[[], float] = time.time,
        tenant_weights: dict[str, float] | None = None,
        adaptive: bool = False,
        on_decrease: Callable[[str], None] | None = None,
        ramp: Callable[[str, float], float | None] | None = None,
        paced_topics: frozenset[str] = frozenset(),
    ) -> None:
        self._slots = FairSlots(slots, tenant_weights)
        self._origin_cap = origin_max_in_flight
        self._adaptive = adaptive
        self._on_decrease = on_decrease
        self._ramp = ramp  # (origin, now) -> the recovery ramp's rate here (F4), or None
        # topics whose records were paced where they were written (the backfill lane, R2/P5):
        # read straight from there, a delivery is neither held nor counted by the ramp
        self._paced_topics = paced_topics
        self._origins: dict[str, OriginGate] = {}
        self._origin_latency: dict[str, float] = {}  # moving average of attempt seconds
        self._origin_done: dict[str, float] = {}  # when an attempt last ended (monotonic)
        self._flows: dict[str, _Flow] = {}
        self._attempt = attempt
        self._defer = defer
        self._settled = settled
        self._lookup = lookup
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = asyncio.Event()  # cleared while Kafka cannot record what starts (`hold`)
        self._open.set()
        self.queued = 0
        self.running: Counter[TP] = Counter()  # attempts under way, per source partition
        self.held: Counter[TP] = Counter()  # taken in, not settled: queued + running, per partition

    @property
    def busy(self) -> int:
        """Deliveries taken in but not settled yet: queued plus running."""
        return self.queued + len(self._tasks)

    def hold(self, held: bool) -> None:
        """Start no attempt while ``held`` (Kafka cannot record it, `CommitGate`); those under
        way finish. The dispatcher calls this on every turn of its loop."""
        if held:
            self._open.clear()
        else:
            self._open.set()

    def _flow(self, sub: Subscription) -> _Flow:
        flow = self._flows.get(sub.id)
        origin = origin_of(sub.url)
        if flow is None or flow.origin != origin:
            flow = self._flows[sub.id] = _Flow(sub.tenant_id, origin)
        now = self._clock()
        if sub.rate_limit is None:
            flow.bucket = None
        elif flow.bucket is None:
            flow.bucket = TokenBucket(sub.rate_limit, now=now)
        else:
            flow.bucket.set_rate(sub.rate_limit)  # limits change without a restart (F1)
        if sub.max_in_flight != flow.max_in_flight:
            flow.max_in_flight = sub.max_in_flight
            flow.in_flight = asyncio.Semaphore(sub.max_in_flight or 10000)
        flow.cap = queue_cap(sub.rate_limit)
        return flow

    def limits_changed(self, sub: Subscription, *, raised: bool) -> None:
        """``sub``'s limits changed: its queue runs under the new ones from its next turn. When
        its rate went up (or was lifted), new deliveries no longer line up behind those
        deferred at the old rate."""
        if sub.id in self._flows:
            flow = self._flow(sub)
            if raised:
                flow.deferred_until = 0.0

    def submit(self, tp: TP, offset: int, delivery: Delivery, sub: Subscription) -> None:
        """Take one delivery in; it is attempted when its limits allow, or deferred."""
        flow = self._flow(sub)
        now = self._clock()
        # a new delivery of a throttled subscription queues behind those it already deferred
        # (they come back to their turns); one returning from a tier has waited its turn
        behind = sub.rate_limit is not None and not delivery.due_at and flow.deferred_until > now
        if (len(flow.queue) >= flow.cap or behind) and self._held_back(sub, flow):
            # throttled: come back in line, once the queue ahead and every delivery deferred
            # before has had its turn at the subscription's rate;
            # unthrottled but its origin is slow: look again in a second, and hand back what
            # queued beyond the origin's own slots, so a hanging host holds no intake buffer
            ahead = len(flow.queue) / sub.rate_limit if sub.rate_limit else 1.0
            wait_s = max(1.0, ahead, flow.paused_until - now)
            due_ms = int((now + wait_s) * 1000)
            if sub.rate_limit is not None:
                flow.deferred_until = deferred_due(now, wait_s, sub.rate_limit, flow.deferred_until)
                due_ms = int(flow.deferred_until * 1000)
            elif sub.max_in_flight is None:
                shed = [flow.queue.pop() for _ in range(len(flow.queue) - self._origin_cap)]
                for item in reversed(shed):
                    self._hand_back(item, due_ms)
            self._defer(delivery, due_ms, "rate_limited")
            self._settled(tp, offset)
            return
        flow.queue.append((tp, offset, delivery))
        self.queued += 1
        self.held[tp] += 1
        if flow.pump is None or flow.pump.done():
            flow.pump = self._spawn(self._pump(sub.id, flow))

    def _held_back(self, sub: Subscription, flow: _Flow) -> bool:
        """Whether a full queue is waiting on a limit, rather than simply busy.

        A busy, unthrottled subscription whose origin answers quickly is draining as fast as it
        can: deferring its deliveries would only cost Kafka round trips, so intake waits
        instead (the dispatcher stops reading a partition that holds its share of the intake
        buffer, see `held`, and goes on reading the others). Its origin is slow
        when every origin slot is taken and its attempts have lately taken `SLOW_ATTEMPT_S` or
        more on average, or none has ended for `STALL_S` (F3: a host that hangs is slow before
        its first timeout ends). An overloaded worker stretches every attempt to a fraction of
        a second, far below either bound, so saturation alone never defers.
        """
        if sub.rate_limit is not None or sub.max_in_flight is not None:
            return True
        origin = self._origins.get(flow.origin)
        if origin is None or not origin.locked():
            return False
        if time.monotonic() - self._origin_done.get(flow.origin, 0.0) > STALL_S:
            return True
        return self._origin_latency.get(flow.origin, 0.0) >= SLOW_ATTEMPT_S

    def shed_slow(self, tps: set[TP]) -> int:
        """Defer, without an attempt, the deliveries queued from ``tps`` (partitions whose
        intake is paused) of unthrottled subscriptions whose origin is slow or has stalled.

        Such a backlog would otherwise keep its partition paused until the hanging attempts
        time out, and with it every other subscription of that partition (F3). The deliveries
        come back from a retry tier in a second, as a queue over its cap does. Returns how many
        were deferred.
        """
        shed = 0
        due_ms = int((self._clock() + 1.0) * 1000)
        for sub_id, flow in self._flows.items():
            if not flow.queue:
                continue
            sub = self._lookup(sub_id)
            if sub is None or sub.rate_limit is not None or sub.max_in_flight is not None:
                continue  # a throttled queue is bounded and drained by its own limits
            if not self._held_back(sub, flow):
                continue
            kept: deque[tuple[TP, int, Delivery]] = deque()
            for item in flow.queue:
                if item[0] in tps:
                    self._hand_back(item, due_ms)
                    shed += 1
                else:
                    kept.append(item)
            flow.queue = kept
        return shed

    def _hand_back(self, item: tuple[TP, int, Delivery], due_ms: int) -> None:
        """A queued delivery goes back to a retry tier without an attempt, and is settled."""
        tp, offset, delivery = item
        self.queued -= 1
        self._release(tp)
        self._defer(delivery, due_ms, "rate_limited")
        self._settled(tp, offset)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pump(self, sub_id: str, flow: _Flow) -> None:
        origin = self._origins.get(flow.origin)
        if origin is None:
            origin = self._origins[flow.origin] = OriginGate(self._origin_cap, self._adaptive)
            self._origin_done[flow.origin] = time.monotonic()
        while flow.queue:
            in_flight = flow.in_flight
            await in_flight.acquire()
            await origin.acquire()
            if not flow.queue:  # emptied meanwhile (revoked partitions): nothing to start
                origin.release()
                in_flight.release()
                break
            if not self._open.is_set():
                origin.release()
                in_flight.release()
                await self._open.wait()
                continue
            # checked after the slots: an attempt that just ended may have paused the flow
            now = self._clock()
            wait = max(flow.paused_until - now, flow.bucket.wait(now) if flow.bucket else 0.0)
            paced = False  # whether a recovery ramp paced this turn
            if self._ramp is not None and flow.queue[0][0][0] not in self._paced_topics:
                rate = self._ramp(flow.origin, now)
                paced = rate is not None
                wait = max(wait, origin.ramp_wait(rate, now))
            if wait > 0:
                origin.release()
                in_flight.release()
                # at most a second: a rate raised meanwhile applies to the next turn (F1)
                await asyncio.sleep(min(wait, 1.0))
                continue
            if flow.bucket is not None:
                flow.bucket.take(self._clock())
            if paced:
                origin.ramp_take(now)
            tp, offset, delivery = flow.queue.popleft()
            self.queued -= 1
            self.running[tp] += 1
            self._spawn(self._run(flow, in_flight, origin, tp, offset, delivery, paced))

    async def _run(
        self,
        flow: _Flow,
        in_flight: asyncio.Semaphore,
        origin: OriginGate,
        tp: TP,
        offset: int,
        delivery: Delivery,
        paced: bool = False,
    ) -> None:
        requeued = False
        try:
            if not self._slots.try_acquire():
                await self._slots.acquire(flow.tenant)
            if not paced and tp[0] not in self._paced_topics and self._ramps(flow.origin):
                # let go while its origin's breaker was open, it waited for a slot while the
                # breaker closed: back to the head of the line, behind the recovery ramp (F4)
                self._slots.release()
                requeued = True
                return
            started = time.monotonic()
            ended: Ended | None = None
            try:
                sub = self._lookup(delivery.subscription_id)
                ended = await self._attempt(sub, delivery) if sub is not None else None
            finally:
                self._slots.release()
                seconds = time.monotonic() - started
                self._observe(flow.origin, seconds)
            if ended is not None and ended.attempted:
                reason = origin.observe(seconds, ended.overloaded)
                if reason is not None and self._on_decrease is not None:
                    self._on_decrease(reason)
            if ended is not None and ended.pause_s:
                flow.paused_until = max(flow.paused_until, self._clock() + ended.pause_s)
        finally:
            origin.release()
            in_flight.release()
            self.running[tp] -= 1
            if requeued:
                flow.queue.appendleft((tp, offset, delivery))
                self.queued += 1
                if flow.pump is None or flow.pump.done():
                    flow.pump = self._spawn(self._pump(delivery.subscription_id, flow))
            else:
                self._release(tp)
                self._settled(tp, offset)

    def _ramps(self, origin: str) -> bool:
        """Whether a recovery ramp paces ``origin`` now (F4)."""
        return self._ramp is not None and self._ramp(origin, self._clock()) is not None

    def _release(self, tp: TP) -> None:
        left = self.held[tp] - 1
        if left > 0:
            self.held[tp] = left
        else:
            del self.held[tp]

    def _observe(self, origin: str, seconds: float) -> None:
        self._origin_done[origin] = time.monotonic()
        previous = self._origin_latency.get(origin)
        self._origin_latency[origin] = (
            seconds if previous is None else previous + EWMA_ALPHA * (seconds - previous)
        )

    async def drain(self, timeout_s: float) -> None:
        """Wait for running attempts (shutdown); queued ones stay unsettled and are replayed."""
        for flow in self._flows.values():
            if flow.pump is not None:
                flow.pump.cancel()
            self.queued -= len(flow.queue)
            for tp, _offset, _delivery in flow.queue:
                self._release(tp)
            flow.queue.clear()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)

    def forget(self, tps: set[TP]) -> None:
        """Partitions were revoked: drop their queued deliveries (the new owner replays them)."""
        for flow in self._flows.values():
            kept: deque[tuple[TP, int, Delivery]] = deque()
            for item in flow.queue:
                if item[0] in tps:
                    self._release(item[0])
                else:
                    kept.append(item)
            self.queued -= len(flow.queue) - len(kept)
            flow.queue = kept
