"""Subscription operations (S1-S5, R5, R6): the functions both the CLI and the admin API call.

The registry topic is the source of truth; every write here produces to it. Reads take a
``source``: the admin API passes its worker's live registry, the CLI passes nothing and the
topic is loaded once. Each write gives the subscription a new ``updated_at``, strictly later than
the one it replaces, so a caller can wait until a registry shows its own write (read your write).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from streams.adapters.delivery import attempt
from streams.adapters.http import Transport
from streams.adapters.kafka_clients import write_flushed
from streams.adapters.registry import (
    SubscriptionRegistry,
    delete_subscription,
    publish_subscription,
)
from streams.adapters.secretbox import require_encryption
from streams.adapters.ssrf import HostLookup, destination_problem, system_lookup
from streams.domain.classify import classify
from streams.domain.idempotency import delivery_id
from streams.domain.models import (
    Delivery,
    Event,
    Lane,
    Secret,
    Subscription,
    SubscriptionStatus,
)
from streams.domain.signing import generate_secret
from streams.domain.ssrf import BLOCKED_DESTINATION
from streams.domain.validation import (
    SubscriptionInput,
    check_update_fields,
    validate_subscription,
)
from streams.errors import ConflictError, NotFoundError, ValidationError
from streams.settings import Settings

Clock = Callable[[], float]
RandomBytes = Callable[[int], bytes]

#: How long a rotated-out secret keeps signing (D3).
DEFAULT_GRACE_S = 24 * 3600.0
#: The longest grace period a rotation may ask for.
MAX_GRACE_S = 7 * 24 * 3600.0
#: Secrets kept at most: the current one and a few still in their grace period.
MAX_SECRETS = 4
#: The event type of `send_test` deliveries (S3).
TEST_EVENT_TYPE = "webhook.test"


class SubscriptionSource(Protocol):
    """Where subscriptions are read from: a live registry, or one loaded for the occasion."""

    def get(self, subscription_id: str) -> Subscription | None: ...

    def all(self) -> list[Subscription]: ...


def new_subscription_id() -> str:
    return f"sub_{uuid.uuid4().hex[:20]}"


def load_registry(settings: Settings) -> SubscriptionRegistry:
    registry = SubscriptionRegistry(settings)
    registry.load()
    return registry


def _source(settings: Settings, source: SubscriptionSource | None) -> SubscriptionSource:
    return source if source is not None else load_registry(settings)


def _check_destinations(settings: Settings, valid: SubscriptionInput, lookup: HostLookup) -> None:
    """The SSRF guard at write time (Q4): every address of every URL must be allowed."""
    errors: dict[str, str] = {}
    for name, url in (("url", valid.url), ("notify_url", valid.notify_url)):
        problem = None if url is None else destination_problem(settings, url, lookup)
        if problem is not None:
            errors[name] = f"{BLOCKED_DESTINATION}: {problem}"
    if errors:
        raise ValidationError(errors)


def _validate(settings: Settings, data: Mapping[str, Any], lookup: HostLookup) -> SubscriptionInput:
    valid = validate_subscription(
        data,
        allow_http=settings.allow_private_destinations,
        default_timeout=settings.default_timeout,
    )
    _check_destinations(settings, valid, lookup)
    return valid


def create_subscription(
    settings: Settings,
    data: Mapping[str, Any],
    *,
    clock: Clock = time.time,
    random_bytes: RandomBytes = os.urandom,
    subscription_id: str | None = None,
    lookup: HostLookup = system_lookup,
) -> Subscription:
    """Validate, generate a secret, and write the subscription to the registry topic."""
    valid = _validate(settings, data, lookup)
    require_encryption(settings)  # S5: no new secret in the clear unless allowed
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


def list_subscriptions(
    settings: Settings,
    tenant_id: str | None = None,
    status: str | None = None,
    *,
    source: SubscriptionSource | None = None,
) -> list[Subscription]:
    """Subscriptions by (tenant, creation time, id), optionally of one tenant and status."""
    subs = _source(settings, source).all()
    if tenant_id is not None:
        subs = [s for s in subs if s.tenant_id == tenant_id]
    if status is not None:
        subs = [s for s in subs if s.status.value == status]
    return sorted(subs, key=lambda s: (s.tenant_id, s.created_at, s.id))


def get_subscription(
    settings: Settings, subscription_id: str, *, source: SubscriptionSource | None = None
) -> Subscription:
    sub = _source(settings, source).get(subscription_id)
    if sub is None:
        raise NotFoundError(f"subscription {subscription_id} not found")
    return sub


def remove_subscription(
    settings: Settings, subscription_id: str, *, source: SubscriptionSource | None = None
) -> None:
    """Delete explicitly (a tombstone). Suspension never does this (R6)."""
    get_subscription(settings, subscription_id, source=source)
    _write(settings, lambda producer: delete_subscription(producer, settings, subscription_id))


def _input_of(sub: Subscription) -> dict[str, Any]:
    return {
        "tenant_id": sub.tenant_id,
        "name": sub.name,
        "url": sub.url,
        "filters": list(sub.filters),
        "owner_emails": list(sub.owner_emails),
        "notify_url": sub.notify_url,
        "rate_limit": sub.rate_limit,
        "max_in_flight": sub.max_in_flight,
        "timeout_s": sub.timeout_s,
        "headers": dict(sub.headers),
    }


def _next_version(sub: Subscription, clock: Clock) -> int:
    return max(int(clock() * 1000), sub.updated_at + 1)


def _save(settings: Settings, sub: Subscription) -> Subscription:
    _write(settings, lambda producer: publish_subscription(producer, settings, sub))
    return sub


def update_subscription(
    settings: Settings,
    subscription_id: str,
    patch: Mapping[str, Any],
    *,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
    lookup: HostLookup = system_lookup,
) -> Subscription:
    """Change the fields named in ``patch`` (null clears an optional one); validated as a whole."""
    current = get_subscription(settings, subscription_id, source=source)
    errors: dict[str, str] = {}
    try:
        check_update_fields(patch)
    except ValidationError as exc:
        errors.update(exc.fields)
    merged = {**_input_of(current), **{k: v for k, v in patch.items() if k not in errors}}
    try:
        valid = _validate(settings, {k: v for k, v in merged.items() if v is not None}, lookup)
    except ValidationError as exc:
        raise ValidationError({**errors, **exc.fields}) from None
    if errors:
        raise ValidationError(errors)
    updated = dataclasses.replace(
        current,
        name=valid.name,
        url=valid.url,
        filters=valid.filters,
        owner_emails=valid.owner_emails,
        notify_url=valid.notify_url,
        rate_limit=valid.rate_limit,
        max_in_flight=valid.max_in_flight,
        timeout_s=valid.timeout_s,
        headers=valid.headers,
        updated_at=_next_version(current, clock),
    )
    return _save(settings, updated)


def disable_subscription(
    settings: Settings,
    subscription_id: str,
    *,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
) -> Subscription:
    """An operator's manual stop (R5): status ``disabled``, reason ``manual``. Nothing is lost."""
    current = get_subscription(settings, subscription_id, source=source)
    if current.status is SubscriptionStatus.DISABLED:
        raise ConflictError(f"subscription {subscription_id} is already disabled")
    disabled = dataclasses.replace(
        current,
        status=SubscriptionStatus.DISABLED,
        status_reason="manual",
        updated_at=_next_version(current, clock),
    )
    return _save(settings, disabled)


