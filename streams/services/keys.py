"""Tenant API keys of the admin API (Q6): create, list, revoke. The CLI calls these.

A key reads ``hsk_<key id>_<secret>``: 256 random bits, shown once at creation. Kafka's
compacted `apikeys` topic keeps only its SHA-256 (a plain hash is enough for a random key of that
strength; a slow password hash would only slow every request down). Revoking writes a tombstone,
and every worker stops accepting the key as soon as its `ApiKeyRegistry` reads it.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable

from confluent_kafka import Producer

from streams.adapters.kafka_clients import write_flushed
from streams.adapters.registry import (
    ApiKey,
    ApiKeyRegistry,
    key_hash,
    publish_api_key,
    revoke_api_key,
)
from streams.domain.validation import validate_tenant_id
from streams.errors import NotFoundError, ValidationError
from streams.settings import Settings

KEY_PREFIX = "hsk_"
_KEY_ID_BYTES = 6
_SECRET_BYTES = 32


def parse_key(token: str) -> str | None:
    """The key id inside a key's text, or None when the text is not shaped like a key."""
    if not token.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = token[len(KEY_PREFIX) :].partition("_")
    if not sep or not secret or len(key_id) != 2 * _KEY_ID_BYTES:
        return None
    return f"key_{key_id}"


def create_key(
    settings: Settings,
    tenant_id: str,
    name: str = "",
    *,
    clock: Callable[[], float] = time.time,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> tuple[ApiKey, str]:
    """A new key for ``tenant_id``: the stored record and the key text (shown once)."""
    validate_tenant_id(tenant_id)
    if len(name) > 200:
        raise ValidationError({"name": "must be at most 200 characters"})
    raw_id = random_bytes(_KEY_ID_BYTES).hex()
    secret = base64.urlsafe_b64encode(random_bytes(_SECRET_BYTES)).decode().rstrip("=")
    token = f"{KEY_PREFIX}{raw_id}_{secret}"
    key = ApiKey(
        key_id=f"key_{raw_id}",
        tenant_id=tenant_id,
        key_hash=key_hash(token),
        name=name,
        created_at=int(clock() * 1000),
    )
    _write(settings, lambda producer: publish_api_key(producer, settings, key))
    return key, token


def load_keys(settings: Settings) -> ApiKeyRegistry:
    keys = ApiKeyRegistry(settings)
    keys.load()
    return keys


def list_keys(settings: Settings, tenant_id: str | None = None) -> list[ApiKey]:
    found = load_keys(settings).all()
    if tenant_id is not None:
        found = [k for k in found if k.tenant_id == tenant_id]
    return sorted(found, key=lambda k: (k.tenant_id, k.created_at, k.key_id))


def revoke_key(settings: Settings, key_id: str) -> None:
    if load_keys(settings).get(key_id) is None:
        raise NotFoundError(f"api key {key_id} not found")
    _write(settings, lambda producer: revoke_api_key(producer, settings, key_id))


def _write(settings: Settings, action: Callable[[Producer], None]) -> None:
    write_flushed(settings, action, "write the key to Kafka")
