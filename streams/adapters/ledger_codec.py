"""Read the few fields the ledger index needs from an `Attempt` record, without decoding it.

Materialising the ledger (S6) touches every attempt the dispatchers write, on the worker that
delivers: a full decode through fastavro and the dataclass costs about 20 µs, more than a tenth
of a delivery (SPEC P1). The index needs six leading fields only (the ids, the attempt number,
the start time and the state), so this reads them straight from the Avro body, and the record
itself is stored as it is, to be decoded when somebody reads it. `tests/unit/test_ledger_keys.py`
checks it against the codec for every field value.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from streams.adapters.codec import HEADER_SIZE, MARKER, schema_for
from streams.domain.models import Attempt
from streams.errors import DecodeError

_DOUBLE = struct.Struct("<d")


class AttemptFields(NamedTuple):
    delivery_id: str
    subscription_id: str
    tenant_id: str
    attempt: int
    started_at: int
    state: str


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
        if shift > 63:
            raise DecodeError("invalid_avro", "an Avro long longer than 10 bytes")


def _size(data: bytes, at: int) -> tuple[int, int]:
    """A string's length: one byte for any string under 64 bytes (the common case)."""
    byte = data[at]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), at + 1
    return _varint(data, at)


def _text(data: bytes, at: int) -> tuple[str, int]:
    size, at = _size(data, at)
    end = at + size
    if size < 0 or end > len(data):
        raise DecodeError("invalid_avro", "an Avro string past the end of the record")
    return data[at:end].decode(), end


def _skip(data: bytes, at: int) -> int:
    size, at = _size(data, at)
    if size < 0:
        raise DecodeError("invalid_avro", "an Avro string of negative length")
    return at + size


class IndexFields(NamedTuple):
    """The index fields of an `Attempt` as the ledger's keys use them: the ids already in the
    keys' length-prefixed form (`streams.domain.ledger_keys.text`), so that a record's keys are
    built from slices of its body without a round trip through ``str``."""

    delivery_key: bytes  # text(delivery_id)
    subscription_key: bytes  # text(subscription_id)
    subscription_id: str
    tenant_id: str
    attempt: int
    started_at: int
    state: str


_BE2 = struct.Struct(">H")
_header: list[bytes] = []


def _attempt_header() -> bytes:
    if not _header:
        _header.append(MARKER + schema_for(Attempt).fingerprint)
    return _header[0]


def _long_text(data: bytes, at: int) -> tuple[bytes, int]:
    """A string's bytes and the position after it: the general case of `index_fields`."""
    size, at = _size(data, at)
    end = at + size
    if size < 0 or end > len(data):
        raise DecodeError("invalid_avro", "an Avro string past the end of the record")
    return data[at:end], end


def _fast_varint(data: bytes, at: int) -> tuple[int, int]:
    """`_varint`, unrolled for the lengths of attempt numbers and epoch milliseconds."""
    b = data[at]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), at + 1
    value = b & 0x7F
    end = at
    for shift in (7, 14, 21, 28, 35, 42, 49):
        end += 1
        b = data[end]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), end + 1
    return _varint(data, at)


def index_fields(data: bytes) -> IndexFields:
    """The index fields of one `Attempt` record; `DecodeError` if it is not one.

    Every attempt a worker's dispatchers write passes through here, so the common case, where
    every string before the state is shorter than 64 bytes (its Avro length one byte with bits
    0x81 clear), is read in straight-line code; any other record goes to `_general_fields`. A
    string that would run past the end leaves ``at`` past it, and the state's bounds check
    catches it."""
    if data[:HEADER_SIZE] != (_header[0] if _header else _attempt_header()):
        raise DecodeError("unknown_schema", "not an Attempt record")
    try:
        at = HEADER_SIZE
        n = data[at]
        if n & 0x81:
            return _general_fields(data)
        end = at + 1 + (n >> 1)
        delivery = data[at + 1 : end]
        n = data[end]
        if n & 0x81:
            return _general_fields(data)
        at, end = end, end + 1 + (n >> 1)
        sub = data[at + 1 : end]
        n = data[end]
        if n & 0x81:
            return _general_fields(data)
        at, end = end, end + 1 + (n >> 1)
        tenant = data[at + 1 : end]
        n = data[end]  # event id
        if n & 0x81:
            return _general_fields(data)
        at = end + 1 + (n >> 1)
        n = data[at]  # event type
        if n & 0x81:
            return _general_fields(data)
        attempt, at = _fast_varint(data, at + 1 + (n >> 1))
        n = data[at]  # lane
        if n & 0x81:
            return _general_fields(data)
        started_at, at = _fast_varint(data, at + 1 + (n >> 1))
        at = _skip(data, _skip(data, at + _DOUBLE.size))  # duration_ms, outcome, reason
        state, _ = _text(data, at)
        return _fields(delivery, sub, tenant, attempt, started_at, state)
    except (IndexError, UnicodeDecodeError) as exc:
        raise DecodeError("invalid_avro", f"an Attempt body is not valid: {exc!r}") from exc


def _fields(
    delivery: bytes, sub: bytes, tenant: bytes, attempt: int, started_at: int, state: str
) -> IndexFields:
    """The index fields from the parts read; UnicodeDecodeError if an id is not UTF-8."""
    delivery.decode()  # a key holds valid UTF-8 only
    return IndexFields(
        _BE2.pack(len(delivery)) + delivery,
        _BE2.pack(len(sub)) + sub,
        sub.decode(),
        tenant.decode(),
        attempt,
        started_at,
        state,
    )


def _general_fields(data: bytes) -> IndexFields:
    """`index_fields` of any valid record: long strings too."""
    try:
        delivery, at = _long_text(data, HEADER_SIZE)
        sub, at = _long_text(data, at)
        tenant, at = _long_text(data, at)
        at = _skip(data, _skip(data, at))  # event id and type
        attempt, at = _varint(data, at)
        at = _skip(data, at)  # lane
        started_at, at = _varint(data, at)
        at = _skip(data, _skip(data, at + _DOUBLE.size))  # duration_ms, outcome, reason
        state, _ = _text(data, at)
        if len(delivery) > 0xFFFF or len(sub) > 0xFFFF:
            raise DecodeError("invalid_avro", "an id longer than 65,535 bytes")
        return _fields(delivery, sub, tenant, attempt, started_at, state)
    except (IndexError, UnicodeDecodeError) as exc:
        raise DecodeError("invalid_avro", f"an Attempt body is not valid: {exc!r}") from exc


def attempt_fields(data: bytes) -> AttemptFields:
    """The index fields of one `Attempt` record, as text; `DecodeError` if it is not one."""
    f = index_fields(data)
    delivery_id = f.delivery_key[2:].decode()
    return AttemptFields(
        delivery_id, f.subscription_id, f.tenant_id, f.attempt, f.started_at, f.state
    )
