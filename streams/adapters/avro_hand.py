"""Avro binary written by hand for the records written on every delivery's path (SPEC §5).

The router's `Event` (archived, then spliced into each of its deliveries) and `Delivery`, and
the dispatcher's `Attempt`, are encoded here rather than by fastavro's generic writer, which
takes 11.4 µs for an Attempt against 4.2 here and 4.8-7.7 µs for the benchmark's 1 KB Event
against 2.4 (`python -m bench.codec`; docs/benchmarks.md, "Hand-written Attempt encoder"). Reading
stays with fastavro: a `Delivery` read by hand took 12.2 µs against its 13.8, not worth a second
reader to keep in step with the schema. A record's encoding is its fields' encodings in schema
order; a long is a zigzag varint, a double 8 bytes little-endian, a string its UTF-8 length then
its bytes, a union the branch index then the value. `streams.adapters.codec` uses these only
when its schema is the repository's own; tests/unit/test_codec.py checks the bytes against
fastavro's.
"""

from __future__ import annotations

import struct
from enum import StrEnum

from streams.domain.models import Attempt, Delivery, Event

# Longs are written 14 bits at a time from two tables (16,384 entries each, about 1 MB): every
# pair of 7-bit groups but the last carries both continuation bits, the last pair only its
# first's. A millisecond timestamp (six bytes) takes 0.41 µs against 0.84 a group at a time, a
# two-byte length 0.13 against 0.45 (timeit, best of 5 x 200,000); in a saturated worker's GIL
# samples the loop a group at a time was 5.9% of the event loop (py-spy, 2026-12-05).
_MIDDLE_PAIR = [bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80)) for v in range(0x4000)]
_LAST_PAIR = [
    bytes(((v & 0x7F) | 0x80, v >> 7)) if v >= 0x80 else bytes((v,)) for v in range(0x4000)
]


def _long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)  # zigzag: small magnitudes of either sign in few bytes
    if z < 0x4000:
        return _LAST_PAIR[z]
    out = _MIDDLE_PAIR[z & 0x3FFF]
    z >>= 14
    while z >= 0x4000:
        out += _MIDDLE_PAIR[z & 0x3FFF]
        z >>= 14
    return out + _LAST_PAIR[z]


def _string(text: str) -> bytes:
    raw = text.encode()
    return _long(len(raw)) + raw


_DOUBLE = struct.Struct("<d").pack
_NULL = b"\x00"
_SECOND_BRANCH = b"\x02"


def _optional_long(n: int | None) -> bytes:
    return _NULL if n is None else _SECOND_BRANCH + _long(n)


def _optional_string(text: str | None) -> bytes:
    return _NULL if text is None else _SECOND_BRANCH + _string(text)


# Enum values are few: each one's encoded string, looked up instead of encoded per record.
_ENUM_STRINGS: dict[StrEnum, bytes] = {}


def _enum_string(member: StrEnum) -> bytes:
    found = _ENUM_STRINGS.get(member)
    if found is None:
        found = _ENUM_STRINGS[member] = _string(member.value)
    return found


def attempt_body(a: Attempt) -> bytes:
    s = _string
    return b"".join(
        (
            s(a.delivery_id),
            s(a.subscription_id),
            s(a.tenant_id),
            s(a.event_id),
            s(a.event_type),
            _long(a.attempt),
            _enum_string(a.lane),
            _long(a.started_at),
            _DOUBLE(a.duration_ms),
            _enum_string(a.outcome),
            s(a.reason),
            _enum_string(a.state),
            _optional_long(a.http_status),
            _optional_string(a.error),
            _optional_string(a.response_excerpt),
            _optional_long(a.next_retry_at),
            _long(a.published_at),
            _optional_long(a.first_attempt_at),
        )
    )


def delivery_body(v: Delivery, event_body: bytes) -> bytes:
    return b"".join(
        (
            _string(v.delivery_id),
            _string(v.subscription_id),
            _string(v.tenant_id),
            event_body,
            _long(v.attempt),
            _string(v.lane.value),
            _long(v.routed_at),
            _optional_long(v.first_attempt_at),
            _long(v.due_at),
        )
    )


def event_body(e: Event) -> bytes:
    return b"".join(
        (
            _string(e.id),
            _string(e.tenant_id),
            _string(e.type),
            _long(e.timestamp),
            _string(e.data_json),
            _long(e.published_at),
        )
    )
