"""Signed, expiring tokens of the owner's portal: the notice link, the session, CSRF (SPEC U1, U4).

Pure functions over a key (bytes) and an injected clock; nothing here reads settings or does I/O.

- A **signed value** is ``base64url(JSON payload) "." base64url(HMAC-SHA256(key, domain, body))``.
  The payload always carries ``exp`` (Unix seconds); `unsign` refuses a bad signature first,
  then an expired value. Each use has its own domain string, so a session cookie can never be
  replayed as a link, nor a link as a session.
- The **link** of a notice is a signed value ``{"sub": id, "exp": t}``: it opens the portal on
  one subscription and nothing else, until ``t``. It is the only secret that travels in a URL.
- The **session** is a signed value with the principal (tenant or operator, the tenant key's id),
  an optional subscription scope (a session opened by a link), the expiry and a random nonce.
  It is stateless, so every worker of the pipeline accepts a session another worker opened.
- The **CSRF token** is HMAC(key, nonce of the session): a form is accepted only with the token
  of the session that sends it (a synchronizer token that needs no server-side store).

`derive_key` makes each purpose's key from one master secret, so the master key itself never
signs anything a browser sees.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = [
    "LINK_DOMAIN",
    "SESSION_DOMAIN",
    "Session",
    "TokenError",
    "csrf_ok",
    "csrf_token",
    "derive_key",
    "open_session",
    "read_session",
    "sign",
    "sign_link",
    "unsign",
    "verify_link",
]

LINK_DOMAIN: Final = "hookstream.portal.link.v1"
SESSION_DOMAIN: Final = "hookstream.portal.session.v1"
_CSRF_DOMAIN: Final = b"hookstream.portal.csrf.v1\x00"
#: The longest token accepted: anything longer is refused before it is decoded.
MAX_TOKEN_CHARS: Final = 2048


class TokenError(ValueError):
    """A token that is malformed, wrongly signed or expired; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def derive_key(master: bytes, purpose: str) -> bytes:
    """The key of one purpose, derived from the master secret (HMAC-SHA256 as a KDF)."""
    return hmac.new(
        master, b"hookstream.portal.key\x00" + purpose.encode(), hashlib.sha256
    ).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, domain: str, body: str) -> bytes:
    return hmac.new(key, domain.encode() + b"\x00" + body.encode(), hashlib.sha256).digest()


def sign(key: bytes, domain: str, payload: dict[str, Any]) -> str:
    """``payload`` (which must hold an integer ``exp``) signed for ``domain``."""
    if not isinstance(payload.get("exp"), int):
        raise ValueError("a signed value needs an integer exp")
    body = _b64(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS))
    return f"{body}.{_b64(_mac(key, domain, body))}"


def unsign(key: bytes, domain: str, token: str, now_s: float) -> dict[str, Any]:
    """The payload of a token signed for ``domain``; `TokenError` when it is not valid now."""
    if not token or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise TokenError("malformed")
    body, _, mac = token.partition(".")
    try:
        given = _unb64(mac)
    except (binascii.Error, ValueError):
        raise TokenError("malformed") from None
    if not hmac.compare_digest(given, _mac(key, domain, body)):
        raise TokenError("bad_signature")
    try:
        payload = orjson.loads(_unb64(body))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise TokenError("malformed") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("exp"), int):
        raise TokenError("malformed")
    if payload["exp"] <= now_s:
        raise TokenError("expired")
    return payload


# --- the link of a notice ----------------------------------------------------------------------


def sign_link(key: bytes, subscription_id: str, expires_at_s: int) -> str:
    """The token of a link that opens ``subscription_id`` until ``expires_at_s``."""
    return sign(key, LINK_DOMAIN, {"sub": subscription_id, "exp": expires_at_s})


def verify_link(key: bytes, token: str, now_s: float) -> tuple[str, int]:
    """The subscription a link token opens and when it expires; `TokenError` when it is not
    valid now."""
    payload = unsign(key, LINK_DOMAIN, token, now_s)
    sub = payload.get("sub")
    if not isinstance(sub, str) or not sub:
        raise TokenError("malformed")
    return sub, int(payload["exp"])


# --- the session -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Session:
    """Who is signed in: a tenant (with the key it signed in with, or none for a link) or the
    operator (``tenant_id`` None); ``scope`` is the one subscription a link session may see."""

    tenant_id: str | None
    key_id: str | None
    scope: str | None
    expires_at: int
    nonce: str

    @property
    def is_operator(self) -> bool:
        return self.tenant_id is None


def open_session(key: bytes, session: Session) -> str:
    """The cookie value of ``session``."""
    payload = {
        "t": session.tenant_id,
        "k": session.key_id,
        "s": session.scope,
        "n": session.nonce,
        "exp": session.expires_at,
    }
    return sign(key, SESSION_DOMAIN, payload)


def _optional_text(payload: dict[str, Any], name: str) -> str | None:
    value = payload.get(name)
    if value is not None and not isinstance(value, str):
        raise TokenError("malformed")
    return value


def read_session(key: bytes, cookie: str, now_s: float) -> Session:
    """The session of a cookie value; `TokenError` when it is not valid now."""
    payload = unsign(key, SESSION_DOMAIN, cookie, now_s)
    nonce = payload.get("n")
    if not isinstance(nonce, str) or len(nonce) < 16:
        raise TokenError("malformed")
    session = Session(
        tenant_id=_optional_text(payload, "t"),
        key_id=_optional_text(payload, "k"),
        scope=_optional_text(payload, "s"),
        expires_at=payload["exp"],
        nonce=nonce,
    )
    if session.scope is not None and session.tenant_id is None:
        raise TokenError("malformed")  # a link session always belongs to one tenant
    return session


# --- CSRF --------------------------------------------------------------------------------------


def csrf_token(key: bytes, nonce: str) -> str:
    """The CSRF token of the session whose nonce is ``nonce``."""
    return _b64(hmac.new(key, _CSRF_DOMAIN + nonce.encode(), hashlib.sha256).digest())


def csrf_ok(key: bytes, nonce: str, given: str | None) -> bool:
    """Whether ``given`` is the CSRF token of that session (constant-time)."""
    if not given:
        return False
    return hmac.compare_digest(given.encode(), csrf_token(key, nonce).encode())
