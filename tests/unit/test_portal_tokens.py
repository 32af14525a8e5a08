"""The portal's signed link, session and CSRF tokens (SPEC U1, U4): pure, no network."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.portal_tokens import (
    LINK_DOMAIN,
    SESSION_DOMAIN,
    Session,
    TokenError,
    csrf_ok,
    csrf_token,
    derive_key,
    open_session,
    read_session,
    sign,
    sign_link,
    unsign,
    verify_link,
)

KEY = derive_key(b"master secret", "link")
NOW = 1_800_000_000


def test_u4_keys_differ_per_purpose_and_master() -> None:
    assert derive_key(b"m", "link") != derive_key(b"m", "session")
    assert derive_key(b"m", "link") != derive_key(b"n", "link")
    assert len(derive_key(b"m", "link")) == 32


def test_u1_link_opens_its_subscription_until_it_expires() -> None:
    token = sign_link(KEY, "sub_1", NOW + 60)
    assert verify_link(KEY, token, NOW) == ("sub_1", NOW + 60)
    assert verify_link(KEY, token, NOW + 59.9) == ("sub_1", NOW + 60)
    with pytest.raises(TokenError) as expired:
        verify_link(KEY, token, NOW + 60)
    assert expired.value.reason == "expired"


def test_u4_link_refuses_another_key_a_tampered_body_and_garbage() -> None:
    token = sign_link(KEY, "sub_1", NOW + 60)
    with pytest.raises(TokenError, match="bad_signature"):
        verify_link(derive_key(b"other", "link"), token, NOW)
    forged = sign_link(derive_key(b"other", "link"), "sub_2", NOW + 60)
    body = forged.split(".")[0]
    with pytest.raises(TokenError, match="bad_signature"):
        verify_link(KEY, f"{body}.{token.split('.')[1]}", NOW)
    for junk in ("", "abc", "a.b.c", "." * 3000, "x.!!!"):
        with pytest.raises(TokenError):
            verify_link(KEY, junk, NOW)


def test_u4_a_session_cookie_is_not_a_link_nor_the_reverse() -> None:
    session = Session("acme", "k1", None, NOW + 60, "n" * 24)
    cookie = open_session(KEY, session)
    with pytest.raises(TokenError, match="bad_signature"):
        verify_link(KEY, cookie, NOW)
    with pytest.raises(TokenError, match="bad_signature"):
        read_session(KEY, sign_link(KEY, "sub_1", NOW + 60), NOW)
    assert unsign(KEY, SESSION_DOMAIN, cookie, NOW)["t"] == "acme"
    with pytest.raises(TokenError):
        unsign(KEY, LINK_DOMAIN, cookie, NOW)


def test_u1_session_round_trips_and_expires() -> None:
    operator = Session(None, None, None, NOW + 5, "x" * 24)
    assert read_session(KEY, open_session(KEY, operator), NOW) == operator
    assert operator.is_operator
    scoped = Session("acme", None, "sub_1", NOW + 5, "y" * 24)
    assert read_session(KEY, open_session(KEY, scoped), NOW) == scoped
    with pytest.raises(TokenError, match="expired"):
        read_session(KEY, open_session(KEY, scoped), NOW + 5)


def test_u4_a_scoped_session_without_a_tenant_is_refused() -> None:
    """A link session always belongs to one tenant: never the operator's powers."""
    payload = {"t": None, "k": None, "s": "sub_1", "n": "z" * 24, "exp": NOW + 60}
    with pytest.raises(TokenError, match="malformed"):
        read_session(KEY, sign(KEY, SESSION_DOMAIN, payload), NOW)


def test_u4_signed_values_need_an_integer_expiry() -> None:
    with pytest.raises(ValueError, match="exp"):
        sign(KEY, LINK_DOMAIN, {"sub": "x"})


def test_u4_csrf_token_belongs_to_its_session() -> None:
    token = csrf_token(KEY, "nonce-a" * 3)
    assert csrf_ok(KEY, "nonce-a" * 3, token)
    assert not csrf_ok(KEY, "nonce-b" * 3, token)
    assert not csrf_ok(KEY, "nonce-a" * 3, None)
    assert not csrf_ok(KEY, "nonce-a" * 3, "")
    assert not csrf_ok(derive_key(b"other", "session"), "nonce-a" * 3, token)


@given(sub=st.text(min_size=1, max_size=80), ttl=st.integers(1, 10**7))
def test_u1_any_subscription_id_round_trips(sub: str, ttl: int) -> None:
    token = sign_link(KEY, sub, NOW + ttl)
    assert verify_link(KEY, token, NOW) == (sub, NOW + ttl)
    assert "/" not in token and "+" not in token and "=" not in token  # URL-safe as it is