def enable_subscription(
    settings: Settings,
    subscription_id: str,
    *,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
) -> Subscription:
    """Undo `disable_subscription`. Only a disabled subscription can be enabled (R5)."""
    current = get_subscription(settings, subscription_id, source=source)
    if current.status is not SubscriptionStatus.DISABLED:
        hint = (
            " (a suspended one comes back through reenable)"
            if current.status is (SubscriptionStatus.SUSPENDED)
            else ""
        )
        raise ConflictError(
            f"subscription {subscription_id} is {current.status.value}, not disabled{hint}"
        )
    enabled = dataclasses.replace(
        current,
        status=SubscriptionStatus.ACTIVE,
        status_reason=None,
        updated_at=_next_version(current, clock),
    )
    return _save(settings, enabled)


def rotate_secret(
    settings: Settings,
    subscription_id: str,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
    random_bytes: RandomBytes = os.urandom,
) -> tuple[Subscription, str]:
    """A new signing secret; the old ones keep signing until ``grace_s`` from now (D3).

    Returns the subscription and the new secret, which is shown to the caller this once.
    """
    if isinstance(grace_s, bool) or not isinstance(grace_s, int | float):
        raise ValidationError({"grace_s": "must be a number of seconds"})
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise ValidationError({"grace_s": f"must be between 0 and {MAX_GRACE_S:g} seconds"})
    require_encryption(settings)
    current = get_subscription(settings, subscription_id, source=source)
    now_ms = int(clock() * 1000)
    ends = now_ms + int(grace_s * 1000)
    retiring = [
        Secret(s.value, ends if s.not_after is None else min(s.not_after, ends))
        for s in current.secrets
        if s.not_after is None or s.not_after > now_ms
    ]
    new = generate_secret(random_bytes)
    secrets = (Secret(new), *retiring[: MAX_SECRETS - 1])
    rotated = dataclasses.replace(
        current, secrets=secrets, updated_at=_next_version(current, clock)
    )
    return _save(settings, rotated), new


