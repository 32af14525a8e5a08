"""Hypothesis strategies: valid instances of every record hookstream writes to a topic, with
arbitrary text and the whole Avro long range (Q5). Shared by the codec and ingest tests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from msgspec import structs

from streams.domain.models import (
    AnalyticsDigest,
    Attempt,
    AttemptDigest,
    ControlEvent,
    DeadLetter,
    Delivery,
    DeliveryState,
    Event,
    HealthOutcome,
    Lane,
    Notification,
    OutcomeClass,
    Secret,
    Subscription,
    SubscriptionStatus,
)

NOW = 1_700_000_000_000


texts = st.text()
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
doubles = st.floats(allow_nan=False)


def opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def tuples_of(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(strategy, max_size=4).map(tuple)


events = st.builds(
    Event,
    id=texts,
    tenant_id=texts,
    type=texts,
    timestamp=longs,
    data_json=texts,
    published_at=longs,
)
subscriptions = st.builds(
    Subscription,
    id=texts,
    tenant_id=texts,
    name=texts,
    url=texts,
    filters=tuples_of(texts),
    secrets=tuples_of(st.builds(Secret, value=texts, not_after=opt(longs))),
    status=st.sampled_from(SubscriptionStatus),
    status_reason=opt(texts),
    owner_emails=tuples_of(texts),
    notify_url=opt(texts),
    rate_limit=opt(doubles),
    max_in_flight=opt(longs),
    timeout_s=doubles,
    headers=tuples_of(st.tuples(texts, texts)),
    created_at=longs,
    updated_at=longs,
    suspended_at=opt(longs),
)
deliveries = st.builds(
    Delivery,
    delivery_id=texts,
    subscription_id=texts,
    tenant_id=texts,
    event=events,
    attempt=longs,
    lane=st.sampled_from(Lane),
    routed_at=longs,
    first_attempt_at=opt(longs),
    due_at=longs,
)
attempts = st.builds(
    Attempt,
    delivery_id=texts,
    subscription_id=texts,
    tenant_id=texts,
    event_id=texts,
    event_type=texts,
    attempt=longs,
    lane=st.sampled_from(Lane),
    started_at=longs,
    duration_ms=doubles,
    outcome=st.sampled_from(OutcomeClass),
    reason=texts,
    state=st.sampled_from(DeliveryState),
    http_status=opt(longs),
    error=opt(texts),
    response_excerpt=opt(texts),
    next_retry_at=opt(longs),
    published_at=longs,
    first_attempt_at=opt(longs),
)
dead_letters = st.builds(
    DeadLetter,
    reason=texts,
    dead_at=longs,
    tenant_id=opt(texts),
    subscription_id=opt(texts),
    delivery=opt(deliveries),
    raw=opt(st.binary()),
    attempts=longs,
    last_status=opt(longs),
    last_error=opt(texts),
    response_excerpt=opt(texts),
    first_attempt_at=opt(longs),
)
health_outcomes = st.builds(
    HealthOutcome,
    subscription_id=texts,
    delivery_id=texts,
    outcome=st.sampled_from(OutcomeClass),
    reason=texts,
    at=longs,
    origin=texts,
    attempts=longs,
    http_status=opt(longs),
    error=opt(texts),
)
control_events = st.builds(
    ControlEvent,
    subscription_id=texts,
    kind=texts,
    at=longs,
    reason=opt(texts),
    payload_json=texts,
)
notifications = st.builds(
    Notification,
    notification_id=texts,
    subscription_id=texts,
    kind=texts,
    at=longs,
    payload_json=texts,
    recipients=tuples_of(texts),
)
digests = st.builds(AttemptDigest, sealed_at=longs, attempts=tuples_of(st.binary()))
analytics_digests = st.builds(
    lambda sealed_at, pairs: AnalyticsDigest(
        sealed_at, tuple(sub for sub, _ in pairs), tuple(tally for _, tally in pairs)
    ),
    longs,
    st.lists(st.tuples(texts, st.binary()), max_size=4),
)

RECORDS: dict[type[Any], st.SearchStrategy[Any]] = {
    Event: events,
    Subscription: subscriptions,
    Delivery: deliveries,
    Attempt: attempts,
    DeadLetter: dead_letters,
    HealthOutcome: health_outcomes,
    ControlEvent: control_events,
    Notification: notifications,
    AttemptDigest: digests,
    AnalyticsDigest: analytics_digests,
}
any_record = st.one_of(*RECORDS.values())
record_classes = pytest.mark.parametrize("cls", list(RECORDS), ids=lambda c: c.__name__)


def sample_event(**changes: Any) -> Event:
    base = Event("evt_1", "acme", "invoice.paid", NOW, '{"amount":5}', NOW + 1)
    return structs.replace(base, **changes)


def sample_attempt() -> Attempt:
    return Attempt(
        "d", "sub_1", "acme", "evt_1", "invoice.paid", 2, Lane.RETRY, NOW, 12.5,
        OutcomeClass.RETRYABLE, "http_503", DeliveryState.ERROR, http_status=503,
        error="Service Unavailable", response_excerpt="busy", next_retry_at=NOW + 60_000,
        published_at=NOW - 5, first_attempt_at=NOW - 60_000,
    )  # fmt: skip
