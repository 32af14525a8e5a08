"""Delivery analytics queries, shared by the admin API and `hookstream stats` (SPEC O2).

A query asks an `AnalyticsSource` for the stored windows of some subscriptions and reports on
them with the pure code of ``streams.domain.analytics``. There are two sources:

- on a worker, the analytics agent's tables (``streams.agents.analytics.AnalyticsStore``),
  which reads each subscription from whichever worker owns its partition;
- in the CLI, `ScannedAnalytics`, which reads the `attempts` topic once and folds it with the
  same code, so ``hookstream stats`` works with no worker running (the ledger keeps 7 days, the
  same as the windows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.analytics import (
    DEFAULT_SPAN,
    SPANS,
    Stats,
    SubscriptionData,
    SubscriptionIndex,
    WindowAggregate,
    counts_as_delivery,
    merge_all,
    span_start,
    summarise,
)
from streams.domain.models import Attempt, Subscription
from streams.errors import DecodeError, ValidationError
from streams.settings import Settings


class AnalyticsSource(Protocol):
    async def fetch(self, subscription_ids: list[str], since: int) -> dict[str, SubscriptionData]:
        """The windows starting at or after ``since``, and the retry backlog, per subscription."""
        ...


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    subscription_id: str
    tenant_id: str
    window: str
    stats: Stats


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    """One subscription's line in a tenant report."""

    subscription_id: str
    name: str
    attempts: int
    success_rate: float | None
    p95_latency_ms: float | None
    p95_attempt_duration_ms: float | None
    retry_backlog: int
    latency_warning: bool


@dataclass(frozen=True, slots=True)
class TenantStats:
    tenant_id: str
    window: str
    stats: Stats
    subscriptions: tuple[SubscriptionRow, ...]
    latency_warnings: tuple[str, ...]


def span_of(window: str | None) -> tuple[str, int]:
    """A query span by name (1h, 24h, 7d); `ValidationError` names the field otherwise."""
    name = window or DEFAULT_SPAN
    if name not in SPANS:
        raise ValidationError({"window": f"must be one of {', '.join(SPANS)}"})
    return name, SPANS[name]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _report(data: SubscriptionData | None, sub: Subscription, since: int, now: int) -> Stats:
    windows = [] if data is None else data.windows
    backlog = 0 if data is None else data.backlog.waiting(now)
    return summarise(
        windows, since=since, until=now, retry_backlog=backlog, timeout_ms=sub.timeout_s * 1000
    )


async def subscription_stats(
    source: AnalyticsSource, sub: Subscription, window: str | None, now_ms: int | None = None
) -> SubscriptionStats:
    """One subscription's report over the last ``window``."""
    name, span = span_of(window)
    now = _now_ms() if now_ms is None else now_ms
    since = span_start(span, now)
    found = await source.fetch([sub.id], since)
    return SubscriptionStats(
        sub.id, sub.tenant_id, name, _report(found.get(sub.id), sub, since, now)
    )


async def tenant_stats(
    source: AnalyticsSource,
    tenant_id: str,
    subs: Iterable[Subscription],
    window: str | None,
    now_ms: int | None = None,
) -> TenantStats:
    """A tenant's report: its subscriptions' windows merged, and one row per subscription."""
    name, span = span_of(window)
    now = _now_ms() if now_ms is None else now_ms
    since = span_start(span, now)
    mine = sorted(subs, key=lambda s: s.id)
    found = await source.fetch([s.id for s in mine], since)
    rows = []
    for sub in mine:
        report = _report(found.get(sub.id), sub, since, now)
        rows.append(
            SubscriptionRow(
                subscription_id=sub.id,
                name=sub.name,
                attempts=report.attempts,
                success_rate=report.success_rate,
                p95_latency_ms=report.latency_ms.p95,
                p95_attempt_duration_ms=report.attempt_duration_ms.p95,
                retry_backlog=report.retry_backlog,
                latency_warning=report.latency_warning,
            )
        )
    merged = merge_all(w for data in found.values() for w in data.windows)
    total = summarise(
        [merged] if found else [],
        since=since,
        until=now,
        retry_backlog=sum(r.retry_backlog for r in rows),
    )
    warnings = tuple(r.subscription_id for r in rows if r.latency_warning)
    return TenantStats(tenant_id, name, total, tuple(rows), warnings)


class ScannedAnalytics:
    """The same aggregates as the analytics agent's, folded from one read of `attempts`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _fold(self, wanted: set[str], since: int) -> dict[str, SubscriptionData]:
        indexes: dict[str, SubscriptionIndex] = {}
        windows: dict[tuple[str, int], WindowAggregate] = {}
        for msg in scan(self.settings, self.settings.topic("attempts")):
            try:
                att = codec.decode(Attempt, msg.value() or b"")
            except DecodeError:
                continue
            if att.subscription_id not in wanted or not counts_as_delivery(att):
                continue
            index = indexes.setdefault(att.subscription_id, SubscriptionIndex())
            start, _ = index.observe(att)
            key = (att.subscription_id, start)
            windows.setdefault(key, WindowAggregate(start=start)).add(att)
        return {
            sub_id: SubscriptionData(
                [windows[(sub_id, s)] for s in sorted(index.windows) if s >= since],
                index.backlog,
            )
            for sub_id, index in indexes.items()
        }

    async def fetch(self, subscription_ids: list[str], since: int) -> dict[str, SubscriptionData]:
        return await asyncio.to_thread(self._fold, set(subscription_ids), since)
