"""§4, Q2, Q5: Avro single-object encoding of every topic value.

Ingest decoding (Avro or JSON on the events topic) is in test_ingest_decoding.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from io import BytesIO
from pathlib import Path
from typing import Any

import msgspec
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from streams.adapters import avro_hand, codec
from streams.domain.models import (
    AnalyticsDigest,
    Attempt,
    ControlEvent,
    DeadLetter,
    Delivery,
    DeliveryState,
    Event,
    HealthOutcome,
    Lane,
    OutcomeClass,
    Subscription,
)
from streams.errors import ConfigError, DecodeError
from tests.strategies import (
    NOW,
    RECORDS,
    any_record,
    attempts,
    deliveries,
    record_classes,
    sample_attempt,
    sample_event,
)

# ---------------------------------------------------------------------------------------------
# The schema files (§4).


def crc64_avro(data: bytes) -> bytes:
    """The Avro spec's 64-bit Rabin fingerprint, written out independently of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp.to_bytes(8, "little")


def raw_schema(cls: type[Any]) -> dict[str, Any]:
    path = codec.schemas_dir() / codec.SCHEMA_FILES[cls]
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def record_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every field of a schema, nested records included."""
    found: list[dict[str, Any]] = []
    for item in schema["fields"]:
        found.append(item)
        for branch in item["type"] if isinstance(item["type"], list) else [item["type"]]:
            if isinstance(branch, dict) and branch.get("type") == "record":
                found.extend(record_fields(branch))
            if isinstance(branch, dict) and isinstance(branch.get("items"), dict):
                found.extend(record_fields(branch["items"]))
    return found


def nested(schema: dict[str, Any], field: str) -> dict[str, Any]:
    item = next(f for f in schema["fields"] if f["name"] == field)
    kind = item["type"]
    found: dict[str, Any] = kind[1] if isinstance(kind, list) else kind
    return found


def model_fields(cls: type[Any]) -> list[tuple[str, Any]]:
    """Each field of a record class, dataclass or Struct, with its default (`_NONE` if none)."""
    if dataclasses.is_dataclass(cls):
        missing: Any = dataclasses.MISSING
        found: list[tuple[str, Any, Any]] = [
            (f.name, f.default, f.default_factory) for f in dataclasses.fields(cls)
        ]
    else:
        missing = msgspec.NODEFAULT
        found = [(f.name, f.default, f.default_factory) for f in structs.fields(cls)]
    return [
        (name, default if default is not missing else _NONE if make is missing else make())
        for name, default, make in found
    ]


_NONE = object()


@record_classes
def test_s4_every_record_has_a_schema_with_matching_fields(cls: type[Any]) -> None:
    schema = raw_schema(cls)
    assert schema["namespace"] == "io.hookstream"
    assert schema["name"] == cls.__name__
    assert [f["name"] for f in schema["fields"]] == [name for name, _ in model_fields(cls)]
    assert schema["doc"]
    assert all(f.get("doc") for f in record_fields(schema)), "every field documents itself"


@record_classes
def test_s4_defaults_match_the_model(cls: type[Any]) -> None:
    for avro_field, (_, expected) in zip(raw_schema(cls)["fields"], model_fields(cls), strict=True):
        if expected is _NONE:
            assert "default" not in avro_field, avro_field["name"]
            continue
        if isinstance(avro_field["type"], list):
            assert avro_field["type"][0] == "null" and avro_field["default"] is None
            assert expected is None, avro_field["name"]
        else:
            assert avro_field["default"] == (list(expected) if expected == () else expected)


def test_s4_nested_copies_match_the_standalone_schemas() -> None:
    """Each .avsc is self-contained; the inlined records must not drift from their own files."""

    def strip(schema: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in schema.items() if k != "namespace"}

    assert nested(raw_schema(Delivery), "event") == strip(raw_schema(Event))
    assert nested(raw_schema(DeadLetter), "delivery") == strip(raw_schema(Delivery))


@record_classes
def test_s4_fingerprint_is_crc64_avro_of_canonical_form(cls: type[Any]) -> None:
    schema = codec.schema_for(cls)
    assert schema.fingerprint == crc64_avro(schema.canonical_form.encode())
    assert schema.header == b"\xc3\x01" + schema.fingerprint
    assert '"doc"' not in schema.canonical_form


def test_s4_fingerprints_are_distinct() -> None:
    prints = {codec.schema_for(cls).fingerprint for cls in RECORDS}
    assert len(prints) == len(RECORDS)


def codec_with_extra_field(tmp_path: Path, cls: type[Any], default: int) -> codec.Codec:
    """A codec over the repository's schemas, but with a long field added to ``cls``'s."""
    shutil.copytree(codec.schemas_dir(), tmp_path, dirs_exist_ok=True)
    changed = raw_schema(cls)
    changed["fields"].append({"name": "extra", "type": "long", "default": default, "doc": "new"})
    (tmp_path / codec.SCHEMA_FILES[cls]).write_text(json.dumps(changed))
    return codec.Codec(codec.load_schemas(tmp_path))


def test_s4_override_directory_is_used(tmp_path: Path) -> None:
    """A changed schema in another directory gets another fingerprint, and old bytes are refused."""
    other = codec_with_extra_field(tmp_path, ControlEvent, 0)
    assert codec.schemas_dir(tmp_path) == tmp_path
    event = sample_event()
    assert other.decode(Event, codec.encode(event)) == event
    with pytest.raises(DecodeError) as info:
        other.decode(ControlEvent, codec.encode(ControlEvent("sub_1", "suspended", NOW)))
    assert info.value.reason == "unknown_schema"


def test_x5_missing_or_bad_schema_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        codec.load_schemas(tmp_path)
    assert "event.avsc" in str(info.value)
    shutil.copytree(codec.schemas_dir(), tmp_path, dirs_exist_ok=True)
    bad_files = [
        "{not json",
        '{"type": "record", "name": "A", "fields": [{"name": "x", "type": "y"}]}',
    ]
    for text in bad_files:
        (tmp_path / "attempt.avsc").write_text(text)
        with pytest.raises(ConfigError) as info:
            codec.load_schemas(tmp_path)
        assert "attempt.avsc" in str(info.value)


# ---------------------------------------------------------------------------------------------
# Encoding and decoding (Q2, Q5).


@record_classes
@given(data=st.data())
def test_q5_round_trip(cls: type[Any], data: st.DataObject) -> None:
    record = data.draw(RECORDS[cls])
    encoded = codec.encode(record)
    assert encoded.startswith(codec.schema_for(cls).header)
    decoded = codec.decode(cls, encoded)
    assert decoded == record
    for name, _ in model_fields(cls):
        assert type(getattr(decoded, name)) is type(getattr(record, name)), name


@given(any_record)
def test_q5_encode_is_deterministic(record: Any) -> None:
    encoded = codec.encode(record)
    assert codec.encode(record) == encoded
    assert codec.encode(codec.decode(type(record), encoded)) == encoded


@given(deliveries)
def test_q5_encode_delivery_is_byte_identical_to_encode(delivery: Delivery) -> None:
    """The router's fast path splices the archived event's body; the bytes must not differ."""
    expected = codec.encode(delivery)
    event_body = codec.encode(delivery.event)[codec.HEADER_SIZE :]
    assert codec.encode_delivery(delivery, event_body) == expected
    assert codec.encode_delivery(delivery) == expected
    assert codec.decode(Delivery, codec.encode_delivery(delivery, event_body)) == delivery


@given(attempts)
def test_q5_the_hand_written_attempt_is_byte_identical_to_fastavro(attempt: Attempt) -> None:
    """The dispatcher writes one Attempt per HTTP attempt through a hand-written layout; the
    bytes must be fastavro's, and read back equal."""
    expected = codec.default_codec().encode_generic(attempt)
    assert codec.encode(attempt) == expected
    assert codec.decode(Attempt, codec.encode(attempt)) == attempt


