"""The admin API as a worker component: `api_component(app, settings)` (SPEC S2, §4).

It registers one Faust web view per path of the route table (``streams.api.routes``) and a
service that follows the `apikeys` topic (tenant keys) and, when the worker runs no pipeline,
the `subscriptions` topic. Every request goes through `dispatch`: authenticate, parse the JSON
body, call the view, and render typed errors in one place (``streams.api.errors``).

Only the stats views read state that lives on one worker (the analytics tables); the analytics
store (``streams.agents.analytics``) asks the owner of each subscription's partition, as faust's
``table_route`` would. Every other view reads state every worker holds (the registries) or Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from faust.web import View
from mode import Service

from streams.adapters.registry import ApiKeyRegistry, SubscriptionRegistry
from streams.api.context import ApiContext, ApiRequest
from streams.api.errors import (
    BadRequestError,
    PayloadTooLargeApiError,
    Rendered,
    UnsupportedMediaTypeError,
    http_error_body,
    render,
)
from streams.api.routes import ROUTES, Route
from streams.errors import HookstreamError
from streams.services.auth import OPERATOR, Principal, authenticate
from streams.settings import Settings

log = logging.getLogger(__name__)

__all__ = ["api_component", "dispatch"]


def _is_json(content_type: str) -> bool:
    """``application/json`` or a structured ``+json`` type, any parameters (charset) aside."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _body(route: Route, request: Any) -> Any:
    if route.request is None:
        return None
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadTooLargeApiError(exc.text or "the request body is too large") from None
    if not raw.strip():
        if route.request_required:
            raise BadRequestError("a JSON object body is required")
        return None
    content_type = request.headers.get("Content-Type", "")
    if not _is_json(content_type):
        shown = content_type or "no Content-Type"
        raise UnsupportedMediaTypeError(f"the body must be application/json, not {shown}")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequestError("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    return body


def _principal(ctx: ApiContext, route: Route, request: Any) -> Principal:
    if not route.auth:
        return OPERATOR  # the route reads nothing tenant-specific
    token = ctx.settings.admin_token
    admin = None if token is None else token.get_secret_value()
    return authenticate(request.headers.get("Authorization"), admin, ctx.keys)


async def dispatch(ctx: ApiContext, route: Route, request: Any) -> Rendered:
    """Handle one request for ``route``: (status, JSON body, headers)."""
    try:
        principal = _principal(ctx, route, request)
        parsed = ApiRequest(
            principal=principal,
            params=dict(request.match_info),
            query=dict(request.query),
            body=await _body(route, request),
        )
        reply = await route.handler(ctx, parsed)
    except HookstreamError as exc:
        return render(exc)
    return reply.status, reply.body, {}


ViewMethod = Callable[..., Awaitable[Any]]


def _method(ctx: ApiContext, route: Route) -> ViewMethod:
    async def handle(self: View, request: Any, **_params: Any) -> Any:
        status, body, headers = await dispatch(ctx, route, request)
        return self.json(body, status=status, headers=headers)

    handle.__name__ = route.operation_id
    return handle


def _views(ctx: ApiContext) -> dict[str, type[View]]:
    """One view class per path, with a method per route on that path."""
    by_path: dict[str, dict[str, ViewMethod]] = {}
    for route in ctx.routes:
        by_path.setdefault(route.path, {})[route.method] = _method(ctx, route)
    return {
        path: type(f"Api{index}", (View,), dict(methods))
        for index, (path, methods) in enumerate(by_path.items())
    }


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Answer the web server's own errors (404 route, 405, 413...) in the API's JSON shape."""
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = exc.headers.get("Allow")
        body = http_error_body(exc.status, _message(exc, request, allow))
        headers = {"Allow": allow} if allow is not None else {}
        return web.json_response(body, status=exc.status, headers=headers)
    return response


def _message(exc: web.HTTPException, request: web.Request, allow: str | None) -> str:
    if exc.status == 404:
        return f"no route for {request.path}"
    if exc.status == 405:
        return f"{request.method} is not allowed on {request.path} (allowed: {allow or 'none'})"
    text = exc.text or ""
    return text if text and not text.startswith(f"{exc.status}:") else exc.reason


async def _follow(view: ApiKeyRegistry | SubscriptionRegistry, stop: asyncio.Event) -> None:
    try:
        await view.run(stop)
    except HookstreamError as exc:
        log.error("admin API cannot follow a topic: %s", exc)


def api_component(app: Any, settings: Settings) -> None:
    """Faust component: serve the admin API under /v1 and /openapi.json."""
    ctx = ApiContext(settings=settings, app=app, routes=ROUTES)
    app.hookstream_api = ctx
    app.web.web_app.middlewares.append(json_errors)
    for path, view in _views(ctx).items():
        app.page(path, name=f"hookstream-api:{path}")(view)

    class ApiService(Service):
        """Follows the apikeys topic (and subscriptions, with no pipeline) while serving."""

        _stop: asyncio.Event
        _followers: list[asyncio.Task[None]]

        async def on_start(self) -> None:
            self._stop = asyncio.Event()
            ctx.keys = ApiKeyRegistry(settings)
            views: list[ApiKeyRegistry | SubscriptionRegistry] = [ctx.keys]
            if getattr(app, "hookstream_pipeline", None) is None:
                ctx.own_registry = SubscriptionRegistry(settings)
                views.append(ctx.own_registry)
            self._followers = [asyncio.create_task(_follow(view, self._stop)) for view in views]

        async def on_stop(self) -> None:
            self._stop.set()
            for task in self._followers:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(task, 10)
            await ctx.aclose()

    app.service(ApiService)
