"""D4: the JSON body every attempt carries (fuzzed, Q5)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.envelope import build_body, iso_timestamp
from streams.domain.models import Event


def _event(data_json: str = '{"amount":100}', **overrides: Any) -> Event:
    values: dict[str, Any] = {
        "id": "evt_1",
        "tenant_id": "acme",
        "type": "invoice.paid",
        "timestamp": 1_714_564_800_250,
        "data_json": data_json,
        "published_at": 1_714_564_800_300,
    }
    values.update(overrides)
    return Event(**values)


def test_D4_body_is_the_compact_envelope_in_order() -> None:
    assert build_body(_event(), 3) == (
        b'{"id":"evt_1","type":"invoice.paid","timestamp":"2024-05-01T12:00:00.250Z",'
        b'"data":{"amount":100},"attempt":3}'
    )


def test_D4_data_is_embedded_verbatim_not_reparsed() -> None:
    producer_json = '{ "b" : 1,\n  "a": [1.50, 2e3] }'
    assert producer_json.encode() in build_body(_event(producer_json), 1)


def test_D4_id_is_stable_and_attempt_counts_up() -> None:
    bodies = [json.loads(build_body(_event(), n)) for n in (1, 2, 3)]
    assert {body["id"] for body in bodies} == {"evt_1"}
    assert [body["attempt"] for body in bodies] == [1, 2, 3]


@pytest.mark.parametrize("attempt", [0, -1])
def test_D4_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        build_body(_event(), attempt)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (1_714_564_800_250, "2024-05-01T12:00:00.250Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_D4_timestamp_is_iso_utc_with_milliseconds(ms: int, text: str) -> None:
    assert iso_timestamp(ms) == text


_MIN_MS = -62_135_596_800_000  # 0001-01-01
_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999


@given(st.integers(min_value=_MIN_MS, max_value=_MAX_MS))
def test_D4_timestamp_round_trips_exactly(ms: int) -> None:
    text = iso_timestamp(ms)
    assert text.endswith("Z")
    assert len(text) == 24
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert (parsed - epoch) // timedelta(milliseconds=1) == ms


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(
    event_id=st.text(),
    event_type=st.text(),
    timestamp=st.integers(min_value=_MIN_MS, max_value=_MAX_MS),
    data=_json_values,
    indent=st.none() | st.integers(min_value=0, max_value=4),
    attempt=st.integers(min_value=1, max_value=10_000),
)
def test_D4_Q5_body_parses_and_carries_what_was_given(
    event_id: str,
    event_type: str,
    timestamp: int,
    data: object,
    indent: int | None,
    attempt: int,
) -> None:
    data_json = json.dumps(data, indent=indent)
    event = _event(data_json, id=event_id, type=event_type, timestamp=timestamp)
    body = json.loads(build_body(event, attempt))
    assert list(body) == ["id", "type", "timestamp", "data", "attempt"]
    assert body["id"] == event_id
    assert body["type"] == event_type
    assert body["timestamp"] == iso_timestamp(timestamp)
    assert body["data"] == json.loads(data_json)
    assert body["attempt"] == attempt
