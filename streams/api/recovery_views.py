"""The admin API's re-enable and replay views (R1, R3), and backfill progress (R2).

- ``POST /v1/subscriptions/{id}/reenable``: 200 with the probe and the backfill job when the
  probe passed; **409** when it failed, with ``"error": "probe_failed"``, the subscription
  (still suspended, reason ``reenable_probe_failed``) and the probe's status and error in the
  body. 409 also answers a subscription that is not suspended, or one whose re-enable is
  already in progress. The request waits for the probe (at most the subscription's timeout).
- ``POST /v1/subscriptions/{id}/replay``: an archive time range, paced, or its count
  with ``dry_run``.
- ``POST /v1/deliveries/{id}/replay``: one delivery now; 409 if it already succeeded,
  unless ``confirm_duplicate``.
- ``POST /v1/dlq/replay``: dead letters of one subscription by reason and time.

Replays to a suspended or disabled subscription answer 409 naming the status.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from streams.api.context import ApiContext, ApiRequest, Reply
from streams.errors import ConfigError, HookstreamError, ValidationError
from streams.services import ledger, recovery, replay

log = logging.getLogger(__name__)


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValidationError({name: "must be a positive number"})
    return float(value)


def _millis(body: dict[str, Any], name: str, required: bool = False) -> int | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ValidationError({name: "is required (Unix epoch milliseconds)"})
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**15:
        raise ValidationError({name: "must be Unix epoch milliseconds"})
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ValidationError({name: "must be true or false"})
    return value


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ValidationError({name: "must be a string"})
    return value


def _rate(body: dict[str, Any]) -> float | None:
    rate = _number(body, "rate")
    if rate is not None and rate > 10_000:
        raise ValidationError({"rate": "must be at most 10000 per second"})
    return rate


def ledger_of(ctx: ApiContext) -> ledger.LedgerSource:
    """The ledger state, read from whichever worker holds each subscription (S6)."""
    source: ledger.LedgerSource | None = getattr(ctx.app, "hookstream_ledger", None)
    if source is None:
        raise ConfigError("ledger", "this worker runs without the ledger state")
    return source


async def progress_of(ctx: ApiContext, subscription_id: str) -> dict[str, Any] | None:
    """The subscription's backfill progress, or None (also when Kafka cannot say right now)."""
    try:
        return await asyncio.to_thread(recovery.backfill_progress, ctx.settings, subscription_id)
    except HookstreamError as exc:
        log.warning("backfill progress unavailable: %s", exc)
        return None


async def reenable_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub = await ctx.visible(req.principal, req.params["id"])
    rate = _rate(req.body or {})
    result = await recovery.reenable(
        ctx.settings, sub.id, ctx.transport, source=await ctx.ready_registry(), rate=rate
    )
    await ctx.settled(sub.id, result.subscription.updated_at)
    if not result.ok:
        message = f"the probe failed ({result.probe.reason}); the subscription stays suspended"
        return Reply(409, {"error": "probe_failed", "message": message, **result.view()})
    return Reply(200, result.view())


async def replay_subscription(ctx: ApiContext, req: ApiRequest) -> Reply:
    sub = await ctx.visible(req.principal, req.params["id"])
    body = req.body or {}
    since, until = _millis(body, "since", True), _millis(body, "until", True)
    assert since is not None and until is not None
    dry_run, rate = _flag(body, "dry_run"), _rate(body)
    source = await ctx.ready_registry()
    done = await asyncio.to_thread(
        replay.replay_range, ctx.settings, since, until, subscription_id=sub.id,
        dry_run=dry_run, rate=rate, source=source,
    )  # fmt: skip
    return Reply(200, done)


async def replay_delivery(ctx: ApiContext, req: ApiRequest) -> Reply:
    confirm = _flag(req.body or {}, "confirm_duplicate")
    source = await ctx.ready_registry()
    done = await replay.replay_delivery(
        ctx.settings, ledger_of(ctx), req.params["id"], confirm_duplicate=confirm,
        source=source, visible=req.principal.sees,
    )  # fmt: skip
    return Reply(200, done)


async def replay_dead_letters(ctx: ApiContext, req: ApiRequest) -> Reply:
    body = req.body or {}
    sub_id = _text(body, "subscription_id")
    if sub_id is None:
        raise ValidationError({"subscription_id": "is required"})
    sub = await ctx.visible(req.principal, sub_id)
    since, until = _millis(body, "since"), _millis(body, "until")
    dry_run, rate, reason = _flag(body, "dry_run"), _rate(body), _text(body, "reason")
    source = await ctx.ready_registry()
    done = await replay.replay_dead_letters(
        ctx.settings, ledger_of(ctx), sub.id, reason=reason, since_ms=since,
        until_ms=until, dry_run=dry_run, rate=rate, source=source,
    )  # fmt: skip
    return Reply(200, done)
