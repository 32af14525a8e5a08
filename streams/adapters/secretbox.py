"""Endpoint secrets encrypted at rest in Kafka (SPEC S5).

A subscription's signing secrets are written to the `subscriptions` topic encrypted with AES-256-GCM
under a key derived (HKDF-SHA256) from ``HOOKSTREAM_SECRET_KEY``. The ciphertext is bound to the
subscription id (GCM associated data), so a secret copied into another subscription's record does
not decrypt. Each stored value reads ``hsenc1:<key id>:<base64 nonce + ciphertext>``; the key id
is a check value derived from the key, so a worker started with a different key stops with a
`ConfigError` naming the setting instead of signing with garbage.

Encryption is the default. Without ``HOOKSTREAM_SECRET_KEY``, `require_encryption` refuses
every new secret (creating a subscription, rotating its secret) with a `ConfigError` naming the
key and ``HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS``, the local-development setting that allows them in
the clear (a warning is then logged once per process). Values written before a key was
configured stay readable after one is; they are encrypted the next time the subscription is
written. `local_key` gives a development installation (the demo, the chaos and bench rigs) a
generated key kept in its data dir.

Rotating the key: ``HOOKSTREAM_SECRET_KEY_PREVIOUS`` names the key being retired. A box opens
what either key sealed and seals only under the new one, so workers keep running while
``hookstream secrets rekey`` rewrites every subscription under the new key (docs/api.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import SecretStr

from streams.errors import ConfigError
from streams.settings import Settings

log = logging.getLogger(__name__)

PREFIX: Final = "hsenc1:"
SETTING: Final = "HOOKSTREAM_SECRET_KEY"
PREVIOUS_SETTING: Final = "HOOKSTREAM_SECRET_KEY_PREVIOUS"
PLAINTEXT_SETTING: Final = "HOOKSTREAM_ALLOW_PLAINTEXT_SECRETS"
KEY_FILE: Final = "secret.key"
_NONCE_BYTES: Final = 12
_KEY_ID_CHARS: Final = 12
_warned = False


def _aead(secret_key: str) -> tuple[AESGCM, str]:
    """The cipher of ``secret_key`` and its key id (a check value, not the key)."""
    material = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"hookstream secrets v1"
    ).derive(secret_key.encode())
    check = hmac.new(material, b"hookstream key check", hashlib.sha256).hexdigest()
    return AESGCM(material), check[:_KEY_ID_CHARS]


class SecretBox:
    """Encrypts and decrypts signing secrets; ``None`` key means plaintext (local dev only).

    ``previous`` is the key being retired during a rotation: what it sealed still opens.
    """

    def __init__(self, secret_key: str | None, previous: str | None = None) -> None:
        for value, setting in ((secret_key, SETTING), (previous, PREVIOUS_SETTING)):
            if value is not None and len(value) < 16:
                raise ConfigError(
                    setting, "must be at least 16 characters (32 random bytes advised)"
                )
        if previous is not None and secret_key is None:
            raise ConfigError(PREVIOUS_SETTING, f"is set, but {SETTING} (the new key) is not")
        self._aead: AESGCM | None = None
        self.key_id: str | None = None
        self._openers: dict[str, AESGCM] = {}
        if secret_key is not None:
            self._aead, self.key_id = _aead(secret_key)
            self._openers[self.key_id] = self._aead
        if previous is not None:
            old, old_id = _aead(previous)
            self._openers.setdefault(old_id, old)

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox:
        key, previous = settings.secret_key, settings.secret_key_previous
        return cls(
            None if key is None else key.get_secret_value(),
            None if previous is None else previous.get_secret_value(),
        )

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
        aead = self._openers.get(key_id)
        if aead is None:
            raise ConfigError(
                SETTING,
                f"is not the key the stored secrets were encrypted with (they carry key id "
                f"{key_id}, this key's id is {self.key_id}; during a rotation set "
                f"{PREVIOUS_SETTING} to the old key)",
            )
        try:
            raw = base64.b64decode(body, validate=True)
            return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag) as exc:
            raise ConfigError(
                SETTING, f"cannot decrypt a stored secret of subscription {context}"
            ) from exc

    def sealed_under(self, stored: str) -> str | None:
        """The key id ``stored`` was sealed under, or None for a value in the clear."""
        if not stored.startswith(PREFIX):
            return None
        return stored[len(PREFIX) :].partition(":")[0]


def require_encryption(settings: Settings) -> None:
    """Refuse to create a secret that would be stored in the clear (S5: encrypted by default)."""
    if settings.secret_key is None and not settings.allow_plaintext_secrets:
        raise ConfigError(
            SETTING,
            f"is not set, so endpoint secrets cannot be encrypted at rest: set {SETTING} "
            f"(32 random bytes, e.g. `openssl rand -base64 32`), or, for local development "
            f"only, {PLAINTEXT_SETTING}=true to store them in the clear",
        )


def local_key(settings: Settings) -> Settings:
    """``settings`` with a secret key: the configured one, else one generated into the data dir.

    For development installations (the demo, the chaos and bench rigs): the key is 32 random
    bytes in ``<data dir>/secret.key``, mode 0600, made once and reused on the next run.
    """
    if settings.secret_key is not None:
        return settings
    path = Path(settings.data_dir) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        log.info("generated a secret key for endpoint secrets", extra={"path": str(path)})
    key = path.read_text().strip()
    return settings.model_copy(update={"secret_key": SecretStr(key)})


def _warn_plaintext() -> None:
    global _warned  # one warning per process, by design
    if not _warned:
        _warned = True
        log.warning(
            "HOOKSTREAM_SECRET_KEY is not set: endpoint secrets are stored in Kafka unencrypted. "
            "Set it everywhere except local development."
        )