@given(deliveries)
def test_q5_the_hand_written_event_is_byte_identical_to_fastavro(delivery: Delivery) -> None:
    """The router archives every event through a hand-written layout, then splices its body
    into each delivery: the bytes must be fastavro's."""
    event = delivery.event
    assert codec.encode(event) == codec.default_codec().encode_generic(event)
    assert codec.decode(Event, codec.encode(event)) == event


_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_LONG_EDGES = [0, -1, 1, 63, -64, 64, -65, 8191, -8192, 8192, 2**27, 2**28 - 1, -(2**63), 2**63 - 1]


@given(st.one_of(_INT64, st.sampled_from(_LONG_EDGES), _INT64.map(lambda n: n >> 40)))
def test_q5_the_hand_written_long_is_fastavros(n: int) -> None:
    """Every long the hand-written records carry (lengths, timestamps, counts) is written from
    two 14-bit tables; its bytes must be fastavro's zigzag varint for the whole int64 range."""
    buf = BytesIO()
    schemaless_writer(buf, parse_schema("long"), n)
    assert avro_hand._long(n) == buf.getvalue()


def test_encode_attempt_falls_back_for_another_attempt_schema(tmp_path: Path) -> None:
    """A codec over a changed Attempt schema must not use the hand-written layout."""
    other = codec_with_extra_field(tmp_path, Attempt, 7)
    attempt = sample_attempt()
    assert other.encode(attempt) == other.encode_generic(attempt)
    assert other.encode(attempt)[codec.HEADER_SIZE :] != codec.encode(attempt)[codec.HEADER_SIZE :]


