"""Q2, Q5, F6: decoding what producers write to the events topic, as Avro or JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.adapters import codec
from streams.adapters.ingest import DEFAULT_MAX_EVENT_BYTES, decode_ingest_event, encode_json_event
from streams.domain.models import Event
from streams.errors import DecodeError
from tests.strategies import NOW, doubles, sample_event

JSON = "application/json"


def json_event(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "evt_1",
        "tenant_id": "acme",
        "type": "invoice.paid",
        "timestamp": NOW,
        "data": {"amount": 5, "currency": "EUR"},
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not ...}


def ingest(doc: Any, content_type: str | None = JSON, **kwargs: Any) -> Event:
    return decode_ingest_event(orjson.dumps(doc), content_type, NOW + 7, **kwargs)


def refused(value: bytes, content_type: str | None = JSON, **kwargs: Any) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode_ingest_event(value, content_type, NOW, **kwargs)
    return info.value


def test_q2_json_event_is_normalised() -> None:
    raw = b'{"id":"evt_1", "tenant_id":"acme", "type":"invoice.paid", "timestamp":5,\n'
    raw += b' "data": { "b" : [1, 2],  "a": null }, "extra": "ignored"}'
    event = decode_ingest_event(raw, JSON, NOW)
    assert event == Event("evt_1", "acme", "invoice.paid", 5, '{"b":[1,2],"a":null}', NOW)


@pytest.mark.parametrize(
    "content_type", [JSON, "application/json; charset=utf-8", "Application/JSON", None]
)
def test_q2_json_is_chosen_by_content_type_or_by_missing_marker(content_type: str | None) -> None:
    assert ingest(json_event(), content_type).id == "evt_1"


def test_q2_published_at_defaults_to_ingest_time() -> None:
    assert ingest(json_event()).published_at == NOW + 7
    assert ingest(json_event(published_at=NOW - 3)).published_at == NOW - 3


@pytest.mark.parametrize("content_type", [None, "avro/binary", "application/avro"])
def test_q2_avro_event_is_accepted(content_type: str | None) -> None:
    event = sample_event(data_json='{ "amount" : 5 }')
    decoded = decode_ingest_event(codec.encode(event), content_type, NOW)
    assert decoded == sample_event(data_json='{"amount":5}')
    unknown_time = codec.encode(sample_event(published_at=0))
    assert decode_ingest_event(unknown_time, None, NOW + 9).published_at == NOW + 9


def test_q2_unsupported_content_type_is_refused() -> None:
    assert refused(orjson.dumps(json_event()), "text/plain").reason == "unsupported_content_type"


def test_q2_avro_event_with_bad_data_json_is_refused() -> None:
    error = refused(codec.encode(sample_event(data_json="{nope")), None)
    assert (error.reason, "data_json" in str(error)) == ("invalid_json", True)
    error = refused(codec.encode(sample_event(data_json="[1]")), None)
    assert (error.reason, "data_json" in str(error)) == ("invalid_event", True)
    error = refused(codec.encode(sample_event(tenant_id="acme corp")), None)
    assert (error.reason, "tenant_id" in str(error)) == ("invalid_event", True)


@pytest.mark.parametrize("field", ["id", "tenant_id", "type", "timestamp", "data"])
@pytest.mark.parametrize("absent", [..., None], ids=["missing", "null"])
def test_q2_missing_field_is_named(field: str, absent: Any) -> None:
    error = refused(orjson.dumps(json_event(**{field: absent})))
    assert error.reason == "invalid_event"
    assert repr(field) in str(error)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", ""),
        ("id", "e" * 256),
        ("id", "evt\n1"),
        ("id", 17),
        ("tenant_id", ""),
        ("tenant_id", "acme corp"),
        ("tenant_id", "t" * 129),
        ("tenant_id", ["acme"]),
        ("type", ""),
        ("type", "invoice paid"),
        ("type", "invoice/paid"),
        ("type", "t" * 256),
        ("timestamp", "yesterday"),
        ("timestamp", 1.5),
        ("timestamp", True),
        ("timestamp", -1),
        ("timestamp", 2**64 - 1),
        ("timestamp", "1969-12-31T23:59:59Z"),
        ("timestamp", {"ms": 5}),
        ("data", [1, 2]),
        ("data", "text"),
        ("data", 3),
        ("published_at", "soon"),
        ("published_at", -5),
    ],
)
def test_q2_invalid_field_is_named(field: str, value: Any) -> None:
    error = refused(orjson.dumps(json_event(**{field: value})))
    assert error.reason == "invalid_event"
    assert repr(field) in str(error)


def test_q2_limits_are_inclusive() -> None:
    longest = json_event(id="e" * 255, tenant_id="t" * 128, type="x" * 255)
    assert ingest(longest).id == "e" * 255


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T00:00:00Z", 1_704_067_200_000),
        ("2024-01-01T00:00:00.123+00:00", 1_704_067_200_123),
        ("2024-01-01T02:00:00.5+02:00", 1_704_067_200_500),
        ("2024-01-01T00:00:00", 1_704_067_200_000),  # no offset: read as UTC
        ("2024-01-01", 1_704_067_200_000),
    ],
)
def test_q2_iso_timestamps_parse(text: str, expected: int) -> None:
    assert ingest(json_event(timestamp=text)).timestamp == expected


@given(
    moment=st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9999, 12, 30),
        # whole-second offsets: ISO-8601 offsets have no fractions, and CPython 3.11's
        # fromisoformat drops the microseconds of one ("+00:00:00.000001" reads as UTC)
        timezones=st.integers(-23 * 3600, 23 * 3600).map(
            lambda seconds: timezone(timedelta(seconds=seconds))
        ),
    )
)
def test_q5_iso_timestamps_parse_to_exact_milliseconds(moment: datetime) -> None:
    expected = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    assert ingest(json_event(timestamp=moment.isoformat())).timestamp == expected


def test_f6_oversize_is_refused_for_json_and_avro() -> None:
    doc = orjson.dumps(json_event())
    assert decode_ingest_event(doc, JSON, NOW, max_bytes=len(doc)).id == "evt_1"
    assert refused(doc, max_bytes=len(doc) - 1).reason == "oversize"
    avro = codec.encode(sample_event())
    assert refused(avro, None, max_bytes=len(avro) - 1).reason == "oversize"
    big = orjson.dumps(json_event(data={"blob": "x" * DEFAULT_MAX_EVENT_BYTES}))
    assert refused(big).reason == "oversize"


@pytest.mark.parametrize("raw", [b"", b"{", b"nul", b'{"id": NaN}', b"\xff\xfe", b'"\\ud800"'])
def test_q2_invalid_json_is_refused(raw: bytes) -> None:
    assert refused(raw).reason == "invalid_json"


@pytest.mark.parametrize("doc", [[], "event", 5, None, [json_event()]])
def test_q2_json_that_is_not_an_object_is_refused(doc: Any) -> None:
    assert refused(orjson.dumps(doc)).reason == "invalid_event"


# Valid events, as the JSON round trip promises to keep them.
tenant_ids = st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True)
event_types = st.from_regex(r"[A-Za-z0-9._-]{1,255}", fullmatch=True)
event_ids = st.text(min_size=1, max_size=255).filter(str.isprintable)
millis = st.integers(min_value=0, max_value=253_402_300_799_999)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | doubles | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)


@given(event_ids, tenant_ids, event_types, millis, json_objects, millis.filter(bool))
def test_q5_json_event_round_trip(
    event_id: str, tenant: str, kind: str, at: int, data: dict[str, Any], published: int
) -> None:
    event = Event(event_id, tenant, kind, at, orjson.dumps(data).decode(), published)
    wire = encode_json_event(event)
    assert orjson.loads(wire)["data"] == orjson.loads(event.data_json)
    assert decode_ingest_event(wire, JSON, NOW) == event
    assert decode_ingest_event(wire, None, NOW) == event
    assert decode_ingest_event(codec.encode(event), None, NOW) == event


FIELDS = ["id", "tenant_id", "type", "timestamp", "data", "published_at", "other"]


@given(
    content_type=st.sampled_from([None, JSON, "avro/binary", "text/plain"]),
    value=st.binary(max_size=300)
    | st.dictionaries(st.sampled_from(FIELDS), json_values).map(orjson.dumps)
    | json_values.map(orjson.dumps),
)
def test_q5_arbitrary_input_is_an_event_or_a_decode_error(
    content_type: str | None, value: bytes
) -> None:
    try:
        event = decode_ingest_event(value, content_type, NOW, max_bytes=256)
    except DecodeError as exc:
        assert exc.reason
        return
    assert isinstance(orjson.loads(event.data_json), dict)
    assert codec.decode(Event, codec.encode(event)) == event
