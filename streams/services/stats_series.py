"""A subscription's analytics hour by hour, for the portal's charts (SPEC O2, U2).

The same stored windows as ``streams.services.stats`` (the analytics agent's tables, or the
ledger folded by `ScannedAnalytics`), reported one hourly window at a time with the same pure
`summarise`, so each point of a chart is exactly what the API's report would say of that hour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from streams.domain.analytics_report import Stats, summarise
from streams.domain.analytics_window import HOUR_MS, span_start
from streams.domain.models import Subscription
from streams.services.stats import AnalyticsSource, span_of


@dataclass(frozen=True, slots=True)
class HourPoint:
    """One hour of a subscription's deliveries: the window's start (ms) and its report."""

    start: int
    stats: Stats

    @property
    def attempt_success_rate(self) -> float | None:
        """Successful attempts over attempts in the hour (None with no attempt)."""
        if self.stats.attempts == 0:
            return None
        return self.stats.successes / self.stats.attempts


async def hourly(
    source: AnalyticsSource, sub: Subscription, window: str | None, now_ms: int | None = None
) -> tuple[str, list[HourPoint]]:
    """The window's name and its hours that hold attempts, oldest first."""
    name, span = span_of(window)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    since = span_start(span, now)
    found = (await source.fetch([sub.id], since)).get(sub.id)
    windows = [] if found is None else sorted(found.windows, key=lambda w: w.start)
    timeout_ms = sub.timeout_s * 1000
    points = [
        HourPoint(w.start, summarise([w], since=w.start, until=w.start + HOUR_MS - 1,
                                     timeout_ms=timeout_ms))
        for w in windows
        if w.start >= since
    ]  # fmt: skip
    return name, points
