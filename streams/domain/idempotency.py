"""The idempotency key of a delivery (SPEC D2).

A delivery is one (event, subscription) pair, and its id is a pure function of the two ids. Every
attempt, retry, DLQ replay, backfill and replay of the pair therefore carries the same key, which
receivers see as ``webhook-id`` and ``X-Idempotency-Key`` and use to drop duplicates. Resetting the
dispatcher's offsets (R4) is safe for the same reason.

The id is ``msg_`` followed by 40 lower-case hex digits: the first 160 bits of a SHA-256 over a
length-prefixed encoding of both ids, so ``("a.b", "c")`` and ``("a", "b.c")`` never share a key.
It is 44 ASCII characters, fits any header, and is a valid Standard Webhooks message id. Hex
rather than base32 or base64: it is computed in C (the router derives one id per fan-out), and
a receiver that stores keys in a case-insensitive column still sees every key as distinct.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["DELIVERY_ID_PATTERN", "delivery_id"]

# Versioned, so a future change of scheme can never collide with keys already sent.
_DOMAIN = b"hookstream.delivery-id.v1\x00"
_DIGEST_BYTES = 20  # 160 bits: 40 hex digits

#: What every delivery id looks like.
DELIVERY_ID_PATTERN = re.compile(r"msg_[0-9a-f]{40}")


def _field(text: str) -> bytes:
    # surrogatepass keeps the function total over every Python string
    raw = text.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(8, "big") + raw


def delivery_id(event_id: str, subscription_id: str) -> str:
    """The stable idempotency key of delivering ``event_id`` to ``subscription_id``."""
    digest = hashlib.sha256(_DOMAIN + _field(event_id) + _field(subscription_id)).digest()
    return "msg_" + digest[:_DIGEST_BYTES].hex()
