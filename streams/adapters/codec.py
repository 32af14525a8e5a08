"""Avro encoding of every topic value (§4, Q2, Q5); ingest decoding is in `.ingest`.

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
- ``invalid_json``, ``invalid_event``, ``oversize``, ``unsupported_content_type``: ingest only
  (`streams.adapters.ingest`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, TypeVar, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import SchemaParseException, fingerprint, to_parsing_canonical_form

from streams.adapters.avro_hand import attempt_body, delivery_body, event_body
from streams.adapters.avro_records import CONVERTERS
from streams.domain.fleet_breaker import BreakerRecord
from streams.domain.models import (
    AnalyticsDigest,
    Attempt,
    AttemptDigest,
    ControlEvent,
    DeadLetter,
    Delivery,
    Event,
    HealthOutcome,
    Notification,
    Subscription,
)
from streams.errors import ConfigError, DecodeError

R = TypeVar("R")
AvroDict = dict[str, Any]

MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8

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
    AttemptDigest: "attempt_digest.avsc",
    AnalyticsDigest: "analytics_digest.avsc",
    BreakerRecord: "breaker_state.avsc",
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


def _hand_layout_header(cls: type[Any], schema: RecordSchema | None) -> bytes | None:
    """The header for the hand-written layout of ``cls``, or None when ``schema`` is not the
    layout it writes.

    A hand-written layout follows the repository's schema of its record; a codec over any other
    schema of that record encodes through fastavro instead.
    """
    try:
        expected = _default_schemas()[cls].canonical_form
    except ConfigError:
        return None
    if schema is None or schema.canonical_form != expected:
        return None
    return schema.header


# ---------------------------------------------------------------------------------------------
# Single-object encoding.


class Codec:
    """Encodes and decodes hookstream's records with one set of schemas."""

    def __init__(self, schemas: Mapping[type[Any], RecordSchema]) -> None:
        self._schemas = dict(schemas)
        self._names = {s.fingerprint: s.name for s in schemas.values()}
        self._delivery_header = _hand_layout_header(Delivery, self._schemas.get(Delivery))
        self._attempt_header = _hand_layout_header(Attempt, self._schemas.get(Attempt))
        self._event_header = _hand_layout_header(Event, self._schemas.get(Event))

    def encode_delivery(self, delivery: Delivery, event_body: bytes | None = None) -> bytes:
        """Exactly `encode` (``delivery``), without encoding its event again when it is known.

        ``event_body`` is the Avro body of ``delivery.event``: its `encode` minus the first
        `HEADER_SIZE` bytes. The router archives each event, then splices those bytes into
        every delivery of it instead of re-encoding about 1 KB per matching subscription.
        """
        header = self._delivery_header
        if header is None:
            return self.encode(delivery)
        if event_body is None:
            event_body = self.encode(delivery.event)[HEADER_SIZE:]
        return header + delivery_body(delivery, event_body)

    def encode(self, record: object) -> bytes:
        """The single-object encoding of ``record``, deterministic for equal records."""
        kind = type(record)
        if kind is Attempt and self._attempt_header is not None:
            return self._attempt_header + attempt_body(cast(Attempt, record))
        if kind is Event and self._event_header is not None:
            return self._event_header + event_body(cast(Event, record))
        return self.encode_generic(record)

    def encode_generic(self, record: object) -> bytes:
        """`encode` through fastavro's writer, whatever layout is written by hand: the reference
        the hand-written layouts are tested against."""
        cls = type(record)
        schema = self._schemas.get(cls)
        if schema is None:
            raise TypeError(f"hookstream has no Avro schema for {cls.__name__}")
        buf = BytesIO()
        buf.write(schema.header)
        schemaless_writer(buf, schema.parsed, CONVERTERS[cls][0](record))
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
        return cast(R, CONVERTERS[cls][1](cast(AvroDict, raw)))

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


def encode_delivery(delivery: Delivery, event_body: bytes | None = None) -> bytes:
    """`encode` (``delivery``), reusing its event's Avro body; see `Codec.encode_delivery`."""
    return default_codec().encode_delivery(delivery, event_body)


def decode(cls: type[R], data: bytes) -> R:
    """Decode one ``cls`` record from its topic. Raises only `DecodeError` for bad bytes."""
    return default_codec().decode(cls, data)
