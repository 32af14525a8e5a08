"""Rotating the key that encrypts endpoint secrets at rest (SPEC S5).

The procedure (docs/api.md, "Rotating the encryption key"):

1. Give every worker and every CLI the new key as ``HOOKSTREAM_SECRET_KEY`` and the old one as
   ``HOOKSTREAM_SECRET_KEY_PREVIOUS`` (a rolling restart). They open secrets sealed under either
   key and seal new ones under the new key only.
2. Run `rekey` (``hookstream secrets rekey``) with the same two settings: it rewrites every
   subscription whose stored secrets are not all under the new key. It is idempotent: a second
   run finds nothing to do, which is how it checks itself.
3. Remove ``HOOKSTREAM_SECRET_KEY_PREVIOUS`` everywhere (another rolling restart).

A rewrite is an ordinary write of the subscription as last stored (same fields, same version),
so, as with any two concurrent edits, run it while nobody edits subscriptions, and run it again
if one did.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.adapters import codec
from streams.adapters.kafka_clients import make_producer
from streams.adapters.registry import open_secrets, publish_subscription
from streams.adapters.runtime_config import CONFIG_PREFIX
from streams.adapters.secretbox import PREVIOUS_SETTING, SETTING, SecretBox
from streams.adapters.topic_reader import scan
from streams.domain.models import Subscription
from streams.errors import ConfigError, HookstreamError
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class RekeyReport:
    subscriptions: int  # subscriptions in the topic now
    rewritten: int  # re-encrypted under the new key by this run
    key_id: str  # the new key's id, as the stored values carry it


def _latest(settings: Settings) -> dict[str, bytes]:
    """The latest stored record of every subscription (deleted ones left out)."""
    latest: dict[str, bytes | None] = {}
    for msg in scan(settings, settings.topic("subscriptions")):
        key = msg.key()
        if key is None or key.startswith(CONFIG_PREFIX.encode()):
            continue
        latest[key.decode()] = msg.value()
    return {sub_id: value for sub_id, value in latest.items() if value is not None}


def rekey(settings: Settings) -> RekeyReport:
    """Re-encrypt every subscription's secrets under ``settings.secret_key``."""
    if settings.secret_key is None:
        raise ConfigError(SETTING, "must be set to the new key to re-encrypt secrets under it")
    box = SecretBox.from_settings(settings)
    assert box.key_id is not None  # a key is set
    stale: list[Subscription] = []
    latest = _latest(settings)
    for value in latest.values():
        stored = codec.decode(Subscription, value)
        if any(box.sealed_under(s.value) != box.key_id for s in stored.secrets):
            try:
                stale.append(open_secrets(box, stored))
            except ConfigError as exc:
                raise ConfigError(
                    PREVIOUS_SETTING,
                    f"must be the old key: subscription {stored.id} holds a secret neither key "
                    f"opens ({exc})",
                ) from exc
    if stale:
        producer = make_producer(settings)
        for sub in stale:
            publish_subscription(producer, settings, sub)
        if producer.flush(30) != 0:
            raise HookstreamError("Kafka did not take every re-encrypted subscription in 30 s")
    return RekeyReport(subscriptions=len(latest), rewritten=len(stale), key_id=box.key_id)
