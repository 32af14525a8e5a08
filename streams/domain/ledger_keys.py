"""Keys of the ledger and dead-letter state (S6), and the cursors of their pages. Pure.

Every key starts with the Kafka partition of its subscription (2 bytes, big-endian) and a kind
byte, so a partition's state is one key range and every read is a point read or a short range
scan inside one partition. Strings are length-prefixed (2 bytes), times are big-endian
milliseconds, and "newest first" orders use ``NEWEST - ms`` so that RocksDB's ascending order is
newest first.

==========  =======================================================  ===========================
kind        key after ``partition | kind``                           value
==========  =======================================================  ===========================
``m``       delivery id                                              `DeliveryMeta` + attempts
``j``       subscription, state, newest(first attempt), delivery id  empty (by state)
``q``       subscription, newest(dead at), offset                    tenant, reason, letter
``t``       tenant, newest(dead at), offset                          subscription
``a``       newest(dead at), offset                                  subscription
``y``       dead at ms, offset                                       subscription, tenant
``l``       delivery id, offset                                      subscription, newest(dead)
``o``       topic kind (``A`` attempts, ``D`` dlq)                   next offset to read
==========  =======================================================  ===========================

A delivery has two entries: its record and its place in its subscription's list of its state
(one point read and two puts when it is new). A subscription's list of every state is the
merge of its by-state lists (each in the same order), and expiry walks those lists from their
oldest end: neither has an index of its own. The key `FORMAT_KEY` (outside every partition)
holds `FORMAT`; a store of another format is rebuilt from the topics.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from typing import Final

import orjson

from streams.errors import ValidationError

NEWEST: Final = (1 << 63) - 1
_BE2 = struct.Struct(">H")
_BE4 = struct.Struct(">I")
_BE8 = struct.Struct(">Q")

META, BY_STATE = b"m", b"j"
LETTER, TENANT_LETTER, ANY_LETTER, LETTER_EXPIRY, DELIVERY_LETTER = b"q", b"t", b"a", b"y", b"l"
OFFSET = b"o"
ATTEMPTS_TOPIC, DLQ_TOPIC = b"A", b"D"
#: The store's format: 2 drops format 1's all-states (``i``) and expiry (``x``) indexes.
FORMAT: Final = b"2"
FORMAT_KEY: Final = b"\xff\xffv"

#: One byte per delivery state in the by-state index.
STATE_CODES: Final = {
    "pending": b"p",
    "delivering": b"d",
    "success": b"s",
    "error": b"e",
    "exhausted": b"x",
    "dead": b"k",
}


def text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")[:0xFFFF]
    return _BE2.pack(len(raw)) + raw


def read_text(data: bytes, at: int) -> tuple[str, int]:
    (size,) = _BE2.unpack_from(data, at)
    end = at + 2 + size
    return data[at + 2 : end].decode("utf-8", "surrogatepass"), end


def be8(value: int) -> bytes:
    return _BE8.pack(max(0, min(value, NEWEST)))


def newest(ms: int) -> bytes:
    return be8(NEWEST - max(0, ms))


def read_be8(data: bytes, at: int) -> int:
    return int(_BE8.unpack_from(data, at)[0])


def prefix(partition: int, kind: bytes) -> bytes:
    return _BE2.pack(partition) + kind


def upper(start: bytes) -> bytes:
    """The smallest key after every key that starts with ``start``."""
    return start + b"\xff" * 32


# --- deliveries -------------------------------------------------------------------------------


@dataclass(slots=True)
class DeliveryMeta:
    """What the index keeps of a delivery beside its attempts: enough to move its index keys."""

    subscription_id: str
    tenant_id: str
    state: str
    first_at: int  # the first attempt this ledger saw: the delivery's place in its lists
    last_at: int  # the latest attempt: the delivery expires with it


def meta_key(partition: int, delivery_id: str) -> bytes:
    return prefix(partition, META) + text(delivery_id)


def state_key(partition: int, sub_id: str, state: str, first_at: int, delivery_id: str) -> bytes:
    return (
        prefix(partition, BY_STATE)
        + text(sub_id)
        + STATE_CODES[state]
        + newest(first_at)
        + text(delivery_id)
    )


def encode_meta(meta: DeliveryMeta, attempts: list[bytes]) -> bytes:
    head = orjson.dumps(
        [meta.subscription_id, meta.tenant_id, meta.state, meta.first_at, meta.last_at]
    )
    parts = [_BE4.pack(len(head)), head]
    for raw in attempts:
        parts.append(_BE4.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def decode_meta(value: bytes) -> tuple[DeliveryMeta, list[bytes]]:
    (size,) = _BE4.unpack_from(value, 0)
    sub_id, tenant_id, state, first_at, last_at = orjson.loads(value[4 : 4 + size])
    meta = DeliveryMeta(sub_id, tenant_id, state, first_at, last_at)
    attempts: list[bytes] = []
    at = 4 + size
    while at < len(value):
        (length,) = _BE4.unpack_from(value, at)
        attempts.append(value[at + 4 : at + 4 + length])
        at += 4 + length
    return meta, attempts


def delivery_of_index(key: bytes, sub_len: int) -> tuple[int, str]:
    """(first attempt ms, delivery id) of a ``j`` key (``sub_len`` = len of its subscription
    part, length prefix and state code included)."""
    at = 3 + sub_len
    first_at = NEWEST - read_be8(key, at)
    delivery_id, _ = read_text(key, at + 8)
    return first_at, delivery_id


# --- dead letters -----------------------------------------------------------------------------


def letter_key(partition: int, sub_id: str, dead_at: int, offset: int) -> bytes:
    return prefix(partition, LETTER) + text(sub_id) + newest(dead_at) + be8(offset)


def tenant_letter_key(partition: int, tenant_id: str, dead_at: int, offset: int) -> bytes:
    return prefix(partition, TENANT_LETTER) + text(tenant_id) + newest(dead_at) + be8(offset)


def any_letter_key(partition: int, dead_at: int, offset: int) -> bytes:
    return prefix(partition, ANY_LETTER) + newest(dead_at) + be8(offset)


def letter_expiry_key(partition: int, dead_at: int, offset: int) -> bytes:
    return prefix(partition, LETTER_EXPIRY) + be8(dead_at) + be8(offset)


def delivery_letter_key(partition: int, delivery_id: str, offset: int) -> bytes:
    return prefix(partition, DELIVERY_LETTER) + text(delivery_id) + be8(offset)


def offset_key(partition: int, topic: bytes) -> bytes:
    return prefix(partition, OFFSET) + topic


# --- cursors ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class LetterPosition:
    """A dead letter's place in every list: newest first, then partition, then offset."""

    newest: int  # NEWEST - dead_at
    partition: int
    offset: int

    @classmethod
    def of(cls, dead_at: int, partition: int, offset: int) -> LetterPosition:
        return cls(NEWEST - dead_at, partition, offset)

    def start_in(self, partition: int) -> tuple[int, int]:
        """Where a scan of ``partition`` resumes after this position: (newest, offset) of the
        first key it may return (each partition's keys are ordered by (newest, offset))."""
        if partition == self.partition:
            return self.newest, self.offset + 1
        if partition < self.partition:
            return self.newest + 1, 0
        return self.newest, 0


def encode_cursor(values: list[int | str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(values)).decode().rstrip("=")


def decode_cursor(cursor: str, shape: tuple[type, ...]) -> list[int | str]:
    """The values of a cursor this API returned, checked against ``shape``; a 422 naming
    ``cursor`` otherwise."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = orjson.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        values = None
    if (
        isinstance(values, list)
        and len(values) == len(shape)
        and all(
            isinstance(v, t) and not isinstance(v, bool) for v, t in zip(values, shape, strict=True)
        )
        and all(v >= 0 for v in values if isinstance(v, int))
    ):
        return values
    raise ValidationError({"cursor": "is not a cursor this API returned"})
