"""S6, O2: the key workers ask each other with, derived from what every worker shares."""

from __future__ import annotations

from streams.services.auth import is_peer, peer_token
from streams.settings import load_settings


def test_s6_the_peer_key_derives_from_the_secret_key_else_the_operator_key() -> None:
    a = peer_token(load_settings(secret_key="k-one", admin_token=None))
    assert a is not None and a.startswith("hspeer_") and "k-one" not in a
    assert peer_token(load_settings(secret_key="k-one", admin_token="op")) == a  # fleet-wide
    assert peer_token(load_settings(secret_key="k-two", admin_token=None)) != a
    from_admin = peer_token(load_settings(secret_key=None, admin_token="op"))
    assert from_admin is not None and from_admin != a and from_admin != "op"
    assert peer_token(load_settings(secret_key=None, admin_token=None)) is None


def test_s6_only_a_bearer_with_the_installation_peer_key_is_a_peer() -> None:
    settings = load_settings(secret_key="k-one", admin_token="op")
    key = peer_token(settings)
    assert is_peer(f"Bearer {key}", settings) and is_peer(f"bearer  {key} ", settings)
    assert not is_peer(None, settings) and not is_peer("Bearer op", settings)
    assert not is_peer(f"Basic {key}", settings)
    assert not is_peer(f"Bearer {key}", load_settings(secret_key="k-two", admin_token="op"))
    assert not is_peer("Bearer x", load_settings(secret_key=None, admin_token=None))
