"""A local webhook endpoint for trying hookstream by hand: it prints every delivery it gets.

`hookstream receiver` runs it. Each POST is answered with the chosen status and printed as one
line: the path, ``webhook-id``, the event type and attempt from the body, and whether the
Standard Webhooks signature verified against ``--secret`` (``unchecked`` without one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
from aiohttp import web

from streams.domain.signing import verify


def describe(headers: dict[str, str], body: bytes, secret: str | None, now_s: int) -> str:
    """One printable line about a delivery: its id, type, attempt and signature check."""
    webhook_id = headers.get("webhook-id", "-")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    kind = doc.get("type", "?") if isinstance(doc, dict) else "?"
    attempt = doc.get("attempt", "?") if isinstance(doc, dict) else "?"
    if secret is None:
        check = "unchecked"
    else:
        try:
            timestamp = int(headers.get("webhook-timestamp", "0"))
        except ValueError:
            timestamp = 0
        signature = headers.get("webhook-signature", "")
        ok = verify(secret, webhook_id, timestamp, body, signature, now_s)
        check = "verified" if ok else "BAD"
    return f"webhook-id={webhook_id} type={kind} attempt={attempt} signature={check}"


async def serve(
    host: str, port: int, status: int, secret: str | None, say: Callable[[str], None]
) -> None:
    """Answer every POST with ``status`` and print it, until cancelled."""

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        line = describe(dict(request.headers), body, secret, int(time.time()))
        say(f"POST {request.path} {line} -> {status}")
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    say(f"receiver listening on http://{host}:{port}/ (answers {status}); Ctrl-C stops it")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
