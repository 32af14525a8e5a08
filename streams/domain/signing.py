"""Signing deliveries the Standard Webhooks way (SPEC D3, S5).

Every attempt carries ``webhook-id`` (the delivery id, D2), ``webhook-timestamp`` (unix seconds,
fresh per attempt) and ``webhook-signature``: ``v1,<base64 HMAC-SHA256>`` of
``"{webhook-id}.{webhook-timestamp}.{body}"``. A subscription's secrets look like
``whsec_<base64>``; while a rotation's grace period runs, the header carries one signature per
valid secret, newest first, separated by spaces, so a receiver holding either secret verifies.

Signing is on the hot path, so each secret is decoded once into a keyed HMAC state kept in a
small cache; every signature starts from a copy of that state instead of keying a new HMAC.
Nothing here logs or formats a secret into an error message (S5).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Sequence
from functools import lru_cache

from streams.domain.models import Secret

__all__ = [
    "SECRET_BYTES",
    "SECRET_PREFIX",
    "decode_secret",
    "generate_secret",
    "sign",
    "signature_header",
    "verify",
    "webhook_headers",
]

SECRET_PREFIX = "whsec_"  # noqa: S105 (the public prefix of every secret, not a secret)
#: Bytes of key material in a secret hookstream generates.
SECRET_BYTES = 24
# Secrets handed in by operators must hold between these many bytes of key material.
_MIN_SECRET_BYTES = 24
_MAX_SECRET_BYTES = 64
_VERSION = "v1"
# Distinct secrets signed with before the least recently used is decoded again.
_KEY_CACHE_SIZE = 4096


def generate_secret(random_bytes: Callable[[int], bytes]) -> str:
    """A new signing secret from ``random_bytes`` (``secrets.token_bytes`` in production)."""
    raw = random_bytes(SECRET_BYTES)
    if len(raw) != SECRET_BYTES:
        raise ValueError(f"the random source returned {len(raw)} bytes, not {SECRET_BYTES}")
    return SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


def decode_secret(secret: str) -> bytes:
    """The HMAC key inside ``whsec_<base64>``. Raises ValueError, without echoing the secret."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret must start with {SECRET_PREFIX!r}")
    body = secret[len(SECRET_PREFIX) :]
    body += "=" * (-len(body) % 4)  # padding is optional, as receivers' libraries accept both
    try:
        key = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a signing secret must be whsec_ followed by base64") from None
    if not _MIN_SECRET_BYTES <= len(key) <= _MAX_SECRET_BYTES:
        raise ValueError(
            f"a signing secret must hold {_MIN_SECRET_BYTES} to {_MAX_SECRET_BYTES} bytes"
        )
    return key


@lru_cache(maxsize=_KEY_CACHE_SIZE)
def _keyed(secret: str) -> hmac.HMAC:
    # a prototype: only ever copied, never updated
    return hmac.new(decode_secret(secret), digestmod="sha256")


def _signed_content(msg_id: str, timestamp_s: int, body: bytes) -> bytes:
    return b"%s.%d.%s" % (msg_id.encode("utf-8"), timestamp_s, body)


def _digest_b64(secret: str, content: bytes) -> str:
    mac = _keyed(secret).copy()
    mac.update(content)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """``v1,<base64 signature>`` of one delivery attempt under one secret."""
    content = _signed_content(msg_id, timestamp_s, body)
    return f"{_VERSION},{_digest_b64(secret, content)}"


def _newest_first(secret: Secret) -> float:
    # The current secret has no end; a retiring one ends later the more recently it was current.
    return float("-inf") if secret.not_after is None else -float(secret.not_after)


def signature_header(
    secrets: Sequence[Secret], now_ms: int, msg_id: str, timestamp_s: int, body: bytes
) -> str:
    """The ``webhook-signature`` value: every secret valid at ``now_ms``, newest first.

    A secret is valid while ``not_after`` is None or later than ``now_ms``. Raises ValueError
    when none is, because hookstream never sends an unsigned delivery.
    """
    if len(secrets) == 1 and secrets[0].not_after is None:  # the usual case: no rotation
        return sign(secrets[0].value, msg_id, timestamp_s, body)
    valid = sorted(
        (s for s in secrets if s.not_after is None or s.not_after > now_ms), key=_newest_first
    )
    if not valid:
        raise ValueError("the subscription has no signing secret valid now")
    content = _signed_content(msg_id, timestamp_s, body)
    seen: set[str] = set()
    parts: list[str] = []
    for secret in valid:
        if secret.value in seen:
            continue
        seen.add(secret.value)
        parts.append(f"{_VERSION},{_digest_b64(secret.value, content)}")
    return " ".join(parts)


def webhook_headers(msg_id: str, timestamp_s: int, signature: str) -> dict[str, str]:
    """The headers hookstream sends with every attempt (D2, D3)."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature,
        "X-Idempotency-Key": msg_id,
        "content-type": "application/json",
    }


def verify(
    secret: str,
    msg_id: str,
    timestamp_s: int,
    body: bytes,
    header: str,
    now_s: int,
    tolerance_s: int = 300,
) -> bool:
    """What a receiver checks: a fresh timestamp and one ``v1`` signature made with ``secret``.

    For hookstream's own tests and probes; receivers normally use the ``standardwebhooks``
    library. Signatures are compared in constant time.
    """
    if abs(now_s - timestamp_s) > tolerance_s:
        return False
    expected = _digest_b64(secret, _signed_content(msg_id, timestamp_s, body))
    matched = False
    for token in header.split():
        version, _, signature = token.partition(",")
        if version == _VERSION and hmac.compare_digest(signature.encode(), expected.encode()):
            matched = True
    return matched
