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


def attempt_fields(data: bytes) -> AttemptFields:
    """The index fields of one `Attempt` record; `DecodeError` if it is not one."""
    if data[:2] != MARKER or data[2:HEADER_SIZE] != schema_for(Attempt).fingerprint:
        raise DecodeError("unknown_schema", "not an Attempt record")
    try:
        delivery_id, at = _text(data, HEADER_SIZE)
        sub_id, at = _text(data, at)
        tenant_id, at = _text(data, at)
        at = _skip(data, _skip(data, at))  # event id and type
        attempt, at = _varint(data, at)
        at = _skip(data, at)  # lane
        started_at, at = _varint(data, at)
        at = _skip(data, _skip(data, at + _DOUBLE.size))  # duration_ms, outcome, reason
        state, _ = _text(data, at)
    except (IndexError, UnicodeDecodeError) as exc:
        raise DecodeError("invalid_avro", f"an Attempt body is not valid: {exc!r}") from exc
    return AttemptFields(delivery_id, sub_id, tenant_id, attempt, started_at, state)
