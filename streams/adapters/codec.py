"""Avro encoding of every topic value, and ingest decoding of producers' events (§4, Q2, Q5).

Every record hookstream writes to Kafka uses Avro single-object encoding: the marker ``C3 01``,
the 8-byte little-endian CRC-64-AVRO fingerprint of the schema's parsing canonical form, then the
Avro binary body. A consumer therefore knows which schema wrote a record before reading it, and a
record of the wrong kind, or one from an unknown schema version, is refused rather than misread.

The schemas are the standard ``.avsc`` files in ``schemas/``; each is self-contained, so any Avro
tool can use one file on its own. They are parsed once, on first use.

Decoding bad bytes never raises anything but `DecodeError`, whose ``reason`` is the DLQ reason code:

- ``invalid_avro``: no marker, a truncated body, trailing bytes, or a body that is not Avro;
- ``unknown_schema``: the fingerprint is not the expected record's schema;
- ``invalid_enum``: a status, lane, outcome or state this release does not know;
- ``invalid_json``, ``invalid_event``, ``oversize``, ``unsupported_content_type``: ingest only.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from io import BytesIO
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import orjson
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import SchemaParseException, fingerprint, to_parsing_canonical_form

from streams.domain.models import (
    Attempt,
    ControlEvent,
    DeadLetter,
    Delivery,
    DeliveryState,
    Event,
    HealthOutcome,
    Lane,
    Notification,
    OutcomeClass,
    Secret,
    Subscription,
    SubscriptionStatus,
)
from streams.errors import ConfigError, DecodeError

R = TypeVar("R")
AvroDict = dict[str, Any]

MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8
DEFAULT_MAX_EVENT_BYTES = 256 * 1024  # F6; the worker passes settings.max_payload_bytes

# The file of each record's schema, under the schemas directory.
SCHEMA_FILES: Mapping[type[Any], str] = {
    Event: "event.avsc",
    Subscription: "subscription.avsc",
    Delivery: "delivery.avsc",
    Attempt: "attempt.avsc",
    DeadLetter: "dead_letter.avsc",
    HealthOutcome: "health_outcome.avsc",
    ControlEvent: "control_event.avsc",
    Notification: "notification.avsc",
}


@dataclass(frozen=True, slots=True)
class RecordSchema:
    """One record's parsed schema and its single-object header."""

    record_type: type[Any]
    name: str  # the full Avro name, such as io.hookstream.Event
    parsed: AvroDict  # fastavro's parsed form, ready for the reader and writer
    canonical_form: str
    fingerprint: bytes  # CRC-64-AVRO, little-endian, as it appears in the header
    header: bytes  # MARKER + fingerprint


def schemas_dir(override: Path | None = None) -> Path:
    """Where the ``.avsc`` files live: ``override`` if given, else ``schemas/`` in the repo.

    This is the one place that knows; if the schemas are ever packaged, only this changes.
    """
    if override is not None:
        return override
    # streams/adapters/codec.py -> the repo root holds both streams/ and schemas/
    return Path(__file__).resolve().parent.parent.parent / "schemas"


