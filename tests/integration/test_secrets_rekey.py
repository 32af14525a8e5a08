"""Rotating the at-rest encryption key: `hookstream secrets rekey` (SPEC S5).

Subscriptions are written under an old key; with the new key set and the old one as
HOOKSTREAM_SECRET_KEY_PREVIOUS, `rekey` re-encrypts every one of them, after which the new key
alone opens them all, with the very secrets the owners were given. A second run has nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from click.testing import CliRunner

from streams.adapters import codec
from streams.adapters.kafka_admin import apply_topics
from streams.adapters.registry import SubscriptionRegistry
from streams.adapters.runtime_config import CONFIG_PREFIX
from streams.adapters.secretbox import SecretBox
from streams.adapters.topic_reader import scan
from streams.cli.secrets import secrets
from streams.domain.models import Subscription
from streams.errors import ConfigError
from streams.services.subscriptions import create_subscription, rotate_secret
from streams.settings import Settings
from tests.integration.workers import settings_env

pytestmark = pytest.mark.integration

OLD = "the-old-encryption-key-0123456789"
NEW = "the-new-encryption-key-9876543210"


def _key_ids(settings: Settings) -> set[str]:
    """The key ids the latest stored secrets are sealed under."""
    latest: dict[bytes, bytes | None] = {}
    for msg in scan(settings, settings.topic("subscriptions")):
        latest[msg.key() or b""] = msg.value()
    return {
        secret.value.split(":")[1]
        for key, value in latest.items()
        if value is not None and not key.startswith(CONFIG_PREFIX.encode())
        for secret in codec.decode(Subscription, value).secrets
    }


def _rekey(settings: Settings) -> dict[str, object]:
    env = settings_env(settings)
    done = CliRunner().invoke(secrets, ["rekey", "--json"], env=env)
    assert done.exit_code == 0, done.output
    result: dict[str, object] = orjson.loads(done.output)
    return result


def test_S5_rekey_moves_every_secret_to_the_new_key(make_settings: Callable[..., Settings]) -> None:
    old = make_settings(secret_key=OLD)
    apply_topics(old)
    created = [
        create_subscription(old, {"tenant_id": "acme", "url": f"http://127.0.0.1:9/{n}"})
        for n in range(3)
    ]
    _, rotated_to = rotate_secret(old, created[0].id)
    given = {sub.id: {s.value for s in sub.secrets} for sub in created}
    given[created[0].id].add(rotated_to)
    assert _key_ids(old) == {SecretBox(OLD).key_id}

    new_only = make_settings(secret_key=NEW)
    with pytest.raises(ConfigError, match="HOOKSTREAM_SECRET_KEY_PREVIOUS"):
        SubscriptionRegistry(new_only).load()  # before the rekey, the new key alone cannot

    rotating = make_settings(secret_key=NEW, secret_key_previous=OLD)
    report = _rekey(rotating)
    assert report["subscriptions"] == 3 and report["rewritten"] == 3
    assert _key_ids(old) == {SecretBox(NEW).key_id}

    registry = SubscriptionRegistry(new_only)
    registry.load()
    for sub_id, secrets_given in given.items():
        found = registry.get(sub_id)
        assert found is not None
        assert {s.value for s in found.secrets} == secrets_given

    assert _rekey(rotating)["rewritten"] == 0  # idempotent: nothing left under the old key
