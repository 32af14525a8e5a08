"""The portal's HTTP glue: sessions from cookies, CSRF on every form, headers, errors (U4).

Every request goes through `Portal.handle`: read the session cookie (signed, stateless, so any
worker accepts it), send a visitor without one to the sign-in page, refuse a POST whose form
lacks the session's CSRF token (403), call the page or action, and render typed errors as pages
with the API's statuses (404 for another tenant's object, 409, 422, 503). Every answer carries a
strict Content-Security-Policy (no script at all), ``no-store`` and ``no-referrer`` (the one
URL with a secret in it, the notice link, must not leak through a Referer).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jinja2 import Environment, PackageLoader, select_autoescape

from streams.api.context import ApiContext
from streams.domain.portal_tokens import (
    Session,
    TokenError,
    csrf_ok,
    csrf_token,
    derive_key,
    open_session,
    read_session,
    sign,
    unsign,
)
from streams.errors import ApiError, ConflictError, HookstreamError, NotFoundError, ValidationError
from streams.services.auth import Principal
from streams.services.portal_links import link_key, master_secret
from streams.settings import Settings

log = logging.getLogger(__name__)

PREFIX: Final = "/portal"
COOKIE: Final = "hookstream_portal"
PRE_COOKIE: Final = "hookstream_portal_pre"
#: How long a sign-in lasts; a link's session ends with the link, if that is sooner.
SESSION_TTL_S: Final = 8 * 3600
_PRE_DOMAIN: Final = "hookstream.portal.signin.v1"
CSP: Final = (
    "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
STATIC_DIR: Final = Path(__file__).parent / "static"


@dataclass(frozen=True, slots=True)
class Call:
    """One request as a page sees it: who, the path parameters, the query and the form."""

    session: Session | None
    params: dict[str, str]
    query: dict[str, str]
    form: dict[str, str]
    csrf: str
    secure: bool

    @property
    def principal(self) -> Principal:
        assert self.session is not None
        session = self.session
        key_id = None if session.is_operator else session.key_id
        return Principal(tenant_id=session.tenant_id, key_id=key_id)


@dataclass(frozen=True, slots=True)
class Page:
    template: str
    context: dict[str, Any]
    status: int = 200
    refresh_s: int | None = None  # re-load the page (a running backfill), without script
    cookies: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Redirect:
    location: str
    cookies: tuple[str, ...] = field(default=())


Answer = Page | Redirect
#: (status, content type, body, headers) of one answer.
Rendered = tuple[int, str, bytes, list[tuple[str, str]]]
Handler = Callable[["Portal", Call], Awaitable[Answer]]


def _when(ms: int | None) -> str:
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pct(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def _millis(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} ms"


def templates() -> Environment:
    env = Environment(
        loader=PackageLoader("streams.portal", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, pct=_pct, ms=_millis)
    env.globals["prefix"] = PREFIX
    return env


class Portal:
    """What the portal's pages share in one worker: the API's context, keys, templates."""

    def __init__(self, app: Any, settings: Settings, clock: Callable[[], float] = time.time):
        self.app = app
        self.settings = settings
        self.clock = clock
        master = master_secret(settings)
        if master is None:
            log.warning("portal: no HOOKSTREAM_SECRET_KEY or ADMIN_TOKEN; sessions are per worker")
            master = secrets.token_bytes(32)
        self.session_key = derive_key(master, "session")
        self.link_key = link_key(settings)
        self.env = templates()

    def operator_fingerprint(self) -> str | None:
        """A short, keyed digest of the operator key in force (None when there is none)."""
        token = self.settings.admin_token
        if token is None or not token.get_secret_value():
            return None
        digest = hmac.new(self.session_key, token.get_secret_value().encode(), hashlib.sha256)
        return "operator:" + digest.hexdigest()[:32]

    @property
    def ctx(self) -> ApiContext:
        ctx: ApiContext = self.app.hookstream_api
        return ctx

    # --- cookies ----------------------------------------------------------------------------

    def cookie(self, name: str, value: str, max_age: int, secure: bool) -> str:
        flags = f"Path={PREFIX}; Max-Age={max_age}; HttpOnly; SameSite=Strict"
        return f"{name}={value}; {flags}" + ("; Secure" if secure else "")

    def session_cookie(self, session: Session, secure: bool) -> str:
        max_age = max(0, session.expires_at - int(self.clock()))
        return self.cookie(COOKIE, open_session(self.session_key, session), max_age, secure)

    def new_session(
        self, tenant_id: str | None, key_id: str | None, scope: str | None, until: int | None
    ) -> Session:
        expires = int(self.clock()) + SESSION_TTL_S
        return Session(
            tenant_id=tenant_id,
            key_id=key_id,
            scope=scope,
            expires_at=expires if until is None else min(expires, until),
            nonce=secrets.token_urlsafe(18),
        )

    def _session(self, request: Any) -> Session | None:
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            session = read_session(self.session_key, raw, self.clock())
        except TokenError:
            return None
        if session.is_operator:
            # an operator session names the operator key it was opened with: it ends when
            # that key changes or is removed
            return session if session.key_id == self.operator_fingerprint() else None
        if session.key_id is not None:
            keys = self.ctx.keys
            if keys is None or keys.get(session.key_id) is None:
                return None  # the tenant key was revoked: so is its session
        return session

    def _pre_nonce(self, request: Any) -> tuple[str, str | None]:
        """The nonce that protects the sign-in form, and a cookie to set when it is new."""
        raw = request.cookies.get(PRE_COOKIE)
        if raw:
            try:
                nonce = unsign(self.session_key, _PRE_DOMAIN, raw, self.clock()).get("n")
                if isinstance(nonce, str):
                    return nonce, None
            except TokenError:
                pass
        nonce = secrets.token_urlsafe(18)
        value = sign(self.session_key, _PRE_DOMAIN, {"n": nonce, "exp": int(self.clock()) + 3600})
        return nonce, self.cookie(PRE_COOKIE, value, 3600, _secure(request, self.settings))

    # --- one request -----------------------------------------------------------------------------

    async def handle(self, handler: Handler, request: Any, *, auth: bool) -> Rendered:
        """(status, content type, body, headers) of one request."""
        secure = _secure(request, self.settings)
        session = self._session(request)
        set_cookies: list[str] = []
        if session is None:
            nonce, pre = self._pre_nonce(request)
            if pre is not None:
                set_cookies.append(pre)
        else:
            nonce = session.nonce
        if auth and session is None:
            return self._redirect(Redirect(f"{PREFIX}/signin"), set_cookies)
        form: dict[str, str] = {}
        if request.method == "POST":
            posted = await request.post()
            form = {k: v for k, v in posted.items() if isinstance(v, str)}
            if not csrf_ok(self.session_key, nonce, form.get("csrf")):
                page = Page("error.html", {"title": "Refused", "message": _CSRF_REFUSED}, 403)
                return self._render(page, session, nonce, set_cookies)
        token = csrf_token(self.session_key, nonce)
        call = Call(session, dict(request.match_info), dict(request.query), form, token, secure)
        try:
            answer = await handler(self, call)
        except HookstreamError as exc:
            answer = _error_page(exc)
        if isinstance(answer, Redirect):
            return self._redirect(answer, set_cookies)
        return self._render(answer, session, nonce, [*set_cookies, *answer.cookies])

    def _render(
        self, page: Page, session: Session | None, nonce: str, cookies: list[str]
    ) -> Rendered:
        context = {
            "session": session,
            "csrf": csrf_token(self.session_key, nonce),
            "refresh_s": page.refresh_s,
            **page.context,
        }
        body = self.env.get_template(page.template).render(context)
        return page.status, "text/html", body.encode(), self._headers(cookies)

    def _redirect(self, answer: Redirect, cookies: list[str]) -> Rendered:
        headers = [*self._headers([*cookies, *answer.cookies]), ("Location", answer.location)]
        return 303, "text/plain", b"", headers

    def _headers(self, cookies: list[str]) -> list[tuple[str, str]]:
        return [*SECURITY_HEADERS.items(), *(("Set-Cookie", c) for c in cookies)]


_CSRF_REFUSED = (
    "This form was sent without its security token (CSRF), or with one from another session. "
    "Nothing was changed. Go back, reload the page and try again."
)


def _secure(request: Any, settings: Settings) -> bool:
    """Served over TLS: directly, or behind a proxy that the portal's public URL says is TLS."""
    public = settings.portal_url or ""
    return bool(getattr(request, "secure", False)) or public.startswith("https://")


def _error_page(exc: HookstreamError) -> Page:
    if isinstance(exc, NotFoundError):
        return Page("error.html", {"title": "Not found", "message": str(exc)}, 404)
    if isinstance(exc, ConflictError):
        return Page("error.html", {"title": "Not possible now", "message": str(exc)}, 409)
    if isinstance(exc, ValidationError):
        fields = "; ".join(f"{name}: {text}" for name, text in exc.fields.items())
        return Page("error.html", {"title": "Check the form", "message": fields}, 422)
    if isinstance(exc, ApiError):
        return Page("error.html", {"title": "Error", "message": exc.message}, exc.status)
    log.warning("portal: %s", exc)
    return Page("error.html", {"title": "Unavailable", "message": str(exc)}, 503)
