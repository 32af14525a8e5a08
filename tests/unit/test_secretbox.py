"""Secrets at rest (SPEC S5): encrypted, bound to their subscription, a wrong key is loud."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streams.adapters import codec
from streams.adapters.registry import SubscriptionRegistry, open_secrets, seal_secrets
from streams.adapters.secretbox import PREFIX, SecretBox
from streams.domain.models import Secret, Subscription
from streams.errors import ConfigError
from streams.settings import load_settings

SECRET = "whsec_" + "A" * 32
KEY = "a-test-key-of-enough-length-0001"


def test_round_trip_and_fresh_nonce() -> None:
    box = SecretBox(KEY)
    one, two = box.seal(SECRET, "sub_1"), box.seal(SECRET, "sub_1")
    assert one.startswith(PREFIX) and SECRET not in one and one != two
    assert box.open(one, "sub_1") == SECRET
    assert box.seal(one, "sub_1") == one  # sealing twice is a no-op


def test_wrong_key_is_a_config_error_naming_the_setting() -> None:
    sealed = SecretBox(KEY).seal(SECRET, "sub_1")
    with pytest.raises(ConfigError, match=r"HOOKSTREAM_SECRET_KEY.*key id"):
        SecretBox("another-key-of-enough-length-002").open(sealed, "sub_1")
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY: is not set"):
        SecretBox(None).open(sealed, "sub_1")
    with pytest.raises(ConfigError, match="at least 16"):
        SecretBox("short")


def test_bound_to_subscription_and_tamper_evident() -> None:
    box = SecretBox(KEY)
    sealed = box.seal(SECRET, "sub_1")
    with pytest.raises(ConfigError):
        box.open(sealed, "sub_2")
    with pytest.raises(ConfigError):
        box.open(sealed[:-4] + "AAAA", "sub_1")


def test_without_key_plaintext_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    box = SecretBox(None)
    assert box.seal(SECRET, "sub_1") == SECRET
    assert box.open(SECRET, "sub_1") == SECRET
    assert SECRET not in caplog.text
    assert SecretBox(KEY).open(SECRET, "sub_1") == SECRET  # written before a key was set


def test_registry_decrypts_on_read_and_refuses_wrong_key(tmp_path: Any) -> None:
    sub = Subscription("sub_1", "acme", "", "https://x.test/", ("*",), (Secret(SECRET, 5),))
    stored = seal_secrets(SecretBox(KEY), sub)
    assert stored.secrets[0].value != SECRET
    assert open_secrets(SecretBox(KEY), stored) == sub
    right = SubscriptionRegistry(load_settings(secret_key=KEY, data_dir=tmp_path))
    right.apply(b"sub_1", codec.encode(stored))
    assert right.get("sub_1") == sub
    wrong = SubscriptionRegistry(
        load_settings(secret_key="another-key-of-enough-length-002", data_dir=tmp_path)
    )
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY"):
        wrong.apply(b"sub_1", codec.encode(stored))
