"""The portal's pages (SPEC U1, U2): sign-in, the notice link, and what a tenant can read.

Every read goes through the admin API's own views (``streams.api.views``), with the signed-in
principal, so the pages see exactly what the API shows that key: the same service functions,
the same tenant isolation (another tenant's object is a 404), the same tables when the reads
move onto them. A link session (`Session.scope`) sees its one subscription and nothing else.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote, urlencode

from streams.api import views as v
from streams.api.context import ApiRequest
from streams.domain.models import DeliveryState, Subscription
from streams.domain.portal_tokens import TokenError, verify_link
from streams.errors import NotFoundError, UnauthorizedError, ValidationError
from streams.plain import plain
from streams.portal.charts import Series, line_chart
from streams.portal.web import COOKIE, PRE_COOKIE, PREFIX, Call, Page, Portal, Redirect
from streams.services import stats
from streams.services.auth import OPERATOR, authenticate
from streams.services.stats_series import hourly

PAGE_SIZE: Final = 25
STATES: Final = tuple(s.value for s in DeliveryState)


def sub_path(sub_id: str, tail: str = "") -> str:
    return f"{PREFIX}/subscriptions/{quote(sub_id, safe='')}{tail}"


def request(
    call: Call, params: dict[str, str] | None = None, query: dict[str, str] | None = None
) -> ApiRequest:
    return ApiRequest(principal=call.principal, params=params or {}, query=query or {})


async def visible(portal: Portal, call: Call, sub_id: str) -> Subscription:
    """The subscription as the API would show it to this session, or NotFoundError."""
    session = call.session
    if session is not None and session.scope is not None and session.scope != sub_id:
        raise NotFoundError(f"subscription {sub_id} not found")
    return await portal.ctx.visible(call.principal, sub_id)


# --- signing in --------------------------------------------------------------------------------


async def home(portal: Portal, call: Call) -> Page | Redirect:
    del portal, call
    return Redirect(f"{PREFIX}/subscriptions")


async def signin_form(portal: Portal, call: Call) -> Page | Redirect:
    del portal
    if call.session is not None:
        return Redirect(f"{PREFIX}/subscriptions")
    return Page("signin.html", {"error": None})


async def signin(portal: Portal, call: Call) -> Page | Redirect:
    key = call.form.get("key", "").strip()
    token = portal.settings.admin_token
    admin = None if token is None else token.get_secret_value()
    try:
        principal = authenticate(f"Bearer {key}", admin, portal.ctx.keys)
    except UnauthorizedError:
        return Page("signin.html", {"error": "That key is not valid."}, 401)
    key_id = portal.operator_fingerprint() if principal.is_operator else principal.key_id
    session = portal.new_session(principal.tenant_id, key_id, None, None)
    cookies = (
        portal.session_cookie(session, call.secure),
        portal.cookie(PRE_COOKIE, "", 0, call.secure),
    )
    return Redirect(f"{PREFIX}/subscriptions", cookies)


async def signout(portal: Portal, call: Call) -> Page | Redirect:
    return Redirect(f"{PREFIX}/signin", (portal.cookie(COOKIE, "", 0, call.secure),))


async def open_link(portal: Portal, call: Call) -> Page | Redirect:
    """A notice's signed link: a session scoped to one subscription, ending with the link."""
    refused = {"title": "Link refused"}
    if portal.link_key is None:
        return Page("error.html", {**refused, "message": "Links are not configured."}, 403)
    try:
        sub_id, expires = verify_link(portal.link_key, call.query.get("token", ""), portal.clock())
    except TokenError as exc:
        message = (
            "This link has expired. Sign in with your key, or use the link of a newer notice."
            if exc.reason == "expired"
            else "This link is not valid."
        )
        return Page("error.html", {**refused, "message": message}, 403)
    sub = await portal.ctx.visible(OPERATOR, sub_id)
    session = portal.new_session(sub.tenant_id, None, sub.id, expires)
    # A page, not a redirect: the browser then navigates from this site, so the SameSite=Strict
    # cookie goes along even when the link was opened from a web mail client.
    context = {"target": sub_path(sub.id), "name": sub.name}
    cookie = portal.session_cookie(session, call.secure)
    return Page("link.html", context, cookies=(cookie,), refresh_s=0)


# --- subscriptions -----------------------------------------------------------------------------


async def subscriptions(portal: Portal, call: Call) -> Page | Redirect:
    ctx = portal.ctx
    query = {"limit": str(PAGE_SIZE)}
    for name in ("status", "cursor"):
        if call.query.get(name):
            query[name] = call.query[name]
    listed = (await v.list_subscriptions(ctx, request(call, query=query))).body
    health = (await v.health_summary(ctx, request(call))).body
    by_id = {h["subscription_id"]: h for h in health["subscriptions"]}
    scope = call.session.scope if call.session else None
    rows = [
        {**item, "health": by_id.get(item["id"])}
        for item in listed["items"]
        if scope is None or item["id"] == scope
    ]
    more = None
    if listed["next_cursor"]:
        more = f"{PREFIX}/subscriptions?" + urlencode({**query, "cursor": listed["next_cursor"]})
    context = {"rows": rows, "status": call.query.get("status", ""), "more": more,
               "summary": None if scope else health}  # fmt: skip
    return Page("subscriptions.html", context)


