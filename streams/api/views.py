"""The admin API's views: parse, call a service function, render. Nothing else.

Each view takes the `ApiContext` and an `ApiRequest` (already authenticated, JSON already
parsed) and returns a `Reply`; errors are raised typed and rendered in ``streams.api.errors``.
Blocking service calls (Kafka produce) run in a thread; reads of worker state (S6) are
awaited from whichever worker holds it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from typing import Any

import orjson

from streams.api.context import ApiContext, ApiRequest, Reply
from streams.api.errors import PayloadTooLargeApiError, TooManyRequestsError
from streams.api.openapi import build_openapi
from streams.api.recovery_views import ledger_of, progress_of
from streams.domain.models import Subscription, SubscriptionStatus
from streams.errors import ConfigError, NotFoundError, ValidationError
from streams.plain import plain
from streams.services import health as health_service
from streams.services import ingest, ledger, stats
from streams.services import subscriptions as service

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
_STATUSES = frozenset(s.value for s in SubscriptionStatus)
_STATES = frozenset(ledger.LISTED_STATES)


# --- query parsing -------------------------------------------------------------------------------


def _limit(query: dict[str, str]) -> int:
    text = query.get("limit", str(DEFAULT_LIMIT))
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise ValidationError({"limit": f"must be a whole number from 1 to {MAX_LIMIT}"})
    return int(text)


def _choice(query: dict[str, str], name: str, allowed: frozenset[str]) -> str | None:
    value = query.get(name)
    if value is not None and value not in allowed:
        raise ValidationError({name: f"must be one of {sorted(allowed)}"})
    return value


def _millis(query: dict[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not text.isdigit() or len(text) > 15:
        raise ValidationError({name: "must be Unix epoch milliseconds"})
    return int(text)


def _sort_key(sub: Subscription) -> tuple[str, int, str]:
    return (sub.tenant_id, sub.created_at, sub.id)


def _encode_cursor(sub: Subscription) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(_sort_key(sub)))).decode()


def _decode_cursor(text: str) -> tuple[str, int, str]:
    try:
        tenant, created, sub_id = orjson.loads(base64.urlsafe_b64decode(text.encode()))
        if isinstance(tenant, str) and isinstance(created, int) and isinstance(sub_id, str):
            return tenant, created, sub_id
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        pass
    raise ValidationError({"cursor": "is not a cursor this API returned"})


def _tenant_filter(req: ApiRequest) -> str | None:
    wanted = req.query.get("tenant_id")
    if req.principal.is_operator:
        return wanted
    if wanted is not None and wanted != req.principal.tenant_id:
        return "\x00"  # another tenant: an empty page, never a hint that it exists
    return req.principal.tenant_id


# --- subscriptions -------------------------------------------------------------------------------


async def list_subscriptions(ctx: ApiContext, req: ApiRequest) -> Reply:
    limit = _limit(req.query)
    status = _choice(req.query, "status", _STATUSES)
    cursor = req.query.get("cursor")
    after = _decode_cursor(cursor) if cursor else None
    found = service.list_subscriptions(
        ctx.settings, _tenant_filter(req), status, source=await ctx.ready_registry()
    )
    if after is not None:
        found = [s for s in found if _sort_key(s) > after]
    page = found[:limit]
    more = len(found) > limit
    return Reply(
        200,
        {
            "items": [service.public_view(s) for s in page],
            "next_cursor": _encode_cursor(page[-1]) if more and page else None,
        },
    )


async def create_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    data = dict(req.body)
    own = req.principal.tenant_id
    if own is not None and data.setdefault("tenant_id", own) != own:
        raise ValidationError({"tenant_id": "a tenant key creates for its own tenant only"})
    sub = await asyncio.to_thread(service.create_subscription, ctx.settings, data)
    await ctx.settled(sub.id, sub.updated_at)
    return Reply(201, service.public_view(sub, show_secret=True))


async def get_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub = await ctx.visible(req.principal, req.params["id"])
    view = service.public_view(sub)
    view["backfill"] = await progress_of(ctx, sub.id)
    return Reply(200, view)


async def update_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub_id = req.params["id"]
    source = await ctx.ready_registry()
    await ctx.visible(req.principal, sub_id)
    sub = await asyncio.to_thread(
        service.update_subscription, ctx.settings, sub_id, req.body, source=source
    )
    await ctx.settled(sub.id, sub.updated_at)
    return Reply(200, service.public_view(sub))


async def delete_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub_id = req.params["id"]
    source = await ctx.ready_registry()
    await ctx.visible(req.principal, sub_id)
    await asyncio.to_thread(service.remove_subscription, ctx.settings, sub_id, source=source)
    await ctx.settled(sub_id, None)
    return Reply(200, {"id": sub_id, "deleted": True})


async def disable_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    return await _transition(ctx, req, service.disable_subscription)


async def enable_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    return await _transition(ctx, req, service.enable_subscription)


async def _transition(ctx: ApiContext, req: ApiRequest, change: Any) -> Reply:
    sub_id = req.params["id"]
    source = await ctx.ready_registry()
    await ctx.visible(req.principal, sub_id)
    sub: Subscription = await asyncio.to_thread(change, ctx.settings, sub_id, source=source)
    await ctx.settled(sub.id, sub.updated_at)
    return Reply(200, service.public_view(sub))


async def rotate_secret(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub_id = req.params["id"]
    body = req.body or {}
    source = await ctx.ready_registry()
    await ctx.visible(req.principal, sub_id)
    grace = body.get("grace_s", service.DEFAULT_GRACE_S)
    sub, secret = await asyncio.to_thread(
        service.rotate_secret, ctx.settings, sub_id, grace_s=grace, source=source
    )
    await ctx.settled(sub.id, sub.updated_at)
    return Reply(200, {**service.public_view(sub), "secret": secret})


async def test_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub = await ctx.visible(req.principal, req.params["id"])
    result = await service.send_test(sub, ctx.transport)
    return Reply(200, plain(result))


async def subscription_deliveries(ctx: ApiContext, req: ApiRequest) -> Reply:
    """S6: a subscription's deliveries, newest first, by state, in cursor pages."""
    sub = await ctx.visible(req.principal, req.params["id"])
    state = _choice(req.query, "status", _STATES)
    limit = _limit(req.query)
    page = await ledger_of(ctx).deliveries(sub.id, state, req.query.get("cursor"), limit)
    return Reply(200, page)


