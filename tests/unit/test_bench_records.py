"""`bench.records` times the records a delivery makes (P1): its cases do the work they name."""

from __future__ import annotations

from bench.records import cases, measure
from streams.domain.models import Delivery, DeliveryState, OutcomeClass


def test_p1_the_timed_calls_settle_a_success_and_round_trip_the_routed_record() -> None:
    calls = cases()
    settled = calls["settle_success"]()
    assert settled.attempt.outcome is OutcomeClass.SUCCESS
    assert settled.attempt.state is DeliveryState.SUCCESS
    assert settled.health is not None and settled.retry is None
    decoded = calls["decode_routed"]()
    assert isinstance(decoded, Delivery) and decoded.delivery_id == "msg_2abc"
    assert calls["encode_routed"]()[:2] == b"\xc3\x01"  # Avro single-object encoding


def test_p1_each_case_is_timed_in_us_per_call() -> None:
    figures = measure(number=20, repeat=2)
    assert set(figures) == {"settle_success", "decode_routed", "encode_routed"}
    assert all(0 < us < 100_000 for us in figures.values())
