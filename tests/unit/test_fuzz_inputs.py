"""Q5: property tests of the envelope, signature verification, filter matching and subscription
validation, filling what tests/unit/test_envelope.py, test_signing.py, test_filters.py and
test_codec.py do not already fuzz. Each property states what hookstream promises its users.
"""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import urlsplit

from hypothesis import given
from hypothesis import strategies as st

from streams.domain.breaker import origin_of
from streams.domain.envelope import build_body
from streams.domain.filters import matches, validate_event_type, validate_filter
from streams.domain.models import Event, Secret
from streams.domain.signing import sign, signature_header, verify
from streams.domain.validation import FIELDS, MAX_TIMEOUT_S, validate_subscription
from streams.errors import ValidationError

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

# --- the envelope (D4) ---------------------------------------------------------------------


@given(
    event_id=st.text(),
    data=st.dictionaries(st.text(), st.integers() | st.text() | st.booleans()),
    first=st.integers(min_value=1, max_value=10_000),
    second=st.integers(min_value=1, max_value=10_000),
)
def test_D4_Q5_attempts_of_one_event_differ_only_in_the_attempt_number(
    event_id: str, data: dict[str, Any], first: int, second: int
) -> None:
    event = Event(
        id=event_id,
        tenant_id="acme",
        type="invoice.paid",
        timestamp=1_700_000_000_000,
        data_json=json.dumps(data),
        published_at=1_700_000_000_000,
    )
    one, two = json.loads(build_body(event, first)), json.loads(build_body(event, second))
    assert (one.pop("attempt"), two.pop("attempt")) == (first, second)
    assert one == two
    assert one["id"] == event_id


# --- signature verification (D3) ------------------------------------------------------------

tokens = st.text(alphabet=string.ascii_letters + string.digits + ",+/=", max_size=60)


@given(header=st.text(), body=st.binary(), msg_id=st.text(), timestamp_s=st.integers(0, 2**40))
def test_D3_Q5_arbitrary_headers_never_verify_and_never_raise(
    header: str, body: bytes, msg_id: str, timestamp_s: int
) -> None:
    good = sign(SECRET, msg_id, timestamp_s, body)
    result = verify(SECRET, msg_id, timestamp_s, body, header, now_s=timestamp_s)
    assert result == (good in header.split())


@given(
    before=st.lists(tokens, max_size=4),
    after=st.lists(tokens, max_size=4),
    body=st.binary(),
    msg_id=st.text(),
)
def test_D3_Q5_the_right_signature_verifies_among_any_others(
    before: list[str], after: list[str], body: bytes, msg_id: str
) -> None:
    """During a rotation (and for future versions) receivers see several space-separated
    signatures; one valid ``v1`` among any others is enough."""
    good = sign(SECRET, msg_id, 1_000, body)
    header = " ".join([*before, good, *after])
    assert verify(SECRET, msg_id, 1_000, body, header, now_s=1_000)


@given(position=st.integers(min_value=3), replacement=st.sampled_from("AbZ09+/"))
def test_D3_Q5_any_changed_signature_character_is_refused(position: int, replacement: str) -> None:
    good = sign(SECRET, "msg_x", 1_000, b"{}")
    index = 3 + position % (len(good) - 3)
    if good[index] == replacement:
        return
    bad = good[:index] + replacement + good[index + 1 :]
    assert not verify(SECRET, "msg_x", 1_000, b"{}", bad, now_s=1_000)


@given(
    timestamp_s=st.integers(0, 2**40),
    skew=st.integers(-2_000, 2_000),
    tolerance_s=st.integers(0, 1_000),
)
def test_D3_Q5_freshness_is_exactly_the_tolerance_window(
    timestamp_s: int, skew: int, tolerance_s: int
) -> None:
    header = signature_header([Secret(SECRET)], 0, "msg_x", timestamp_s, b"{}")
    fresh = verify(
        SECRET,
        "msg_x",
        timestamp_s,
        b"{}",
        header,
        now_s=timestamp_s + skew,
        tolerance_s=tolerance_s,
    )
    assert fresh == (abs(skew) <= tolerance_s)


# --- filter matching (S1) -------------------------------------------------------------------

