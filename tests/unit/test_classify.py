"""D5: how hookstream classifies an attempt, and how it reads Retry-After (D6, F2)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.classify import (
    FAILURE_RULES,
    STATUS_RULES,
    Classification,
    classify,
    parse_retry_after,
)
from streams.domain.models import FailureKind, OutcomeClass

S, R, P, F = (
    OutcomeClass.SUCCESS,
    OutcomeClass.RETRYABLE,
    OutcomeClass.PERMANENT,
    OutcomeClass.FATAL,
)
REASON = re.compile(r"[a-z][a-z0-9_]*")


@pytest.mark.parametrize(
    ("status", "outcome", "reason"),
    [
        (200, S, "http_200"),
        (201, S, "http_201"),
        (204, S, "http_204"),
        (299, S, "http_299"),
        (408, R, "http_408"),
        (429, R, "http_429"),
        (500, R, "http_500"),
        (502, R, "http_502"),
        (503, R, "http_503"),
        (599, R, "http_599"),
        (301, P, "redirect_301"),
        (302, P, "redirect_302"),
        (307, P, "redirect_307"),
        (308, P, "redirect_308"),
        (400, P, "http_400"),
        (401, P, "http_401"),
        (403, P, "http_403"),
        (404, P, "http_404"),
        (410, P, "http_410"),
        (422, P, "http_422"),
        (499, P, "http_499"),
        (100, R, "http_1xx"),
        (101, R, "http_1xx"),
        (600, R, "http_invalid_status"),
        (999, R, "http_invalid_status"),
        (0, R, "http_invalid_status"),
        (-1, R, "http_invalid_status"),
    ],
)
def test_D5_status_table(status: int, outcome: OutcomeClass, reason: str) -> None:
    assert classify(status, None) == Classification(outcome, reason)


@pytest.mark.parametrize(
    ("failure", "outcome", "reason"),
    [
        (FailureKind.TIMEOUT, R, "timeout"),
        (FailureKind.CONNECT_REFUSED, R, "connection_refused"),
        (FailureKind.CONNECTION_RESET, R, "connection_reset"),
        (FailureKind.DNS_TEMPORARY, R, "dns_temporary"),
        (FailureKind.PROTOCOL_ERROR, R, "protocol_error"),
        (FailureKind.TLS_INVALID, P, "tls_invalid"),
        (FailureKind.TLS_ERROR, R, "tls_error"),
        (FailureKind.BLOCKED_DESTINATION, P, "blocked_destination"),
        (FailureKind.DNS_NXDOMAIN, F, "dns_nxdomain"),
    ],
)
def test_D5_failure_table(failure: FailureKind, outcome: OutcomeClass, reason: str) -> None:
    assert classify(None, failure) == Classification(outcome, reason)


def test_D5_every_failure_kind_has_a_rule() -> None:
    assert set(FAILURE_RULES) == set(FailureKind)


def test_D5_status_rules_cover_every_http_status() -> None:
    covered = {s for rule in STATUS_RULES for s in range(rule.low, rule.high + 1)}
    assert covered == set(range(100, 600))


@pytest.mark.parametrize(("status", "failure"), [(None, None), (500, FailureKind.TIMEOUT)])
def test_D5_exactly_one_of_status_and_failure(
    status: int | None, failure: FailureKind | None
) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        classify(status, failure)


@given(st.integers())
def test_D5_any_status_gets_a_snake_case_reason(status: int) -> None:
    verdict = classify(status, None)
    assert REASON.fullmatch(verdict.reason)
    if not 100 <= status <= 599:
        assert verdict == Classification(R, "http_invalid_status")


@given(st.integers(min_value=100, max_value=599))
def test_D5_outcome_follows_the_status_class(status: int) -> None:
    outcome = classify(status, None).outcome
    if status in (408, 429):
        assert outcome is R
    elif status // 100 == 2:
        assert outcome is S
    elif status // 100 in (3, 4):
        assert outcome is P
    else:  # 1xx and 5xx
        assert outcome is R


def test_D5_reasons_have_bounded_cardinality() -> None:
    """Reasons are metric labels (O1): every status in the world maps to at most ~500 values."""
    reasons = {classify(s, None).reason for s in range(-1000, 10_000)}
    reasons |= {classify(None, kind).reason for kind in FailureKind}
    assert len(reasons) <= 500 + len(FailureKind)


# --- Retry-After -----------------------------------------------------------------------------

NOW_MS = 1_714_564_800_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 5 ", 5.0),
        (None, None),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("12345678901", None),  # more digits than any sane delay
        ("Mon, 32 Jan 2024 00:00:00 GMT", None),
    ],
)
def test_D6_parse_retry_after_examples(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW_MS) == expected


def test_D6_retry_after_http_date_in_the_future() -> None:
    when = datetime.fromtimestamp(NOW_MS / 1000 + 90, tz=UTC)
    assert parse_retry_after(format_datetime(when, usegmt=True), NOW_MS) == 90.0


def test_D6_retry_after_http_date_in_the_past_means_no_wait() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW_MS) == 0.0


@given(st.integers(min_value=0, max_value=9_999_999_999))
def test_D6_retry_after_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), NOW_MS) == float(seconds)


@given(st.integers(min_value=0, max_value=10 * 365 * 86400))
def test_D6_retry_after_dates_round_trip(ahead_s: int) -> None:
    when = datetime.fromtimestamp(NOW_MS // 1000 + ahead_s, tz=UTC)
    assert parse_retry_after(format_datetime(when, usegmt=True), NOW_MS) == float(ahead_s)


@given(st.text())
def test_D6_retry_after_never_raises_on_garbage(value: str) -> None:
    parsed = parse_retry_after(value, NOW_MS)
    assert parsed is None or (math.isfinite(parsed) and parsed >= 0)
