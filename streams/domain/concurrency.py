"""Adaptive concurrency per endpoint origin (AIMD), pure.

Every origin may have at most ``origin_max_in_flight`` attempts running in one worker (F3). An
endpoint that is struggling says so before it fails outright: it answers 429 or 5xx, times
out, or takes longer and longer to answer as its own queue grows. Sending it as many requests
as before only makes that worse, and each rejected attempt costs a retry later.

`AimdLimit` keeps an origin's current limit between ``minimum`` and ``maximum``:

- **Multiplicative decrease** on an overload signal: the limit is multiplied by ``backoff``
  (0.75). Signals are an attempt that ended in 429, 5xx or a timeout, and an attempt whose
  latency is more than ``latency_ratio`` times the origin's long-run average (the endpoint's
  queue is growing: the gradient of Netflix's concurrency-limits, without its tuning knobs). At
  most one decrease per window, as in TCP: an attempt that started before the last decrease
  carries the same news as the one that caused it, so it does not cut again.
- **Additive increase** on every other completed attempt: +1/limit, so a full window of
  successes raises the limit by one.

It starts at ``maximum``: a healthy endpoint gets the full configured concurrency at once, and
only an endpoint that signals overload is throttled. The long-run average follows slowly
(``slow_alpha``), so a worker that is itself overloaded, which stretches every attempt evenly
and for good, stops counting as a latency signal once the average has caught up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.domain.models import FailureKind


@dataclass
class AimdLimit:
    """One origin's adaptive concurrency limit."""

    maximum: int
    minimum: int = 1
    backoff: float = 0.75
    latency_ratio: float = 2.0
    slow_alpha: float = 0.02
    fast_alpha: float = 0.3
    limit: float = field(init=False)
    _slow: float | None = field(default=None, init=False)  # long-run attempt seconds
    _fast: float | None = field(default=None, init=False)  # recent attempt seconds
    _last_decrease: float | None = field(default=None, init=False)
    decreases: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError(f"need 1 <= minimum <= maximum, got {self.minimum}, {self.maximum}")
        if not 0 < self.backoff < 1:
            raise ValueError(f"backoff must be in (0, 1), got {self.backoff}")
        self.limit = float(self.maximum)

    @property
    def current(self) -> int:
        """Attempts this origin may have running now."""
        return int(self.limit)

    def observe(self, seconds: float, overloaded: bool, now: float) -> str | None:
        """Account one finished attempt; returns why the limit went down, if it did.

        `seconds` is how long the attempt took and `now` when it ended, on a monotonic clock;
        `overloaded` is the attempt's own verdict (429, 5xx or timeout).
        """
        slow_before = self._slow
        self._fast = (
            seconds if self._fast is None else self._fast + self.fast_alpha * (seconds - self._fast)
        )
        self._slow = (
            seconds if self._slow is None else self._slow + self.slow_alpha * (seconds - self._slow)
        )
        reason: str | None = None
        if overloaded:
            reason = "overload"
        elif slow_before is not None and self._fast > self.latency_ratio * slow_before:
            reason = "latency"
        if reason is None:
            self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
            return None
        if self._last_decrease is not None and now - seconds < self._last_decrease:
            return None  # started before the last decrease: the same window, the same news
        self.limit = max(float(self.minimum), self.limit * self.backoff)
        self._last_decrease = now
        self.decreases += 1
        return reason


def overloaded(status: int | None, failure: FailureKind | None) -> bool:
    """Whether an attempt's end says the endpoint is overloaded: 429, any 5xx, or a timeout.

    A refused connection or a DNS failure is not load: the endpoint is gone, and that is the
    breaker's business (H1). A 4xx other than 429 is the request's fault, not the load's.
    """
    if status is not None:
        return status == 429 or 500 <= status <= 599
    return failure is FailureKind.TIMEOUT
