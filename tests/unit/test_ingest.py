"""F5, F6: ingest validation is all-or-nothing, limits are per producer and answer 429."""

from __future__ import annotations

import orjson
import pytest

from streams.errors import ValidationError
from streams.services.ingest import IngestLimiter, PayloadTooLargeError, parse_events
from streams.settings import load_settings

SETTINGS = load_settings(max_payload_bytes=2048)
NOW = 1_790_000_000_000


def _event(n: int, **extra: object) -> dict[str, object]:
    return {"id": f"evt_{n}", "type": "invoice.paid", "timestamp": NOW, "data": {"n": n}, **extra}


def test_f5_single_event_and_batch_are_accepted() -> None:
    one = parse_events(orjson.dumps(_event(1)), "acme", SETTINGS, NOW)
    assert [e.id for e in one] == ["evt_1"] and one[0].tenant_id == "acme"
    batch = parse_events(orjson.dumps({"events": [_event(1), _event(2)]}), "acme", SETTINGS, NOW)
    assert [e.id for e in batch] == ["evt_1", "evt_2"]


def test_f5_one_bad_event_refuses_the_whole_batch_naming_it() -> None:
    body = orjson.dumps({"events": [_event(1), {"id": "x", "data": {}}]})
    with pytest.raises(ValidationError) as caught:
        parse_events(body, "acme", SETTINGS, NOW)
    assert list(caught.value.fields) == ["events[1]"]


def test_f6_oversize_event_is_refused_with_413() -> None:
    big = _event(1, data={"blob": "x" * 4096})
    with pytest.raises(PayloadTooLargeError):
        parse_events(orjson.dumps(big), "acme", SETTINGS, NOW)


def test_q6_a_tenant_key_cannot_publish_for_another_tenant() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_events(orjson.dumps(_event(1, tenant_id="other")), "acme", SETTINGS, NOW)
    assert "event.tenant_id" in caught.value.fields


def test_f5_limits_are_per_producer_and_all_or_nothing() -> None:
    limiter = IngestLimiter(rate=10, burst=10)
    assert limiter.admit("noisy", 10, now=0.0) is None
    throttled = limiter.admit("noisy", 5, now=0.0)
    assert throttled is not None and throttled.retry_after_s >= 1
    assert limiter.admit("quiet", 3, now=0.0) is None, "another producer is unaffected"
    assert limiter.admit("noisy", 5, now=0.5) is None, "refilled at 10/s"


def test_f5_a_batch_larger_than_the_burst_is_refused_with_its_wait() -> None:
    limiter = IngestLimiter(rate=10, burst=10)
    throttled = limiter.admit("p", 50, now=0.0)
    assert throttled is not None and throttled.retry_after_s == 5