@dataclass(frozen=True, slots=True)
class TestResult:
    """What `send_test` reports (S3)."""

    delivery_id: str
    url: str
    status: int | None
    latency_ms: float
    outcome: str  # success, retryable, permanent or fatal (D5)
    reason: str
    error: str | None
    response_excerpt: str | None


async def send_test(
    sub: Subscription, transport: Transport, *, clock: Clock = time.time
) -> TestResult:
    """Send one signed ``webhook.test`` event to ``sub`` through the one delivery path (S3)."""
    now_ms = int(clock() * 1000)
    event = Event(
        id=f"evt_test_{uuid.uuid4().hex[:16]}",
        tenant_id=sub.tenant_id,
        type=TEST_EVENT_TYPE,
        timestamp=now_ms,
        data_json=orjson.dumps(
            {"subscription_id": sub.id, "message": "a test delivery from hookstream"}
        ).decode(),
        published_at=now_ms,
    )
    test = Delivery(
        delivery_id=delivery_id(event.id, sub.id),
        subscription_id=sub.id,
        tenant_id=sub.tenant_id,
        event=event,
        lane=Lane.TEST,
        routed_at=now_ms,
    )
    result = await attempt(transport, sub, test, clock)
    judged = classify(result.status, result.failure)
    excerpt = result.response_excerpt.decode("utf-8", errors="replace") or None
    return TestResult(
        delivery_id=test.delivery_id,
        url=sub.url,
        status=result.status,
        latency_ms=round(result.duration_ms, 3),
        outcome=judged.outcome.value,
        reason=judged.reason,
        error=result.error,
        response_excerpt=excerpt,
    )


def _write(settings: Settings, action: Callable[[Any], None]) -> None:
    write_flushed(settings, action, "write to Kafka")


def public_view(sub: Subscription, *, show_secret: bool = False) -> dict[str, Any]:
    """A JSON-able view; the secret is shown only when asked (at creation and rotation)."""
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
        "secrets": [{"not_after": s.not_after} for s in sub.secrets],
    }
    if show_secret:
        view["secret"] = sub.secrets[0].value
    return view
