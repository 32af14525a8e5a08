"""Per-subscription rate limits (F1, F2), pure: times are seconds passed in by the caller.

A `TokenBucket` holds up to ``burst`` tokens (default 1: strict pacing, so no second ever sees
more than the rate plus one) and refills at ``rate`` per second; each attempt takes one. `wait`
says how long until the next attempt may start, so a throttled delivery is *delayed*, never
failed. `pause` honours a receiver's Retry-After for the subscription's next deliveries, not
only the one that got it (F2). `deferred_due` says when a throttled delivery that does not fit
in the worker's memory should come back.
"""

from __future__ import annotations

import math


class TokenBucket:
    __slots__ = ("burst", "paused_until", "rate", "tokens", "updated")

    def __init__(self, rate: float, burst: float | None = None, now: float = 0.0) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError("rate must be a positive number of deliveries per second")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else 1.0)
        self.tokens = self.burst
        self.updated = now
        self.paused_until = 0.0

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def wait(self, now: float) -> float:
        """Seconds until one token is available (0 when one is available now)."""
        self._refill(now)
        pause = max(0.0, self.paused_until - now)
        missing = max(0.0, 1.0 - self.tokens)
        return max(pause, missing / self.rate)

    def take(self, now: float) -> None:
        """Spend one token (call when `wait` returned 0)."""
        self._refill(now)
        self.tokens -= 1.0

    def pause(self, until: float) -> None:
        """No attempt before ``until`` (Retry-After, F2)."""
        self.paused_until = max(self.paused_until, until)

    def set_rate(self, rate: float) -> None:
        """A changed limit applies at once, keeping the tokens already earned (F1)."""
        if rate != self.rate:
            self.rate = rate


def queue_cap(
    rate: float | None, *, seconds: float = 2.0, floor: int = 8, ceiling: int = 256
) -> int:
    """How many deliveries of one subscription a worker holds in memory before deferring more.

    A throttled subscription keeps about ``seconds`` of work queued; the rest goes back to a
    retry tier (settled, not lost), so it never fills the worker's memory or holds back
    other subscriptions' commits for long.
    """
    if rate is None:
        return ceiling
    return max(floor, min(ceiling, math.ceil(rate * seconds)))


def deferred_due(now: float, wait_s: float, rate: float, line_end: float) -> float:
    """When a throttled delivery handed back to a retry tier should come back (F1).

    Deferred deliveries form a line, one turn (``1 / rate``) apart, behind ``now + wait_s``
    (the queue held in memory) and behind ``line_end``, the due time of the delivery deferred
    before it. Each then comes back when the subscription has a turn for it. Handing all of
    them the same due time instead brings them back at once, when only a queue's worth fits:
    the rest are deferred again, every cycle, so a backlog of N costs about N/2 Kafka round
    trips a second inside the worker while the subscription itself gets less than its rate.
    """
    return max(now + wait_s, line_end + 1.0 / rate)


def rate_raised(old: float | None, new: float | None) -> bool:
    """Whether a subscription's ``rate_limit`` went up, or was lifted (F1)."""
    return old is not None and (new is None or new > old)


def released_by_raise(
    *, never_attempted: bool, deferred_ms: int, raised_ms: int | None, due_ms: int, now_ms: int
) -> bool:
    """Whether a delivery waiting in a retry tier may come back now, because the rate limit
    that deferred it has since been raised (F1: limits take effect without a restart).

    Only a delivery never attempted qualifies: it waits for nothing but its turn, which the
    old, lower rate set. A retry may be waiting out its backoff or a Retry-After, and keeps
    its time. The delivery goes back to flow control, which paces it at the new rate and
    defers again what does not fit in memory, in a line drawn at the new rate.
    """
    # a raise lies in the past, so a delivery still due later was held by the old rate
    return never_attempted and raised_ms is not None and deferred_ms < raised_ms and now_ms < due_ms
