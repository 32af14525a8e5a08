"""The portal's actions (SPEC U3): every button posts a form (with its CSRF token) that calls
the admin API's own view for the same action, which calls the same service function as the CLI:
re-enable behind the probe (R1), replay a delivery, a time range or dead letters (R3), send a
test event (S3), rotate the secret (S5), disable and enable (R5).

Confirmations are the API's: replaying a delivery that already succeeded is refused (409) and
the page offers to confirm it; a time range and dead letters are counted first (``dry_run``)
and sent only when the owner confirms the count. The new secret of a rotation is shown once,
on the answer to the POST, and never put in a URL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from streams.api import recovery_views as rv
from streams.api import views as v
from streams.api.context import ApiRequest, Reply
from streams.errors import ConflictError, ValidationError
from streams.portal.pages import sub_path, visible
from streams.portal.web import PREFIX, Call, Page, Portal, Redirect


def _body(call: Call, sub_id: str, body: dict[str, Any]) -> ApiRequest:
    return ApiRequest(principal=call.principal, params={"id": sub_id}, query={}, body=body)


def _result(call: Call, title: str, sub: Any, reply: Reply, **extra: Any) -> Page:
    context = {"title": title, "sub_id": sub.id, "sub_name": sub.name, "result": reply.body,
               "status": reply.status, **extra}  # fmt: skip
    return Page("result.html", context, 200 if reply.status < 400 else reply.status)


async def reenable(portal: Portal, call: Call) -> Page | Redirect:
    """R1: one probe; on success the subscription is active and its backfill starts."""
    sub = await visible(portal, call, call.params["id"])
    reply = await rv.reenable_subscription(portal.ctx, _body(call, sub.id, {}))
    title = "Re-enabled" if reply.status == 200 else "The probe failed"
    return _result(call, title, sub, reply, kind="reenable")


async def send_test(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    reply = await v.test_subscription(portal.ctx, _body(call, sub.id, {}))
    return _result(call, "Test event sent", sub, reply, kind="test")


async def rotate_secret(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    reply = await v.rotate_secret(portal.ctx, _body(call, sub.id, {}))
    return _result(call, "New signing secret", sub, reply, kind="rotate")


async def disable(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    await v.disable_subscription(portal.ctx, _body(call, sub.id, {}))
    return Redirect(sub_path(sub.id))


async def enable(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    await v.enable_subscription(portal.ctx, _body(call, sub.id, {}))
    return Redirect(sub_path(sub.id))


def _confirmed(call: Call) -> bool:
    return call.form.get("confirm") == "yes"


async def replay_delivery(portal: Portal, call: Call) -> Page | Redirect:
    """R3: 409 with a confirm button when the delivery already succeeded."""
    delivery_id = call.params["id"]
    found = await v.get_delivery(portal.ctx, _body(call, delivery_id, {}))
    sub = await visible(portal, call, found.body["summary"]["subscription_id"])
    body = {"confirm_duplicate": _confirmed(call)}
    try:
        reply = await rv.replay_delivery(portal.ctx, _body(call, delivery_id, body))
    except ConflictError as exc:
        if "confirm_duplicate" not in str(exc):
            raise
        context = {"title": "Already delivered", "message": str(exc), "sub_id": sub.id,
                   "action": f"{PREFIX}/deliveries/{quote(delivery_id, safe='')}/replay",
                   "fields": {}, "confirm_label": "Replay it again anyway"}  # fmt: skip
        return Page("confirm.html", context, 409)
    return _result(call, "Delivery replayed", sub, reply, kind="replay")


def _millis(form: dict[str, str], name: str, required: bool) -> int | None:
    text = form.get(name, "").strip()
    if not text:
        if required:
            raise ValidationError({name: "is required"})
        return None
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError({name: "must be a date and time, YYYY-MM-DDTHH:MM (UTC)"}) from None
    return int(moment.replace(tzinfo=moment.tzinfo or UTC).timestamp() * 1000)


async def _counted(
    portal: Portal, call: Call, sub: Any, handler: Any, body: dict[str, Any], what: str
) -> Page:
    """Count first (dry run) and ask; send when the owner confirms the count."""
    if _confirmed(call):
        reply = await handler(portal.ctx, _body(call, sub.id, {**body, "dry_run": False}))
        return _result(call, f"{what} replaying", sub, reply, kind="replay")
    reply = await handler(portal.ctx, _body(call, sub.id, {**body, "dry_run": True}))
    count = reply.body.get("events", reply.body.get("dead_letters", 0))
    fields = {k: str(val) for k, val in body.items() if val is not None and k != "subscription_id"}
    context = {"title": f"Replay {what.lower()}?", "sub_id": sub.id, "fields": fields,
               "message": f"{count} to send again, paced on the backfill lane.",
               "action": "", "confirm_label": "Replay them"}  # fmt: skip
    return Page("confirm.html", context, 200)


async def replay_range(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    since = _millis(call.form, "since", True)
    until = _millis(call.form, "until", True)
    body = {"since": since, "until": until}
    page = await _counted(portal, call, sub, rv.replay_subscription, body, "Time range")
    return _with_action(page, sub_path(sub.id, "/replay"))


async def replay_dead_letters(portal: Portal, call: Call) -> Page | Redirect:
    sub = await visible(portal, call, call.params["id"])
    reason = call.form.get("reason", "").strip() or None
    body = {"subscription_id": sub.id, "reason": reason,
            "since": _millis(call.form, "since", False),
            "until": _millis(call.form, "until", False)}  # fmt: skip
    page = await _counted(portal, call, sub, _dlq, body, "Dead letters")
    return _with_action(page, sub_path(sub.id, "/dead-letters/replay"))


async def _dlq(ctx: Any, req: ApiRequest) -> Reply:
    """The dead-letter replay reads its subscription from the body, not the path."""
    return await rv.replay_dead_letters(ctx, req)


def _with_action(page: Page, action: str) -> Page:
    if page.template != "confirm.html":
        return page
    return Page(page.template, {**page.context, "action": action}, page.status)
