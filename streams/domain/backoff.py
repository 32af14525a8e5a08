"""When a failed delivery is tried again (SPEC D6, F2, F4).

A `RetryPolicy` is a schedule of delays, one retry tier (and one Kafka topic) per delay. After
failed attempt ``n`` (counted from 1) the delivery goes to tier ``n - 1`` and waits
``schedule[n - 1]`` seconds, give or take the jitter, so that deliveries that failed together do
not all come back together. A delivery is exhausted when its attempts are used up, or when the
next attempt would fall after ``first_attempt_at + window``.

When the receiver sent ``Retry-After`` (429 or 503), hookstream waits what it asked, clamped to
``[step, 2 * step]`` of the current tier: an endpoint can slow its retries down, but cannot make
them come sooner than the schedule or park them for ever. Jitter on top of a Retry-After is
upward only, ``[0, jitter)`` of the clamped wait, so a retry never comes before that wait.

Due times are rounded up to the next millisecond, so a retry is never early. Everything is pure:
the clock reading (``now_ms``) and the random source (``rand``, in [0, 1)) are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_SCHEDULE",
    "RetryDecision",
    "RetryPolicy",
    "plan_retry",
    "retry_after_bounds",
]

#: 1m, 5m, 30m, 2h: five attempts in all.
DEFAULT_SCHEDULE: tuple[float, ...] = (60.0, 300.0, 1800.0, 7200.0)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry delays in seconds, the jitter fraction and the cap on the whole retry span."""

    schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    jitter: float = 0.1
    window: float = 86400.0

    def __post_init__(self) -> None:
        if any(not (math.isfinite(step) and step > 0) for step in self.schedule):
            raise ValueError("every retry delay must be a positive number of seconds")
        if any(a > b for a, b in zip(self.schedule, self.schedule[1:], strict=False)):
            raise ValueError("retry delays must not decrease")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("jitter must be within [0, 1)")
        if not (math.isfinite(self.window) and self.window > 0):
            raise ValueError("the retry window must be a positive number of seconds")

    @property
    def attempts(self) -> int:
        """Attempts a delivery gets in all: the first one and one per tier."""
        return len(self.schedule) + 1


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """Either a retry (``tier`` and ``due_at_ms``) or exhaustion, with a stable ``reason``.

    Reasons: ``backoff`` and ``retry_after`` for a retry; ``attempts_exhausted`` and
    ``window_exhausted`` for the end of the road.
    """

    tier: int | None
    due_at_ms: int | None
    exhausted: bool
    reason: str


def _exhausted(reason: str) -> RetryDecision:
    return RetryDecision(tier=None, due_at_ms=None, exhausted=True, reason=reason)


def _draw(rand: Callable[[], float]) -> float:
    value = rand()
    if not 0.0 <= value < 1.0:
        raise ValueError(f"the random source must return a number in [0, 1), got {value!r}")
    return value


def retry_after_bounds(step: float, retry_after_s: float) -> float:
    """The wait hookstream honours for ``Retry-After``: clamped to ``[step, 2 * step]``."""
    if math.isnan(retry_after_s):
        return step
    return min(max(retry_after_s, step), 2.0 * step)


def plan_retry(
    policy: RetryPolicy,
    failed_attempt: int,
    first_attempt_at_ms: int,
    now_ms: int,
    rand: Callable[[], float],
    retry_after_s: float | None = None,
) -> RetryDecision:
    """What happens after retryable attempt ``failed_attempt`` (from 1) failed at ``now_ms``."""
    if failed_attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {failed_attempt}")
    if failed_attempt > len(policy.schedule):
        return _exhausted("attempts_exhausted")
    tier = failed_attempt - 1
    step = policy.schedule[tier]
    if retry_after_s is None:
        delay = step * (1.0 + policy.jitter * (2.0 * _draw(rand) - 1.0))
        reason = "backoff"
    else:
        delay = retry_after_bounds(step, retry_after_s) * (1.0 + policy.jitter * _draw(rand))
        reason = "retry_after"
    due_at_ms = now_ms + math.ceil(delay * 1000.0)
    if due_at_ms > first_attempt_at_ms + math.floor(policy.window * 1000.0):
        return _exhausted("window_exhausted")
    return RetryDecision(tier=tier, due_at_ms=due_at_ms, exhausted=False, reason=reason)