def test_encode_event_falls_back_for_another_event_schema(tmp_path: Path) -> None:
    """A codec over a changed Event schema must not use the hand-written layout."""
    other = codec_with_extra_field(tmp_path, Event, 7)
    event = sample_event()
    assert other.encode(event) == other.encode_generic(event)
    assert other.encode(event)[codec.HEADER_SIZE :] != codec.encode(event)[codec.HEADER_SIZE :]


def test_encode_delivery_falls_back_for_another_delivery_schema(tmp_path: Path) -> None:
    """A codec over a changed Delivery schema must not use the hand-written layout."""
    other = codec_with_extra_field(tmp_path, Delivery, 7)
    delivery = Delivery("d", "sub_1", "acme", sample_event(), first_attempt_at=NOW)
    assert other.encode_delivery(delivery) == other.encode(delivery)
    assert other.encode_delivery(delivery) != codec.encode(delivery)
    same = codec.Codec(codec.load_schemas(codec.schemas_dir()))
    assert same.encode_delivery(delivery) == codec.encode(delivery)


@record_classes
@given(data=st.data())
def test_q5_every_truncation_is_refused(cls: type[Any], data: st.DataObject) -> None:
    encoded = codec.encode(data.draw(RECORDS[cls]))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(DecodeError):
        codec.decode(cls, encoded[:cut])


