"""hookstream's records as Avro dicts and back, for the codec (`streams.adapters.codec`).

Written out by hand: no deep copies, and enums and tuples come back as the same types they went
in as. An enum value this release does not know is a `DecodeError` with reason ``invalid_enum``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from streams.domain.breaker import BreakerState
from streams.domain.fleet_breaker import BreakerRecord
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
from streams.errors import DecodeError

AvroDict = dict[str, Any]


def _enum_table(enum: type[StrEnum]) -> dict[str, Any]:
    return {member.value: member for member in enum}


_STATUSES = _enum_table(SubscriptionStatus)
_LANES = _enum_table(Lane)
_OUTCOMES = _enum_table(OutcomeClass)
_STATES = _enum_table(DeliveryState)
_BREAKER_STATES = _enum_table(BreakerState)


def _member(table: dict[str, Any], value: str, field: str) -> Any:
    member = table.get(value)
    if member is None:
        raise DecodeError("invalid_enum", f"field {field!r} has unknown value {value!r}")
    return member


def _event_to(e: Event) -> AvroDict:
    return {
        "id": e.id,
        "tenant_id": e.tenant_id,
        "type": e.type,
        "timestamp": e.timestamp,
        "data_json": e.data_json,
        "published_at": e.published_at,
    }


def _event_from(d: AvroDict) -> Event:
    return Event(**d)


def _subscription_to(s: Subscription) -> AvroDict:
    return {
        "id": s.id,
        "tenant_id": s.tenant_id,
        "name": s.name,
        "url": s.url,
        "filters": s.filters,
        "secrets": [{"value": x.value, "not_after": x.not_after} for x in s.secrets],
        "status": s.status.value,
        "status_reason": s.status_reason,
        "owner_emails": s.owner_emails,
        "notify_url": s.notify_url,
        "rate_limit": s.rate_limit,
        "max_in_flight": s.max_in_flight,
        "timeout_s": s.timeout_s,
        "headers": [{"name": name, "value": value} for name, value in s.headers],
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "suspended_at": s.suspended_at,
    }


def _subscription_from(d: AvroDict) -> Subscription:
    d["filters"] = tuple(d["filters"])
    d["secrets"] = tuple(Secret(x["value"], x["not_after"]) for x in d["secrets"])
    d["status"] = _member(_STATUSES, d["status"], "status")
    d["owner_emails"] = tuple(d["owner_emails"])
    d["headers"] = tuple((h["name"], h["value"]) for h in d["headers"])
    return Subscription(**d)


def _delivery_to(v: Delivery) -> AvroDict:
    return {
        "delivery_id": v.delivery_id,
        "subscription_id": v.subscription_id,
        "tenant_id": v.tenant_id,
        "event": _event_to(v.event),
        "attempt": v.attempt,
        "lane": v.lane.value,
        "routed_at": v.routed_at,
        "first_attempt_at": v.first_attempt_at,
        "due_at": v.due_at,
    }


def _delivery_from(d: AvroDict) -> Delivery:
    d["event"] = Event(**d["event"])
    d["lane"] = _member(_LANES, d["lane"], "lane")
    return Delivery(**d)


def _attempt_to(a: Attempt) -> AvroDict:
    return {
        "delivery_id": a.delivery_id,
        "subscription_id": a.subscription_id,
        "tenant_id": a.tenant_id,
        "event_id": a.event_id,
        "event_type": a.event_type,
        "attempt": a.attempt,
        "lane": a.lane.value,
        "started_at": a.started_at,
        "duration_ms": a.duration_ms,
        "outcome": a.outcome.value,
        "reason": a.reason,
        "state": a.state.value,
        "http_status": a.http_status,
        "error": a.error,
        "response_excerpt": a.response_excerpt,
        "next_retry_at": a.next_retry_at,
        "published_at": a.published_at,
        "first_attempt_at": a.first_attempt_at,
    }


def _attempt_from(d: AvroDict) -> Attempt:
    d["lane"] = _member(_LANES, d["lane"], "lane")
    d["outcome"] = _member(_OUTCOMES, d["outcome"], "outcome")
    d["state"] = _member(_STATES, d["state"], "state")
    return Attempt(**d)


def _dead_letter_to(x: DeadLetter) -> AvroDict:
    return {
        "reason": x.reason,
        "dead_at": x.dead_at,
        "tenant_id": x.tenant_id,
        "subscription_id": x.subscription_id,
        "delivery": None if x.delivery is None else _delivery_to(x.delivery),
        "raw": x.raw,
        "attempts": x.attempts,
        "last_status": x.last_status,
        "last_error": x.last_error,
        "response_excerpt": x.response_excerpt,
        "first_attempt_at": x.first_attempt_at,
    }


def _dead_letter_from(d: AvroDict) -> DeadLetter:
    if d["delivery"] is not None:
        d["delivery"] = _delivery_from(d["delivery"])
    return DeadLetter(**d)


def _health_to(h: HealthOutcome) -> AvroDict:
    return {
        "subscription_id": h.subscription_id,
        "delivery_id": h.delivery_id,
        "outcome": h.outcome.value,
        "reason": h.reason,
        "at": h.at,
        "origin": h.origin,
        "attempts": h.attempts,
        "http_status": h.http_status,
        "error": h.error,
    }


def _health_from(d: AvroDict) -> HealthOutcome:
    d["outcome"] = _member(_OUTCOMES, d["outcome"], "outcome")
    return HealthOutcome(**d)


def _control_to(c: ControlEvent) -> AvroDict:
    return {
        "subscription_id": c.subscription_id,
        "kind": c.kind,
        "at": c.at,
        "reason": c.reason,
        "payload_json": c.payload_json,
    }


def _notification_to(n: Notification) -> AvroDict:
    return {
        "notification_id": n.notification_id,
        "subscription_id": n.subscription_id,
        "kind": n.kind,
        "at": n.at,
        "payload_json": n.payload_json,
        "recipients": n.recipients,
    }


def _notification_from(d: AvroDict) -> Notification:
    d["recipients"] = tuple(d["recipients"])
    return Notification(**d)


def _digest_to(d: AttemptDigest) -> AvroDict:
    return {"sealed_at": d.sealed_at, "attempts": d.attempts}


def _digest_from(d: AvroDict) -> AttemptDigest:
    return AttemptDigest(sealed_at=d["sealed_at"], attempts=tuple(d["attempts"]))


def _analytics_digest_to(d: AnalyticsDigest) -> AvroDict:
    return {"sealed_at": d.sealed_at, "subscription_ids": d.subscription_ids, "tallies": d.tallies}


def _analytics_digest_from(d: AvroDict) -> AnalyticsDigest:
    ids, tallies = tuple(d["subscription_ids"]), tuple(d["tallies"])
    if len(ids) != len(tallies):
        raise DecodeError("invalid_avro", "a digest names as many subscriptions as it has tallies")
    return AnalyticsDigest(sealed_at=d["sealed_at"], subscription_ids=ids, tallies=tallies)


def _breaker_to(b: BreakerRecord) -> AvroDict:
    return {f: getattr(b, f) for f in BreakerRecord.__slots__} | {"state": b.state.value}


def _breaker_from(d: AvroDict) -> BreakerRecord:
    d["state"] = _member(_BREAKER_STATES, d["state"], "state")
    return BreakerRecord(**d)


CONVERTERS: Mapping[type[Any], tuple[Callable[[Any], AvroDict], Callable[[AvroDict], Any]]] = {
    Event: (_event_to, _event_from),
    Subscription: (_subscription_to, _subscription_from),
    Delivery: (_delivery_to, _delivery_from),
    Attempt: (_attempt_to, _attempt_from),
    DeadLetter: (_dead_letter_to, _dead_letter_from),
    HealthOutcome: (_health_to, _health_from),
    ControlEvent: (_control_to, lambda d: ControlEvent(**d)),
    Notification: (_notification_to, _notification_from),
    AttemptDigest: (_digest_to, _digest_from),
    AnalyticsDigest: (_analytics_digest_to, _analytics_digest_from),
    BreakerRecord: (_breaker_to, _breaker_from),
}