def _analytics(portal: Portal) -> stats.AnalyticsSource:
    store: stats.AnalyticsSource | None = getattr(portal.app, "hookstream_analytics", None)
    return stats.ScannedAnalytics(portal.settings) if store is None else store


async def _charts(portal: Portal, sub: Subscription, window: str | None) -> dict[str, Any]:
    name, points = await hourly(_analytics(portal), sub, window)
    starts = [p.start for p in points]
    latency = [
        Series(label, [getattr(p.stats.latency_ms, label) for p in points])
        for label in ("p50", "p95", "p99")
    ]
    duration = [
        Series(label, [getattr(p.stats.attempt_duration_ms, label) for p in points])
        for label in ("p50", "p95", "p99")
    ]
    rates = [p.attempt_success_rate for p in points]
    success = [Series("success", [None if r is None else r * 100 for r in rates])]
    return {
        "window": name,
        "points": points,
        "latency_chart": line_chart("lat", "Delivery latency by hour (ms)",
                                    "p50, p95 and p99 of publish-to-delivery latency of live "
                                    "deliveries, one point per hour.",
                                    starts, latency, unit=" ms"),
        "duration_chart": line_chart("dur", "Endpoint response time by hour (ms)",
                                     "p50, p95 and p99 duration of every attempt, one point per "
                                     "hour.", starts, duration, unit=" ms"),
        "success_chart": line_chart("ok", "Successful attempts by hour (%)",
                                    "Share of attempts that succeeded, one point per hour.",
                                    starts, success, unit="%", top=100.0),
    }  # fmt: skip


async def subscription(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    ctx, params = portal.ctx, {"id": sub.id}
    view = (await v.get_subscription(ctx, request(call, params))).body
    health = (await v.subscription_health(ctx, request(call, params))).body
    window = call.query.get("window", "24h")
    report = await stats.subscription_stats(_analytics(portal), sub, window)
    backfill = view.get("backfill")
    running = backfill is not None and backfill.get("state") not in ("finished", "failed")
    context = {"sub": view, "health": health, "stats": plain(report.stats),
               **(await _charts(portal, sub, window))}  # fmt: skip
    return Page("subscription.html", context, refresh_s=5 if running else None)


def _moment(query: dict[str, str], name: str) -> int | None:
    """A ``datetime-local`` field (UTC) as epoch ms; ValidationError names the field."""
    text = query.get(name, "").strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError({name: "must be a date and time, YYYY-MM-DDTHH:MM (UTC)"}) from None
    return int(moment.replace(tzinfo=moment.tzinfo or UTC).timestamp() * 1000)


def _whole(query: dict[str, str], name: str, default: int, top: int) -> int:
    text = query.get(name, str(default))
    if not text.isdigit() or not 1 <= int(text) <= top:
        raise ValidationError({name: f"must be a whole number from 1 to {top}"})
    return int(text)


async def deliveries(portal: Portal, call: Call) -> Page | Redirect:
    """A subscription's deliveries, newest first, by state, in the API's cursor pages (S6)."""
    sub = await visible(portal, call, call.params["id"])
    state = call.query.get("state") or None
    if state is not None and state not in STATES:
        raise ValidationError({"state": f"must be one of {', '.join(STATES)}"})
    size = _whole(call.query, "size", PAGE_SIZE, 100)
    query = {"limit": str(size), **({"status": state} if state else {})}
    if call.query.get("cursor"):
        query["cursor"] = call.query["cursor"]
    found = (await v.subscription_deliveries(portal.ctx, request(call, {"id": sub.id}, query))).body
    keep = {k: call.query[k] for k in ("state", "size") if call.query.get(k)}
    link = sub_path(sub.id, "/deliveries?")
    after = found.get("next_cursor")
    context = {
        "sub": sub, "items": found["items"], "states": STATES, "filters": keep,
        "newest": link + urlencode(keep) if call.query.get("cursor") else None,
        "older": link + urlencode({**keep, "cursor": after}) if after else None,
    }  # fmt: skip
    return Page("deliveries.html", context)


async def delivery(portal: Portal, call: Call) -> Page | Redirect:
    found = (await v.get_delivery(portal.ctx, request(call, {"id": call.params["id"]}))).body
    summary = found["summary"]
    sub = await visible(portal, call, summary["subscription_id"])
    return Page("delivery.html", {"sub": sub, "summary": summary, "attempts": found["attempts"]})


async def dead_letters(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    query = {"subscription_id": sub.id, "limit": "500"}
    if call.query.get("reason"):
        query["reason"] = call.query["reason"]
    items = (await v.list_dead_letters(portal.ctx, request(call, query=query))).body["items"]
    context = {"sub": sub, "items": list(reversed(items)), "reason": call.query.get("reason", "")}
    return Page("dead_letters.html", context)