# A tiny alphabet, so generated filters and event types share prefixes often.
segments = st.lists(st.sampled_from(["a", "b", "ab", "a-b", "_"]), min_size=1, max_size=4)
event_types = segments.map(".".join)
filters = st.one_of(st.just("*"), event_types, segments.map(lambda parts: ".".join(parts) + ".*"))


def oracle(pattern: str, event_type: str) -> bool:
    """S1 in segment terms: '*' takes everything, 'x.y.*' takes every type with more segments
    than 'x.y' that starts with them, anything else takes exactly itself."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        stem = pattern[:-2].split(".")
        parts = event_type.split(".")
        return len(parts) > len(stem) and parts[: len(stem)] == stem
    return pattern == event_type


@given(patterns=st.lists(filters, min_size=1, max_size=4), event_type=event_types)
def test_S1_Q5_matching_follows_segments(patterns: list[str], event_type: str) -> None:
    assert [validate_filter(p) for p in patterns] == patterns
    assert validate_event_type(event_type) == event_type
    assert matches(patterns, event_type) == any(oracle(p, event_type) for p in patterns)


@given(event_type=event_types)
def test_S1_Q5_no_filters_means_every_type(event_type: str) -> None:
    assert matches([], event_type)


# --- subscription validation (S1) -----------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=6,
)
urls = st.builds(
    "{}://{}{}{}".format,
    st.sampled_from(["http", "https", "ftp", ""]),
    st.sampled_from(["example.com", "user:pw@example.com", "", "[::1]", "[::1", "h"]),
    st.sampled_from(["", ":8443", ":0", ":65536", ":abc", ":-1", ":"]),
    st.sampled_from(["", "/hook", "/h?q=1"]),
)
field_values: dict[str, st.SearchStrategy[Any]] = {
    "tenant_id": st.sampled_from(["acme", "", "a b", "x" * 129]) | json_values,
    "name": st.text(max_size=210) | json_values,
    "url": urls | json_values,
    "notify_url": urls | json_values,
    "filters": st.lists(filters | st.text(max_size=12), max_size=3) | json_values,
    "owner_emails": st.lists(st.sampled_from(["a@b.io", "nope", "@x.y"]), max_size=2),
    "rate_limit": json_values,
    "max_in_flight": json_values,
    "timeout_s": json_values,
    "headers": st.dictionaries(st.sampled_from(["X-A", "Host", "bad name"]), json_values),
}
inputs = st.fixed_dictionaries(
    {},
    optional={**field_values, "surprise": json_values},
)


@given(data=inputs, allow_http=st.booleans())
def test_S1_Q5_any_input_is_accepted_whole_or_refused_naming_fields(
    data: dict[str, Any], allow_http: bool
) -> None:
    """Whatever a client sends, validation either returns a subscription that is safe to
    deliver to, or a ValidationError naming fields: never another exception."""
    try:
        valid = validate_subscription(data, allow_http=allow_http, default_timeout=10.0)
    except ValidationError as exc:
        assert exc.fields
        assert set(exc.fields) <= FIELDS | set(data)
        assert all(isinstance(message, str) and message for message in exc.fields.values())
        return
    assert set(data) <= FIELDS
    assert 0 < valid.timeout_s <= MAX_TIMEOUT_S
    assert all(validate_filter(p) == p for p in valid.filters)
    assert valid.url.startswith("https://" if not allow_http else ("http://", "https://"))


@given(url=urls, allow_http=st.booleans())
def test_S1_Q5_an_accepted_url_has_an_origin_with_a_real_port(url: str, allow_http: bool) -> None:
    """The dispatcher keys the breaker and the health record by the URL's origin (H7, H8): a
    URL whose port does not parse must be refused at creation, not fail every delivery."""
    data = {"tenant_id": "acme", "url": url}
    try:
        valid = validate_subscription(data, allow_http=allow_http, default_timeout=10.0)
    except ValidationError as exc:
        assert set(exc.fields) == {"url"}
        return
    port = int(origin_of(valid.url).rsplit(":", 1)[1])
    assert 1 <= port <= 65535
    assert urlsplit(valid.url).port in (None, port)
