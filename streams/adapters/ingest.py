"""Ingest decoding: the events topic accepts producers' events as Avro or JSON (§4, Q2, Q5, F6).

Producers may publish an `Event` with Avro single-object encoding (see `streams.adapters.codec`)
or as a JSON document with a content-type header. Either way the event is validated and
normalised here; anything else is refused with a `DecodeError` whose reason is the DLQ reason
code: ``invalid_json``, ``invalid_event``, ``oversize``, ``unsupported_content_type``, or one of
the Avro reasons of the codec.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import orjson

from streams.adapters import codec
from streams.domain.models import Event
from streams.errors import DecodeError

DEFAULT_MAX_EVENT_BYTES = 256 * 1024  # F6; the worker passes settings.max_payload_bytes

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
        return not value.startswith(codec.MARKER)
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
    event = codec.decode(Event, value)
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
