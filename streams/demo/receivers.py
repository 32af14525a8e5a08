"""Demo receivers: small HTTP endpoints that behave like real customers' webhook handlers.

Each endpoint verifies every request's Standard Webhooks signature with its subscription's
secret (D3), counts distinct ``webhook-id`` values (D2), and answers according to its behaviour:
always 200, always 500, always 404, or 500 on the first attempts of each delivery then 200.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

from streams.domain.signing import verify


@dataclass
class Endpoint:
    """One receiver path and what it saw."""

    behaviour: str  # ok | fail | gone | flaky | notices
    secret: str = ""
    fail_first: int = 2
    requests: int = 0
    verified: int = 0
    bad_signatures: int = 0
    ids: Counter[str] = field(default_factory=Counter)
    delivered: set[str] = field(default_factory=set)
    bodies: list[bytes] = field(default_factory=list)  # kept only by the "notices" endpoint

    def status_for(self, webhook_id: str) -> int:
        if self.behaviour in ("ok", "notices"):
            return 200
        if self.behaviour == "fail":
            return 500
        if self.behaviour == "gone":
            return 404
        return 500 if self.ids[webhook_id] <= self.fail_first else 200


class DemoReceivers:
    """Demo endpoints on 127.0.0.1, each on a port of its own (as different customers' hosts
    would be: each is its own origin for the circuit breaker, H8), served at /<name>."""

    def __init__(self) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self._runner: web.AppRunner | None = None
        self.ports: dict[str, int] = {}

    async def add(self, name: str, behaviour: str) -> Endpoint:
        assert self._runner is not None, "start() first"
        endpoint = Endpoint(behaviour)
        self.endpoints[name] = endpoint
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.ports[name] = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return endpoint

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}/{name}"

    async def _handle(self, request: web.Request) -> web.Response:
        endpoint = self.endpoints.get(request.match_info["name"])
        if endpoint is None:
            return web.Response(status=404)
        body = await request.read()
        webhook_id = request.headers.get("webhook-id", "")
        endpoint.requests += 1
        endpoint.ids[webhook_id] += 1
        try:
            timestamp = int(request.headers.get("webhook-timestamp", "0"))
        except ValueError:
            timestamp = 0
        ok = bool(endpoint.secret) and verify(
            endpoint.secret,
            webhook_id,
            timestamp,
            body,
            request.headers.get("webhook-signature", ""),
            int(time.time()),
        )
        if not ok:
            endpoint.bad_signatures += 1
            return web.Response(status=401, text="bad signature")
        endpoint.verified += 1
        status = endpoint.status_for(webhook_id)
        if status == 200:
            endpoint.delivered.add(webhook_id)
        if endpoint.behaviour == "notices":
            endpoint.bodies.append(body)
        return web.Response(status=status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
