"""Subscription operations (S1, R6): create, list, show, delete.

The registry topic is the source of truth. Reads here load it once (CLI use); the workers keep
their own continuously updated copy.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from streams.adapters.kafka_clients import ProduceTracker, make_producer
from streams.adapters.registry import (
    SubscriptionRegistry,
    delete_subscription,
    publish_subscription,
)
from streams.domain.models import Secret, Subscription
from streams.domain.signing import generate_secret
from streams.domain.validation import validate_subscription
from streams.errors import HookstreamError, NotFoundError
from streams.settings import Settings


def new_subscription_id() -> str:
    return f"sub_{uuid.uuid4().hex[:20]}"


def create_subscription(
    settings: Settings,
    data: Mapping[str, Any],
    *,
    clock: Callable[[], float] = time.time,
    random_bytes: Callable[[int], bytes] = os.urandom,
    subscription_id: str | None = None,
) -> Subscription:
    """Validate, generate a secret, and write the subscription to the registry topic."""
    valid = validate_subscription(
        data,
        allow_http=settings.allow_private_destinations,
        default_timeout=settings.default_timeout,
    )
    now_ms = int(clock() * 1000)
    sub = Subscription(
        id=subscription_id or new_subscription_id(),
        tenant_id=valid.tenant_id,
        name=valid.name,
        url=valid.url,
        filters=valid.filters,
        secrets=(Secret(generate_secret(random_bytes)),),
        owner_emails=valid.owner_emails,
        notify_url=valid.notify_url,
        rate_limit=valid.rate_limit,
        max_in_flight=valid.max_in_flight,
        timeout_s=valid.timeout_s,
        headers=valid.headers,
        created_at=now_ms,
        updated_at=now_ms,
    )
    _write(settings, lambda producer: publish_subscription(producer, settings, sub))
    return sub


def load_registry(settings: Settings) -> SubscriptionRegistry:
    registry = SubscriptionRegistry(settings)
    registry.load()
    return registry


def list_subscriptions(settings: Settings, tenant_id: str | None = None) -> list[Subscription]:
    subs = load_registry(settings).all()
    if tenant_id is not None:
        subs = [s for s in subs if s.tenant_id == tenant_id]
    return sorted(subs, key=lambda s: (s.tenant_id, s.created_at, s.id))


def get_subscription(settings: Settings, subscription_id: str) -> Subscription:
    sub = load_registry(settings).get(subscription_id)
    if sub is None:
        raise NotFoundError(f"subscription {subscription_id} not found")
    return sub


def remove_subscription(settings: Settings, subscription_id: str) -> None:
    """Delete explicitly (a tombstone). Suspension never does this (R6)."""
    get_subscription(settings, subscription_id)
    _write(settings, lambda producer: delete_subscription(producer, settings, subscription_id))


def _write(settings: Settings, action: Callable[[Any], None]) -> None:
    tracker = ProduceTracker()
    producer = make_producer(settings, on_delivery=tracker)
    action(producer)
    if producer.flush(15) or tracker.failed:
        raise HookstreamError(f"could not write to Kafka: {tracker.failed or 'timed out'}")


def public_view(sub: Subscription, *, show_secret: bool = False) -> dict[str, Any]:
    """A JSON-able view; secrets are shown only when asked (at creation)."""
    view: dict[str, Any] = {
        "id": sub.id,
        "tenant_id": sub.tenant_id,
        "name": sub.name,
        "url": sub.url,
        "filters": list(sub.filters),
        "status": sub.status.value,
        "status_reason": sub.status_reason,
        "owner_emails": list(sub.owner_emails),
        "notify_url": sub.notify_url,
        "rate_limit": sub.rate_limit,
        "max_in_flight": sub.max_in_flight,
        "timeout_s": sub.timeout_s,
        "headers": dict(sub.headers),
        "created_at": sub.created_at,
        "updated_at": sub.updated_at,
        "suspended_at": sub.suspended_at,
    }
    if show_secret:
        view["secret"] = sub.secrets[0].value
    return view
