"""Secrets at rest (SPEC S5): encrypted, bound to their subscription, a wrong key is loud."""

from __future__ import annotations

import logging
import stat
from typing import Any

import pytest

from streams.adapters import codec
from streams.adapters.registry import SubscriptionRegistry, open_secrets, seal_secrets
from streams.adapters.secretbox import KEY_FILE, PREFIX, SecretBox, local_key, require_encryption
from streams.domain.models import Secret, Subscription
from streams.errors import ConfigError
from streams.services.subscriptions import create_subscription
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
    wrong.apply(b"sub_1", codec.encode(stored))  # while catching up a later record may win
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY"):
        wrong._on_caught_up()  # it did not: the latest record is one this key cannot open
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY"):
        wrong.apply(b"sub_1", codec.encode(stored))  # once caught up, at once


def test_S5_a_record_the_key_cannot_open_is_superseded_by_a_later_one(tmp_path: Any) -> None:
    """S5: during a key rotation the log still holds records under the old key; the rewrite
    under the new key that follows them is what counts."""
    sub = Subscription("sub_1", "acme", "", "https://x.test/", ("*",), (Secret(SECRET, 5),))
    new_key = "the-new-key-of-enough-length-003"
    registry = SubscriptionRegistry(load_settings(secret_key=new_key, data_dir=tmp_path))
    registry.apply(b"sub_1", codec.encode(seal_secrets(SecretBox(KEY), sub)))
    registry.apply(b"sub_1", codec.encode(seal_secrets(SecretBox(new_key), sub)))
    registry._on_caught_up()
    assert registry.get("sub_1") == sub


# --- S5: encrypted by default --------------------------------------------------------------------


def test_S5_no_key_refuses_a_new_secret_naming_both_settings(tmp_path: Any) -> None:
    """S5: without a key, creating a subscription is refused before anything is written."""
    settings = load_settings(
        data_dir=tmp_path, kafka_bootstrap="127.0.0.1:1", allow_private_destinations=True
    )
    with pytest.raises(ConfigError) as caught:
        require_encryption(settings)
    assert "HOOKSTREAM_SECRET_KEY" in str(caught.value)
    assert "HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS" in str(caught.value)
    with pytest.raises(ConfigError, match="HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS"):
        # the broker at :1 is never reached: the refusal comes first
        create_subscription(settings, {"tenant_id": "acme", "url": "http://127.0.0.1:9/hook"})


def test_S5_a_key_or_the_local_development_setting_allows_it(tmp_path: Any) -> None:
    require_encryption(load_settings(data_dir=tmp_path, secret_key=KEY))
    require_encryption(load_settings(data_dir=tmp_path, allow_plaintext_secrets=True))


def test_S5_local_key_is_generated_once_into_the_data_dir_mode_0600(tmp_path: Any) -> None:
    """S5: development installations get a random key of their own, kept private and reused."""
    settings = load_settings(data_dir=tmp_path / "data")
    first = local_key(settings)
    path = tmp_path / "data" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.secret_key is not None and len(first.secret_key.get_secret_value()) >= 32
    again = local_key(settings)
    assert again.secret_key is not None
    assert again.secret_key.get_secret_value() == first.secret_key.get_secret_value()
    configured = load_settings(data_dir=tmp_path / "other", secret_key=KEY)
    assert local_key(configured) is configured  # a configured key wins; no file is written
    assert not (tmp_path / "other" / KEY_FILE).exists()


def test_S5_during_a_rotation_both_keys_open_and_the_new_one_seals() -> None:
    """S5: with the old key as HOOKSTREAM_SECRET_KEY_PREVIOUS, what it sealed still opens."""
    new_key = "the-new-key-of-enough-length-003"
    old_sealed = SecretBox(KEY).seal(SECRET, "sub_1")
    rotating = SecretBox(new_key, previous=KEY)
    assert rotating.open(old_sealed, "sub_1") == SECRET
    resealed = rotating.seal(rotating.open(old_sealed, "sub_1"), "sub_1")
    assert rotating.sealed_under(resealed) == SecretBox(new_key).key_id
    assert SecretBox(new_key).open(resealed, "sub_1") == SECRET  # the old key is not needed
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY_PREVIOUS"):
        SecretBox(new_key).open(old_sealed, "sub_1")
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY_PREVIOUS"):
        SecretBox(None, previous=KEY)