# --- deliveries and dead letters ------------------------------------------------------------------


async def get_delivery(ctx: ApiContext, req: ApiRequest) -> Reply:
    found = await ledger.get_delivery(ledger_of(ctx), req.params["id"], req.principal.sees)
    return Reply(200, found)


async def list_dead_letters(ctx: ApiContext, req: ApiRequest) -> Reply:
    """S6: dead letters by subscription, reason and time, newest first, in cursor pages."""
    sub_id = req.query.get("subscription_id")
    if sub_id is not None:
        await ctx.visible(req.principal, sub_id)
    since, until = _millis(req.query, "since"), _millis(req.query, "until")
    page = await ledger_of(ctx).dead_letters(
        subscription_id=sub_id, tenant_id=_tenant_filter(req), reason=req.query.get("reason"),
        since_ms=since, until_ms=until, cursor=req.query.get("cursor"), limit=_limit(req.query),
    )  # fmt: skip
    return Reply(200, page)


# --- analytics (O2) -------------------------------------------------------------------------------


def _analytics(ctx: ApiContext) -> stats.AnalyticsSource:
    """The analytics agent's tables, read from whichever worker holds each subscription (S6:
    never a topic scan on a read path)."""
    store: stats.AnalyticsSource | None = getattr(ctx.app, "hookstream_analytics", None)
    if store is None:
        raise ConfigError("analytics", "this worker runs without the analytics agent")
    return store


async def subscription_stats(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub = await ctx.visible(req.principal, req.params["id"])
    found = await stats.subscription_stats(_analytics(ctx), sub, req.query.get("window"))
    return Reply(200, stats.subscription_answer(found))


async def tenant_stats(ctx: ApiContext, req: ApiRequest) -> Reply:
    tenant_id = req.params["id"]
    if not req.principal.sees(tenant_id):
        raise NotFoundError(f"tenant {tenant_id} not found")
    registry = await ctx.ready_registry()
    subs = service.list_subscriptions(ctx.settings, tenant_id, None, source=registry)
    if not subs and req.principal.is_operator:
        raise NotFoundError(f"tenant {tenant_id} has no subscriptions")
    found = await stats.tenant_stats(_analytics(ctx), tenant_id, subs, req.query.get("window"))
    return Reply(200, stats.tenant_answer(found))


# --- health (S4) ----------------------------------------------------------------------------------


async def subscription_health(ctx: ApiContext, req: ApiRequest) -> Reply:
    """S4: one subscription's health record, read from the health agent's table (S6), and its
    endpoint's breaker state."""
    sub = await ctx.visible(req.principal, req.params["id"])
    records = health_service.records_of(await ledger_of(ctx).health([sub.id]))
    breaker = _breaker_state(ctx, sub)
    return Reply(200, health_service.record_view(sub, records.get(sub.id), breaker))


async def health_summary(ctx: ApiContext, req: ApiRequest) -> Reply:
    """S4: counts per status, failing subscriptions, and each visible subscription's health."""
    registry = await ctx.ready_registry()
    subs = [s for s in registry.all() if req.principal.sees(s.tenant_id)]
    records = health_service.records_of(await ledger_of(ctx).health([s.id for s in subs]))
    body = health_service.summary(subs, records)
    body["subscriptions"] = [
        health_service.record_view(s, records.get(s.id), _breaker_state(ctx, s)) for s in subs
    ]
    return Reply(200, body)


def _breaker_state(ctx: ApiContext, sub: Subscription) -> str:
    """The breaker of the subscription's origin in the fleet's shared view (H8): the same on every
    worker, read from the breakers topic every worker follows (closed when it never tripped)."""
    pipeline = getattr(ctx.app, "hookstream_pipeline", None)
    dispatcher = getattr(pipeline, "dispatcher", None)
    if dispatcher is None:
        return "unknown"
    state: str = dispatcher.breaker_state(sub.url)
    return state


# --- ingest (F5, F6) ---------------------------------------------------------------------------


async def ingest_events(ctx: ApiContext, req: ApiRequest) -> Reply:
    """Accept one event or a batch for the caller's tenant; all or nothing."""
    body = orjson.dumps(req.body)
    now = time.time()
    try:
        events = ingest.parse_events(body, req.principal.tenant_id, ctx.settings, int(now * 1000))
    except ingest.PayloadTooLargeError as exc:
        raise PayloadTooLargeApiError(str(exc)) from exc
    producer = req.principal.key_id or "operator"
    throttled = ctx.ingest_limiter().admit(producer, len(events), now)
    if throttled is not None:
        raise TooManyRequestsError(
            f"over this producer's limit of {ctx.settings.ingest_rate:g} events/s",
            retry_after_s=throttled.retry_after_s,
        )
    await ingest.publish(ctx.settings, ctx.producer(), events)
    return Reply(202, {"accepted": len(events), "ids": [e.id for e in events]})


# --- the document -------------------------------------------------------------------------------


async def openapi_document(ctx: ApiContext, req: ApiRequest) -> Reply:
    del req
    return Reply(200, build_openapi(ctx.routes))
