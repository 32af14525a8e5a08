"""The owner's portal as a worker component: `portal_component(app, settings)` (SPEC U1).

It registers one Faust web view per path under ``/portal``; each request goes through
`Portal.handle` (session, CSRF, headers, errors) and then the page or action of the route.
The portal needs the admin API component (``streams.api``) registered before it: it reads and
acts through the API's context and views.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from faust.web import View
from multidict import CIMultiDict

from streams.portal import actions as a
from streams.portal import pages as p
from streams.portal.web import PREFIX, STATIC_DIR, Handler, Portal
from streams.settings import Settings

__all__ = ["ROUTES", "portal_component"]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    auth: bool = True


_SUB = f"{PREFIX}/subscriptions/{{id}}"
ROUTES: tuple[Route, ...] = (
    Route("get", PREFIX, p.home),
    Route("get", f"{PREFIX}/signin", p.signin_form, auth=False),
    Route("post", f"{PREFIX}/signin", p.signin, auth=False),
    Route("post", f"{PREFIX}/signout", p.signout),
    Route("get", f"{PREFIX}/link", p.open_link, auth=False),
    Route("get", f"{PREFIX}/subscriptions", p.subscriptions),
    Route("get", _SUB, p.subscription),
    Route("get", f"{_SUB}/deliveries", p.deliveries),
    Route("get", f"{_SUB}/dead-letters", p.dead_letters),
    Route("get", f"{PREFIX}/deliveries/{{id}}", p.delivery),
    Route("post", f"{_SUB}/reenable", a.reenable),
    Route("post", f"{_SUB}/test", a.send_test),
    Route("post", f"{_SUB}/rotate-secret", a.rotate_secret),
    Route("post", f"{_SUB}/disable", a.disable),
    Route("post", f"{_SUB}/enable", a.enable),
    Route("post", f"{_SUB}/replay", a.replay_range),
    Route("post", f"{_SUB}/dead-letters/replay", a.replay_dead_letters),
    Route("post", f"{PREFIX}/deliveries/{{id}}/replay", a.replay_delivery),
)

ViewMethod = Callable[..., Awaitable[Any]]


def _method(portal: Portal, route: Route) -> ViewMethod:
    async def handle(self: View, request: Any, **_params: Any) -> Any:
        status, content_type, body, headers = await portal.handle(
            route.handler, request, auth=route.auth
        )
        return web.Response(
            status=status, body=body, content_type=content_type, headers=CIMultiDict(headers)
        )

    handle.__name__ = route.handler.__name__
    return handle


def _stylesheet() -> type[View]:
    css = (STATIC_DIR / "portal.css").read_bytes()

    async def get(self: View, request: Any) -> Any:
        headers = {"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"}
        return web.Response(body=css, content_type="text/css", headers=headers)

    return type("PortalCss", (View,), {"get": get})


def portal_component(app: Any, settings: Settings) -> None:
    """Faust component: serve the owner's portal under /portal."""
    portal = Portal(app, settings)
    app.hookstream_portal = portal
    by_path: dict[str, dict[str, ViewMethod]] = {}
    for route in ROUTES:
        by_path.setdefault(route.path, {})[route.method] = _method(portal, route)
    for index, (path, methods) in enumerate(by_path.items()):
        view = type(f"Portal{index}", (View,), dict(methods))
        app.page(path, name=f"hookstream-portal:{path}")(view)
    app.page(f"{PREFIX}/static/portal.css", name="hookstream-portal:css")(_stylesheet())
