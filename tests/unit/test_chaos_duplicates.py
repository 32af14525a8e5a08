"""Q1: the chaos audit says why a delivery was answered 2xx more than once, from its ledger."""

from __future__ import annotations

from chaos.audit import duplicate_cause
from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass


def _attempt(n: int, outcome: OutcomeClass, reason: str) -> Attempt:
    state = DeliveryState.SUCCESS if outcome is OutcomeClass.SUCCESS else DeliveryState.ERROR
    return Attempt(
        delivery_id="dlv_1",
        subscription_id="sub_1",
        tenant_id="acme",
        event_id="evt_1",
        event_type="order.created",
        attempt=n,
        lane=Lane.LIVE,
        started_at=1_000 * n,
        duration_ms=5.0,
        outcome=outcome,
        reason=reason,
        state=state,
    )


OK = (OutcomeClass.SUCCESS, "http_200")
TIMED_OUT = (OutcomeClass.RETRYABLE, "timeout")
UNAVAILABLE = (OutcomeClass.RETRYABLE, "http_503")


def test_q1_two_recorded_successes_mean_a_send_despite_the_record() -> None:
    history = [_attempt(1, *OK), _attempt(2, *OK)]
    assert duplicate_cause(2, history) == "sent_after_a_recorded_success"


def test_q1_a_2xx_the_worker_timed_out_on_is_named_as_such() -> None:
    history = [_attempt(1, *TIMED_OUT), _attempt(2, *OK)]
    assert duplicate_cause(2, history) == "answered_after_its_timeout"


def test_q1_a_2xx_the_ledger_never_heard_of_is_unrecorded() -> None:
    assert duplicate_cause(2, [_attempt(1, *OK)]) == "success_not_recorded"
    assert duplicate_cause(2, [_attempt(1, *UNAVAILABLE), _attempt(2, *OK)]) == (
        "success_not_recorded"
    )
    assert duplicate_cause(2, []) == "success_not_recorded"
