"""Delivery analytics queries, shared by the admin API and `hookstream stats` (SPEC O2).

A query asks an `AnalyticsSource` for the stored windows of some subscriptions and reports on
them with the pure code of ``streams.domain.analytics`` and ``streams.domain.analytics_report``.
There are two sources:

- on a worker, the analytics agent's tables (``streams.agents.analytics.AnalyticsStore``),
  which reads each subscription from whichever worker owns its partition;
- `ScannedAnalytics`, which reads the `attempts` topic once and folds it with the same code:
  ``hookstream stats`` uses it when no worker answers (the ledger keeps 7 days, the same as the
  windows), and so does a worker that runs without the analytics agent.

`subscription_answer` and `tenant_answer` are the one JSON form of a report: the API sends it,
and ``hookstream stats`` prints it, whether a worker (`ask_worker`) or the ledger answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import httpx

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.analytics import MemoryAnalytics, SubscriptionData
from streams.domain.analytics_report import Stats, summarise
from streams.domain.analytics_window import DEFAULT_SPAN, SPANS, span_start
from streams.domain.models import Attempt, Subscription
from streams.errors import DecodeError, HookstreamError, NotFoundError, ValidationError
from streams.plain import plain
from streams.settings import Settings

#: How long ``hookstream stats`` waits for a worker's answer, and how often it asks again while
#: the worker's partitions move (503).
WORKER_TIMEOUT_S: Final = 30.0
WORKER_TRIES: Final = 10


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
    total = summarise(
        [w for data in found.values() for w in data.windows],
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
        state = MemoryAnalytics()
        for msg in scan(self.settings, self.settings.topic("attempts")):
            try:
                att = codec.decode(Attempt, msg.value() or b"")
            except DecodeError:
                continue
            if att.subscription_id in wanted:
                state.add((msg.partition() or 0, msg.offset() or 0), att)
        found = {sub_id: state.data(sub_id, since) for sub_id in wanted}
        return {sub_id: data for sub_id, data in found.items() if data is not None}

    async def fetch(self, subscription_ids: list[str], since: int) -> dict[str, SubscriptionData]:
        return await asyncio.to_thread(self._fold, set(subscription_ids), since)


# --- answers -------------------------------------------------------------------------------------


def subscription_answer(found: SubscriptionStats) -> dict[str, Any]:
    """The JSON form of a subscription's report (``GET /v1/subscriptions/{id}/stats``)."""
    return {"subscription_id": found.subscription_id, "window": found.window, **plain(found.stats)}


def tenant_answer(found: TenantStats) -> dict[str, Any]:
    """The JSON form of a tenant's report (``GET /v1/tenants/{id}/stats``)."""
    return {
        "tenant_id": found.tenant_id,
        "window": found.window,
        **plain(found.stats),
        "subscriptions": plain(found.subscriptions),
        "latency_warnings": list(found.latency_warnings),
    }


def rows_from_answer(answer: dict[str, Any]) -> list[SubscriptionRow]:
    """A tenant answer's rows; `DecodeError` if they are not rows."""
    try:
        return [SubscriptionRow(**row) for row in answer["subscriptions"]]
    except (KeyError, TypeError) as exc:
        raise DecodeError("invalid_stats", f"not a tenant report: {exc!r}") from exc


def ask_worker(
    settings: Settings, url: str, path: str, window: str, *, pause_s: float = 1.0
) -> dict[str, Any] | None:
    """A worker's answer to ``GET {url}{path}?window=``, or None when no worker answers there
    or no operator key (``HOOKSTREAM_ADMIN_TOKEN``) is set to ask with. A 404 or 422 raises the
    matching typed error; while the worker's partitions move (503) it asks again."""
    token = settings.admin_token
    if token is None:
        return None
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"}
    for _ in range(WORKER_TRIES):
        try:
            response = httpx.get(
                f"{url}{path}", params={"window": window}, headers=headers, timeout=WORKER_TIMEOUT_S
            )
        except httpx.TransportError:
            return None
        if response.status_code != 503:
            break
        time.sleep(pause_s)
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code == 200 and isinstance(body, dict):
        return body
    if response.status_code == 404:
        raise NotFoundError(str(body.get("message", "not found")))
    if response.status_code == 422:
        raise ValidationError(dict(body.get("fields", {})))
    message = body.get("message", response.text[:200]) if isinstance(body, dict) else ""
    raise HookstreamError(f"the worker at {url} answered {response.status_code}: {message}")
