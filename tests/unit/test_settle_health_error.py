"""The health record's last error is an error, never a success's status line (SPEC H1, D10)."""

from __future__ import annotations

from streams.domain.backoff import RetryPolicy
from streams.domain.health import HealthRecord, apply_outcome
from streams.domain.models import Delivery, Event, FailureKind, OutcomeClass
from streams.domain.policy import SuspensionPolicy
from streams.domain.settle import AttemptResult, settle

URL = "https://hooks.example.com/in"
NOW = 1_700_000_000_000


def _delivery(attempt: int = 1) -> Delivery:
    event = Event("evt_1", "acme", "invoice.paid", NOW, "{}", NOW)
    return Delivery("dlv_1", "sub_1", "acme", event, attempt=attempt)


def _settle(result: AttemptResult, attempt: int = 1) -> HealthRecord:
    settled = settle(
        _delivery(attempt), result, RetryPolicy(), now_ms=NOW, rand=lambda: 0.5, url=URL
    )
    assert settled.health is not None
    failing = HealthRecord("sub_1", last_error="HTTP 503: maintenance")
    return apply_outcome(failing, settled.health, SuspensionPolicy(), NOW).record


def test_H1_a_success_leaves_no_last_error() -> None:
    """H1: after a 200 the record's last_error is empty, not "HTTP 200"."""
    result = AttemptResult(started_at=NOW, duration_ms=3.0, status=200, response_excerpt=b"ok")
    record = _settle(result)
    assert record.last_outcome is OutcomeClass.SUCCESS
    assert record.last_status == 200
    assert record.last_error is None


def test_H1_a_failure_keeps_what_the_endpoint_said() -> None:
    """H1: a terminal 404 records the status line and the body excerpt as the last error."""
    result = AttemptResult(started_at=NOW, duration_ms=3.0, status=404, response_excerpt=b"no\n")
    record = _settle(result)
    assert record.last_error == "HTTP 404: no"


def test_H1_a_failure_below_http_keeps_its_error() -> None:
    """H1: a refused destination keeps the transport's message, said once."""
    error = "blocked_destination: 0x7f.1 resolves to 127.0.0.1, loopback"
    result = AttemptResult(
        started_at=NOW, duration_ms=1.0, failure=FailureKind.BLOCKED_DESTINATION, error=error
    )
    assert _settle(result).last_error == error