def load_schemas(directory: Path | None = None) -> dict[type[Any], RecordSchema]:
    """Read and parse every record's schema. Raises `ConfigError` naming a missing or bad file."""
    root = schemas_dir(directory)
    loaded: dict[type[Any], RecordSchema] = {}
    for record_type, filename in SCHEMA_FILES.items():
        path = root / filename
        try:
            parsed = cast(AvroDict, parse_schema(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, SchemaParseException) as exc:
            raise ConfigError(str(path), f"not a readable Avro schema: {exc}") from exc
        canonical = to_parsing_canonical_form(parsed)
        digest = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        loaded[record_type] = RecordSchema(
            record_type=record_type,
            name=str(parsed["name"]),
            parsed=parsed,
            canonical_form=canonical,
            fingerprint=digest,
            header=MARKER + digest,
        )
    return loaded


@functools.cache
def _default_schemas() -> dict[type[Any], RecordSchema]:
    return load_schemas()


def schema_for(cls: type[Any]) -> RecordSchema:
    """The schema of one record class, from the default schemas directory."""
    return _default_schemas()[cls]


# ---------------------------------------------------------------------------------------------
# Records to Avro dicts and back. Written out by hand: no deep copies, and enums and tuples come
# back as the same types they went in as.


def _enum_table(enum: type[StrEnum]) -> dict[str, Any]:
    return {member.value: member for member in enum}


_STATUSES = _enum_table(SubscriptionStatus)
_LANES = _enum_table(Lane)
_OUTCOMES = _enum_table(OutcomeClass)
_STATES = _enum_table(DeliveryState)


def _member(table: dict[str, Any], value: str, field: str) -> Any:
    member = table.get(value)
    if member is None:
        raise DecodeError("invalid_enum", f"field {field!r} has unknown value {value!r}")
    return member


def _event_to(e: Event) -> AvroDict:
    return {
        "id": e.id,
        "tenant_id": e.tenant_id,
        "type": e.type,
        "timestamp": e.timestamp,
        "data_json": e.data_json,
        "published_at": e.published_at,
    }


def _event_from(d: AvroDict) -> Event:
    return Event(**d)


def _subscription_to(s: Subscription) -> AvroDict:
    return {
        "id": s.id,
        "tenant_id": s.tenant_id,
        "name": s.name,
        "url": s.url,
        "filters": s.filters,
        "secrets": [{"value": x.value, "not_after": x.not_after} for x in s.secrets],
        "status": s.status.value,
        "status_reason": s.status_reason,
        "owner_emails": s.owner_emails,
        "notify_url": s.notify_url,
        "rate_limit": s.rate_limit,
        "max_in_flight": s.max_in_flight,
        "timeout_s": s.timeout_s,
        "headers": [{"name": name, "value": value} for name, value in s.headers],
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "suspended_at": s.suspended_at,
    }


def _subscription_from(d: AvroDict) -> Subscription:
    d["filters"] = tuple(d["filters"])
    d["secrets"] = tuple(Secret(x["value"], x["not_after"]) for x in d["secrets"])
    d["status"] = _member(_STATUSES, d["status"], "status")
    d["owner_emails"] = tuple(d["owner_emails"])
    d["headers"] = tuple((h["name"], h["value"]) for h in d["headers"])
    return Subscription(**d)


def _delivery_to(v: Delivery) -> AvroDict:
    return {
        "delivery_id": v.delivery_id,
        "subscription_id": v.subscription_id,
        "tenant_id": v.tenant_id,
        "event": _event_to(v.event),
        "attempt": v.attempt,
        "lane": v.lane.value,
        "routed_at": v.routed_at,
        "first_attempt_at": v.first_attempt_at,
        "due_at": v.due_at,
    }


def _delivery_from(d: AvroDict) -> Delivery:
    d["event"] = Event(**d["event"])
    d["lane"] = _member(_LANES, d["lane"], "lane")
    return Delivery(**d)


def _attempt_to(a: Attempt) -> AvroDict:
    return {
        "delivery_id": a.delivery_id,
        "subscription_id": a.subscription_id,
        "tenant_id": a.tenant_id,
        "event_id": a.event_id,
        "event_type": a.event_type,
        "attempt": a.attempt,
        "lane": a.lane.value,
        "started_at": a.started_at,
        "duration_ms": a.duration_ms,
        "outcome": a.outcome.value,
        "reason": a.reason,
        "state": a.state.value,
        "http_status": a.http_status,
        "error": a.error,
        "response_excerpt": a.response_excerpt,
        "next_retry_at": a.next_retry_at,
        "published_at": a.published_at,
        "first_attempt_at": a.first_attempt_at,
    }


def _attempt_from(d: AvroDict) -> Attempt:
    d["lane"] = _member(_LANES, d["lane"], "lane")
    d["outcome"] = _member(_OUTCOMES, d["outcome"], "outcome")
    d["state"] = _member(_STATES, d["state"], "state")
    return Attempt(**d)


def _dead_letter_to(x: DeadLetter) -> AvroDict:
    return {
        "reason": x.reason,
        "dead_at": x.dead_at,
        "tenant_id": x.tenant_id,
        "subscription_id": x.subscription_id,
        "delivery": None if x.delivery is None else _delivery_to(x.delivery),
        "raw": x.raw,
        "attempts": x.attempts,
        "last_status": x.last_status,
        "last_error": x.last_error,
        "response_excerpt": x.response_excerpt,
        "first_attempt_at": x.first_attempt_at,
    }


def _dead_letter_from(d: AvroDict) -> DeadLetter:
    if d["delivery"] is not None:
        d["delivery"] = _delivery_from(d["delivery"])
    return DeadLetter(**d)


def _health_to(h: HealthOutcome) -> AvroDict:
    return {
        "subscription_id": h.subscription_id,
        "delivery_id": h.delivery_id,
        "outcome": h.outcome.value,
        "reason": h.reason,
        "at": h.at,
        "origin": h.origin,
        "attempts": h.attempts,
        "http_status": h.http_status,
        "error": h.error,
    }


def _health_from(d: AvroDict) -> HealthOutcome:
    d["outcome"] = _member(_OUTCOMES, d["outcome"], "outcome")
    return HealthOutcome(**d)


def _control_to(c: ControlEvent) -> AvroDict:
    return {
        "subscription_id": c.subscription_id,
        "kind": c.kind,
        "at": c.at,
        "reason": c.reason,
        "payload_json": c.payload_json,
    }


def _notification_to(n: Notification) -> AvroDict:
    return {
        "notification_id": n.notification_id,
        "subscription_id": n.subscription_id,
        "kind": n.kind,
        "at": n.at,
        "payload_json": n.payload_json,
        "recipients": n.recipients,
    }


def _notification_from(d: AvroDict) -> Notification:
    d["recipients"] = tuple(d["recipients"])
    return Notification(**d)


_CONVERTERS: Mapping[type[Any], tuple[Callable[[Any], AvroDict], Callable[[AvroDict], Any]]] = {
    Event: (_event_to, _event_from),
    Subscription: (_subscription_to, _subscription_from),
    Delivery: (_delivery_to, _delivery_from),
    Attempt: (_attempt_to, _attempt_from),
    DeadLetter: (_dead_letter_to, _dead_letter_from),
    HealthOutcome: (_health_to, _health_from),
    ControlEvent: (_control_to, lambda d: ControlEvent(**d)),
    Notification: (_notification_to, _notification_from),
}


# ---------------------------------------------------------------------------------------------
# Single-object encoding.


class Codec:
    """Encodes and decodes hookstream's records with one set of schemas."""

    def __init__(self, schemas: Mapping[type[Any], RecordSchema]) -> None:
        self._schemas = dict(schemas)
        self._names = {s.fingerprint: s.name for s in schemas.values()}

    def encode(self, record: object) -> bytes:
        """The single-object encoding of ``record``, deterministic for equal records."""
        cls = type(record)
        schema = self._schemas.get(cls)
        if schema is None:
            raise TypeError(f"hookstream has no Avro schema for {cls.__name__}")
        buf = BytesIO()
        buf.write(schema.header)
        schemaless_writer(buf, schema.parsed, _CONVERTERS[cls][0](record))
        return buf.getvalue()

    def decode(self, cls: type[R], data: bytes) -> R:
        """Read one ``cls`` record. Raises `DecodeError` for anything that is not exactly one."""
        schema = self._schemas.get(cls)
        if schema is None:
            raise TypeError(f"hookstream has no Avro schema for {cls.__name__}")
        self._check_header(schema, data)
        buf = BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            raw = schemaless_reader(buf, schema.parsed, None)
        except Exception as exc:  # fastavro signals bad bytes with many builtin exceptions
            raise DecodeError("invalid_avro", f"{schema.name} body is not valid: {exc!r}") from exc
        extra = len(data) - buf.tell()
        if extra:
            raise DecodeError("invalid_avro", f"{extra} trailing bytes after a {schema.name}")
        return cast(R, _CONVERTERS[cls][1](cast(AvroDict, raw)))

    def _check_header(self, schema: RecordSchema, data: bytes) -> None:
        if len(data) < HEADER_SIZE or data[:2] != MARKER:
            raise DecodeError("invalid_avro", "not Avro single-object encoded (no C3 01 header)")
        found = data[2:HEADER_SIZE]
        if found != schema.fingerprint:
            other = self._names.get(found, "an unknown schema")
            raise DecodeError(
                "unknown_schema",
                f"expected {schema.name} (fingerprint {schema.fingerprint.hex()}), "
                f"got {other} (fingerprint {found.hex()})",
            )


@functools.cache
def default_codec() -> Codec:
    """The codec over the schemas in the default directory, built once."""
    return Codec(_default_schemas())


def encode(record: object) -> bytes:
    """Encode any hookstream record for its topic (single-object Avro)."""
    return default_codec().encode(record)


def decode(cls: type[R], data: bytes) -> R:
    """Decode one ``cls`` record from its topic. Raises only `DecodeError` for bad bytes."""
    return default_codec().decode(cls, data)


# ---------------------------------------------------------------------------------------------
# Ingest: the events topic accepts Avro or JSON from producers.

_JSON_TYPES = frozenset({"application/json", "text/json"})
_AVRO_TYPES = frozenset({"avro/binary", "application/avro", "application/vnd.apache.avro+binary"})
_TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")
_TYPE = re.compile(r"[A-Za-z0-9._-]{1,255}")
_MAX_ID = 255
_MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: past that, a unit mix-up
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def _is_json(value: bytes, content_type: str | None) -> bool:
    if content_type is None or not content_type.strip():
        return not value.startswith(MARKER)
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _JSON_TYPES or media.endswith("+json"):
        return True
    if media in _AVRO_TYPES:
        return False
    raise DecodeError(
        "unsupported_content_type",
        f"content type {content_type!r} is neither application/json nor avro/binary",
    )


def decode_ingest_event(
    value: bytes,
    content_type: str | None,
    now_ms: int,
    *,
    max_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Event:
    """Decode and validate one record a producer published to the events topic.

    JSON is read when the content type says so, or when there is none and the value does not
    start with the Avro marker. ``data`` must be a JSON object (what webhook receivers expect to
    find in the body's ``data``), and is kept as compact JSON text. A missing ``published_at``,
    or 0, becomes ``now_ms``. Fields hookstream does not know are ignored, so producers
    may add their own. Raises `DecodeError` naming the bad field.
    """
    if len(value) > max_bytes:
        raise DecodeError("oversize", f"event is {len(value)} bytes; the limit is {max_bytes}")
    if _is_json(value, content_type):
        return _event_from_json(value, now_ms)
    event = decode(Event, value)
    data = _parse_json(event.data_json, "data_json")
    return _validated(
        event_id=event.id,
        tenant_id=event.tenant_id,
        event_type=event.type,
        timestamp=event.timestamp,
        data=data,
        published_at=event.published_at or now_ms,
        data_field="data_json",
    )


def _parse_json(text: bytes | str, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("invalid_json", f"{what} is not valid JSON: {exc}") from exc


def _event_from_json(value: bytes, now_ms: int) -> Event:
    doc = _parse_json(value, "event")
    if not isinstance(doc, dict):
        raise DecodeError("invalid_event", "event must be a JSON object")
    for name in ("id", "tenant_id", "type", "timestamp", "data"):
        if doc.get(name) is None:
            raise DecodeError("invalid_event", f"missing field {name!r}")
    published = doc.get("published_at")
    published_ms = 0 if published is None else _time_ms(published, "published_at")
    return _validated(
        event_id=doc["id"],
        tenant_id=doc["tenant_id"],
        event_type=doc["type"],
        timestamp=_time_ms(doc["timestamp"], "timestamp"),
        data=doc["data"],
        published_at=published_ms or now_ms,
        data_field="data",
    )


def _validated(
    *,
    event_id: Any,
    tenant_id: Any,
    event_type: Any,
    timestamp: int,
    data: Any,
    published_at: int,
    data_field: str,
) -> Event:
    if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_ID:
        _invalid("id", f"must be a string of 1 to {_MAX_ID} characters")
    if not event_id.isprintable():
        _invalid("id", "must contain printable characters only")
    if not isinstance(tenant_id, str) or _TENANT.fullmatch(tenant_id) is None:
        _invalid("tenant_id", "must be 1 to 128 characters of A-Z a-z 0-9 . _ -")
    if not isinstance(event_type, str) or _TYPE.fullmatch(event_type) is None:
        _invalid("type", "must be 1 to 255 characters of A-Z a-z 0-9 . _ -")
    _check_time(timestamp, "timestamp")
    _check_time(published_at, "published_at")
    if not isinstance(data, dict):
        _invalid(data_field, "must be a JSON object")
    return Event(
        id=event_id,
        tenant_id=tenant_id,
        type=event_type,
        timestamp=timestamp,
        data_json=orjson.dumps(data).decode(),
        published_at=published_at,
    )


def _invalid(field: str, problem: str) -> NoReturn:
    raise DecodeError("invalid_event", f"field {field!r} {problem}")


def _check_time(ms: int, field: str) -> None:
    if not 0 <= ms <= _MAX_TIME_MS:
        _invalid(field, f"is {ms}, outside 0 to {_MAX_TIME_MS} milliseconds since the epoch")


def _time_ms(value: Any, field: str) -> int:
    """Milliseconds since the epoch from an integer, or from an ISO-8601 string (UTC if naive)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            _invalid(field, f"{value[:64]!r} is not an ISO-8601 time")
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return (moment - _EPOCH) // _ONE_MS
    _invalid(field, "must be integer milliseconds since the epoch or an ISO-8601 string")


def encode_json_event(event: Event) -> bytes:
    """The JSON form of an event that `decode_ingest_event` reads back (``hookstream publish``)."""
    return orjson.dumps(
        {
            "id": event.id,
            "tenant_id": event.tenant_id,
            "type": event.type,
            "timestamp": event.timestamp,
            "data": orjson.Fragment(event.data_json),
            "published_at": event.published_at,
        }
    )
