"""The gates flow control passes before an attempt: per-origin concurrency and the recovery
ramp (`OriginGate`, F3, F4), and dispatch slots shared fairly across tenants (`FairSlots`, F7)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque

from streams.domain.concurrency import AimdLimit
from streams.domain.fairness import FairOrder
from streams.domain.ratelimit import TokenBucket


class OriginGate:
    """The attempts one origin may have running: a fixed cap, or an adaptive limit under it."""

    def __init__(self, cap: int, adaptive: bool) -> None:
        self.cap = cap
        self.adaptive = AimdLimit(cap) if adaptive else None
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ramp: TokenBucket | None = None  # the recovery ramp's pace, while one applies

    @property
    def limit(self) -> int:
        return self.adaptive.current if self.adaptive is not None else self.cap

    def locked(self) -> bool:
        return self.running >= self.limit

    async def acquire(self) -> None:
        while self._waiters or self.running >= self.limit:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._wake()  # woken and cancelled at once: wake the next one instead
                elif future in self._waiters:  # `_wake` may have dropped it already
                    self._waiters.remove(future)
                raise
            if self.running < self.limit:
                break
        self.running += 1

    def release(self) -> None:
        self.running -= 1
        self._wake()

    def observe(self, seconds: float, overloaded: bool) -> str | None:
        """Feed one finished attempt to the adaptive limit; why it went down, if it did."""
        if self.adaptive is None:
            return None
        reason = self.adaptive.observe(seconds, overloaded, time.monotonic())
        self._wake()  # an increase may admit a waiter
        return reason

    def ramp_wait(self, rate: float | None, now: float) -> float:
        """Seconds until the recovery ramp (F4) lets the next attempt start; 0 without one.

        ``rate`` is this worker's current ramp rate (None: no ramp). The pace starts with no
        token saved, so a ramp never begins with a burst.
        """
        if rate is None:
            self._ramp = None
            return 0.0
        if self._ramp is None:
            self._ramp = TokenBucket(rate, now=now)
            self._ramp.tokens = 0.0
        else:
            self._ramp.set_rate(rate)
        return self._ramp.wait(now)

    def ramp_take(self, now: float) -> None:
        if self._ramp is not None:
            self._ramp.take(now)

    def _wake(self) -> None:
        free = self.limit - self.running
        while free > 0 and self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_result(None)
                free -= 1


class FairSlots:
    """``capacity`` dispatch slots, handed to waiting tenants in `FairOrder`."""

    def __init__(self, capacity: int, weights: dict[str, float] | None = None) -> None:
        self._free = capacity
        self._order = FairOrder(weights)
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._ids = itertools.count()

    def try_acquire(self) -> bool:
        """Take a slot when one is free and nobody waits (no coroutine on the common path)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def acquire(self, tenant: str) -> None:
        if self.try_acquire():
            return
        waiter = next(self._ids)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = future
        self._order.push(tenant, waiter)
        try:
            await future
        except asyncio.CancelledError:
            self._waiters.pop(waiter, None)
            self._order.discard(tenant, waiter)
            if future.done() and not future.cancelled():
                self.release()  # granted and cancelled at once: hand the slot on
            raise

    def release(self) -> None:
        while (turn := self._order.pop()) is not None:
            future = self._waiters.pop(turn[1], None)
            if future is not None and not future.done():
                future.set_result(None)
                return
        self._free += 1
