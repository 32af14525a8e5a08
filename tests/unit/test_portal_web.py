"""The portal's request glue (SPEC U4): sessions, CSRF refusal, cookie flags, headers and
error pages, with a stand-in request object and no network."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from streams.domain.portal_tokens import Session, open_session
from streams.errors import ConflictError, NotFoundError
from streams.portal.web import COOKIE, CSP, Call, Page, Portal, Redirect
from streams.services.portal_links import subscription_link
from streams.settings import Settings, load_settings

NOW = 1_800_000_000.0


@dataclass
class FakeRequest:
    """What the portal reads of an aiohttp request."""

    method: str = "GET"
    cookies: dict[str, str] = field(default_factory=dict)
    match_info: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] = field(default_factory=dict)
    secure: bool = False

    async def post(self) -> dict[str, str]:
        return self.form


class Keys:
    def __init__(self, *live: str) -> None:
        self.live = set(live)

    def get(self, key_id: str) -> object | None:
        return object() if key_id in self.live else None


def portal(settings: Settings | None = None, keys: Keys | None = None) -> Portal:
    app = SimpleNamespace(hookstream_api=SimpleNamespace(keys=keys or Keys("k1")))
    return Portal(app, settings or load_settings(secret_key="s3cret"), clock=lambda: NOW)


def signed_in(p: Portal, tenant: str | None = "acme", key_id: str | None = "k1") -> FakeRequest:
    session = Session(tenant, key_id, None, int(NOW) + 60, "n" * 24)
    return FakeRequest(cookies={COOKIE: open_session(p.session_key, session)})


calls: list[Call] = []


async def page(_portal: Portal, call: Call) -> Page | Redirect:
    calls.append(call)
    return Page("error.html", {"title": "t", "message": "m"})


def headers_of(rendered: tuple[Any, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in rendered[3]:
        out.setdefault(name, []).append(value)
    return out


async def test_u4_no_session_goes_to_sign_in_with_a_strict_cookie() -> None:
    rendered = await portal().handle(page, FakeRequest(), auth=True)
    headers = headers_of(rendered)
    assert rendered[0] == 303 and headers["Location"] == ["/portal/signin"]
    (cookie,) = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/portal" in cookie
    assert "Secure" not in cookie  # plain HTTP in development


async def test_u4_cookies_are_secure_over_tls() -> None:
    tls = await portal().handle(page, FakeRequest(secure=True), auth=True)
    assert "; Secure" in headers_of(tls)["Set-Cookie"][0]
    public = portal(load_settings(secret_key="s", portal_url="https://hooks.example.com/portal"))
    proxied = await public.handle(page, FakeRequest(), auth=True)
    assert "; Secure" in headers_of(proxied)["Set-Cookie"][0]


async def test_u4_every_answer_has_the_strict_policy_and_no_store() -> None:
    p = portal()
    for rendered in (
        await p.handle(page, FakeRequest(), auth=True),
        await p.handle(page, signed_in(p), auth=True),
    ):
        headers = headers_of(rendered)
        assert headers["Content-Security-Policy"] == [CSP]
        assert "script-src 'none'" in CSP and "default-src 'self'" in CSP
        assert headers["Cache-Control"] == ["no-store"]
        assert headers["Referrer-Policy"] == ["no-referrer"]


async def test_u4_a_form_without_its_csrf_token_is_refused() -> None:
    p = portal()
    calls.clear()
    request = signed_in(p)
    request.method = "POST"
    refused = await p.handle(page, request, auth=True)
    assert refused[0] == 403 and b"CSRF" in refused[2]
    request.form = {"csrf": "forged"}
    assert (await p.handle(page, request, auth=True))[0] == 403
    assert calls == []  # the action never ran


async def test_u4_a_form_with_its_sessions_token_is_accepted() -> None:
    p = portal()
    calls.clear()
    shown = await p.handle(page, signed_in(p), auth=True)
    token = re.search(rb'name="csrf" value="([^"]+)"', shown[2])
    assert token is not None
    calls.clear()
    request = signed_in(p)
    request.method = "POST"
    request.form = {"csrf": token.group(1).decode()}
    assert (await p.handle(page, request, auth=True))[0] == 200
    assert len(calls) == 1 and calls[0].principal.tenant_id == "acme"
    other = Session("acme", "k1", None, int(NOW) + 60, "m" * 24)
    request.cookies = {COOKIE: open_session(p.session_key, other)}
    assert (await p.handle(page, request, auth=True))[0] == 403  # another session's token


async def test_u4_expired_forged_or_revoked_sessions_sign_out() -> None:
    p = portal(keys=Keys())  # k1 was revoked
    assert (await p.handle(page, signed_in(p), auth=True))[0] == 303
    p = portal()
    stale = Session("acme", "k1", None, int(NOW) - 1, "n" * 24)
    request = FakeRequest(cookies={COOKIE: open_session(p.session_key, stale)})
    assert (await p.handle(page, request, auth=True))[0] == 303
    forged = portal(load_settings(secret_key="another"))
    assert (await p.handle(page, signed_in(forged), auth=True))[0] == 303


async def test_u4_an_operator_session_ends_when_the_operator_key_changes() -> None:
    before = portal(load_settings(secret_key="s", admin_token="op-1"))
    fingerprint = before.operator_fingerprint()
    assert fingerprint is not None and "op-1" not in fingerprint
    request = signed_in(before, tenant=None, key_id=fingerprint)
    assert (await before.handle(page, request, auth=True))[0] == 200
    after = portal(load_settings(secret_key="s", admin_token="op-2"))
    assert (await after.handle(page, request, auth=True))[0] == 303
    no_key = signed_in(before, tenant=None, key_id=None)
    assert (await before.handle(page, no_key, auth=True))[0] == 303


@pytest.mark.parametrize(
    ("error", "status"), [(NotFoundError("x"), 404), (ConflictError("y"), 409)]
)
async def test_u4_errors_render_as_pages_with_the_apis_status(
    error: Exception, status: int
) -> None:
    async def failing(_portal: Portal, _call: Call) -> Page | Redirect:
        raise error

    p = portal()
    rendered = await p.handle(failing, signed_in(p), auth=True)
    assert rendered[0] == status and rendered[1] == "text/html"


def test_u1_notice_link_needs_a_public_url_and_a_key() -> None:
    assert subscription_link(load_settings(secret_key="s"), "sub_1", NOW) is None
    assert subscription_link(load_settings(portal_url="http://h/portal"), "sub_1", NOW) is None
    settings = load_settings(secret_key="s", portal_url="http://h/portal/", portal_link_ttl="1h")
    link = subscription_link(settings, "sub_1", NOW)
    assert link is not None and link.startswith("http://h/portal/link?token=")