@given(any_record, st.binary(min_size=1))
def test_q2_trailing_bytes_are_refused(record: Any, garbage: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        codec.decode(type(record), codec.encode(record) + garbage)
    assert info.value.reason == "invalid_avro"


@record_classes
@given(data=st.data())
def test_q5_arbitrary_bytes_decode_or_raise_decode_error(
    cls: type[Any], data: st.DataObject
) -> None:
    header = data.draw(st.sampled_from([b"", codec.schema_for(cls).header]))
    blob = header + data.draw(st.binary(max_size=200))
    try:
        record = codec.decode(cls, blob)
    except DecodeError:
        return
    assert isinstance(record, cls)
    assert codec.decode(cls, codec.encode(record)) == record


def test_q2_missing_marker_is_invalid_avro() -> None:
    encoded = codec.encode(sample_event())
    for bad in (b"", b"\xc3", b"\x00\x01" + encoded[2:], b'{"id": "evt_1"}'):
        with pytest.raises(DecodeError) as info:
            codec.decode(Event, bad)
        assert info.value.reason == "invalid_avro"


def test_q2_another_records_bytes_are_unknown_schema() -> None:
    encoded = codec.encode(Delivery("d", "sub_1", "acme", sample_event()))
    with pytest.raises(DecodeError) as info:
        codec.decode(Event, encoded)
    assert info.value.reason == "unknown_schema"
    assert "io.hookstream.Delivery" in str(info.value)
    forged = encoded[:2] + bytes(8) + encoded[10:]
    with pytest.raises(DecodeError) as info:
        codec.decode(Delivery, forged)
    assert info.value.reason == "unknown_schema"


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (Delivery, "lane", "teleport"),
        (Attempt, "outcome", "maybe"),
        (Attempt, "state", "lost"),
        (HealthOutcome, "outcome", "SUCCESS"),
        (Subscription, "status", "deleted"),
    ],
)
def test_q2_unknown_enum_value_is_refused(cls: type[Any], field: str, value: str) -> None:
    schema = codec.schema_for(cls)
    valid = codec.encode(_plain(cls))
    body = schemaless_reader(BytesIO(valid[codec.HEADER_SIZE :]), schema.parsed, None)
    assert isinstance(body, dict)
    body[field] = value
    blob = _write(schema.header, schema.parsed, body)
    with pytest.raises(DecodeError) as info:
        codec.decode(cls, blob)
    assert info.value.reason == "invalid_enum"
    assert field in str(info.value)


def _plain(cls: type[Any]) -> Any:
    delivery = Delivery("d", "sub_1", "acme", sample_event())
    return {
        Delivery: delivery,
        Attempt: Attempt(
            delivery_id="d",
            subscription_id="sub_1",
            tenant_id="acme",
            event_id="evt_1",
            event_type="invoice.paid",
            attempt=1,
            lane=Lane.LIVE,
            started_at=NOW,
            duration_ms=12.5,
            outcome=OutcomeClass.SUCCESS,
            reason="http_200",
            state=DeliveryState.SUCCESS,
        ),
        HealthOutcome: HealthOutcome(
            "sub_1", "d", OutcomeClass.SUCCESS, "http_200", NOW, "https://a.example:443", 1
        ),
        Subscription: Subscription("sub_1", "acme", "n", "https://a.example/h", (), ()),
    }[cls]


def _write(header: bytes, parsed: dict[str, Any], body: dict[str, Any]) -> bytes:
    buf = BytesIO()
    buf.write(header)
    schemaless_writer(buf, parsed, body)
    return buf.getvalue()


def test_encode_refuses_objects_without_a_schema() -> None:
    with pytest.raises(TypeError):
        codec.encode({"id": "evt_1"})
    with pytest.raises(TypeError):
        codec.decode(dict, codec.encode(sample_event()))


def test_s4_schema_parses_as_standard_avro() -> None:
    """The files need nothing but a standard Avro parser."""
    for cls in RECORDS:
        parsed = parse_schema(raw_schema(cls))
        assert isinstance(parsed, dict)
        assert parsed["name"] == f"io.hookstream.{cls.__name__}"


def test_o2_a_digest_with_a_tally_short_is_refused() -> None:
    """Each subscription of an `AnalyticsDigest` has its tally: a mismatch is not misread."""
    data = codec.encode(
        AnalyticsDigest(sealed_at=NOW, subscription_ids=("a", "b"), tallies=(b"{}",))
    )
    with pytest.raises(DecodeError) as info:
        codec.decode(AnalyticsDigest, data)
    assert info.value.reason == "invalid_avro"
