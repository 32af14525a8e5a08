"""Endpoint secrets encrypted at rest in Kafka (SPEC S5).

A subscription's signing secrets are written to the `subscriptions` topic encrypted with AES-256-GCM
under a key derived (HKDF-SHA256) from ``HOOKSTREAM_SECRET_KEY``. The ciphertext is bound to the
subscription id (GCM associated data), so a secret copied into another subscription's record does
not decrypt. Each stored value reads ``hsenc1:<key id>:<base64 nonce + ciphertext>``; the key id
is a check value derived from the key, so a worker started with a different key stops with a
`ConfigError` naming the setting instead of signing with garbage.

Without ``HOOKSTREAM_SECRET_KEY``, secrets are stored as they are and hookstream logs a warning
once per process: acceptable on a laptop, never in production (set the key there). Values
written before a key was configured stay readable after one is; they are encrypted the next time
the subscription is written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from streams.errors import ConfigError
from streams.settings import Settings

log = logging.getLogger(__name__)

PREFIX: Final = "hsenc1:"
SETTING: Final = "HOOKSTREAM_SECRET_KEY"
_NONCE_BYTES: Final = 12
_KEY_ID_CHARS: Final = 12
_warned = False


class SecretBox:
    """Encrypts and decrypts signing secrets; ``None`` key means plaintext (local dev only)."""

    def __init__(self, secret_key: str | None) -> None:
        if secret_key is not None and len(secret_key) < 16:
            raise ConfigError(SETTING, "must be at least 16 characters (32 random bytes advised)")
        self._aead: AESGCM | None = None
        self.key_id: str | None = None
        if secret_key is not None:
            material = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=None, info=b"hookstream secrets v1"
            ).derive(secret_key.encode())
            self._aead = AESGCM(material)
            check = hmac.new(material, b"hookstream key check", hashlib.sha256).hexdigest()
            self.key_id = check[:_KEY_ID_CHARS]

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox:
        key = settings.secret_key
        return cls(None if key is None else key.get_secret_value())

    @property
    def encrypts(self) -> bool:
        return self._aead is not None

    def seal(self, value: str, context: str) -> str:
        """``value`` as it is stored; ``context`` (the subscription id) is bound to it."""
        if value.startswith(PREFIX):
            return value  # already sealed
        if self._aead is None:
            _warn_plaintext()
            return value
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, value.encode(), context.encode())
        return f"{PREFIX}{self.key_id}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, stored: str, context: str) -> str:
        """The secret inside ``stored``. Raises ConfigError when this key cannot open it."""
        if not stored.startswith(PREFIX):
            return stored  # written before a key was configured
        if self._aead is None:
            raise ConfigError(
                SETTING, "is not set, but the subscriptions topic holds encrypted secrets"
            )
        key_id, _, body = stored[len(PREFIX) :].partition(":")
        if key_id != self.key_id:
            raise ConfigError(
                SETTING,
                f"is not the key the stored secrets were encrypted with (they carry key id "
                f"{key_id}, this key's id is {self.key_id})",
            )
        try:
            raw = base64.b64decode(body, validate=True)
            return self._aead.decrypt(
                raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode()
            ).decode()
        except (binascii.Error, ValueError, InvalidTag) as exc:
            raise ConfigError(
                SETTING, f"cannot decrypt a stored secret of subscription {context}"
            ) from exc


def _warn_plaintext() -> None:
    global _warned  # one warning per process, by design
    if not _warned:
        _warned = True
        log.warning(
            "HOOKSTREAM_SECRET_KEY is not set: endpoint secrets are stored in Kafka unencrypted. "
            "Set it everywhere except local development."
        )
