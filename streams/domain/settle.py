"""What one attempt's result means for its delivery (D5-D8, D10), pure.

`settle` turns the result of one HTTP attempt into every record the pipeline must write: the
ledger entry, and exactly one of a retry (handed to a tier), a dead letter, or nothing more on
success. The health outcome is emitted once per delivery, when its retries end (D10): a success
or a terminal/exhausted failure, never a retryable attempt that will be retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from msgspec import structs

from streams.domain.backoff import RetryPolicy, plan_retry
from streams.domain.breaker import origin_of
from streams.domain.classify import classify, parse_retry_after
from streams.domain.models import (
    Attempt,
    DeadLetter,
    Delivery,
    DeliveryState,
    FailureKind,
    HealthOutcome,
    Lane,
    OutcomeClass,
)

EXCERPT_CHARS = 1024
ERROR_CHARS = 500


class AttemptResult(NamedTuple):
    """What the transport saw: a status, or a failure below HTTP."""

    started_at: int
    duration_ms: float
    status: int | None = None
    failure: FailureKind | None = None
    error: str | None = None
    response_excerpt: bytes = b""
    retry_after: str | None = None


class Settlement(NamedTuple):
    attempt: Attempt
    retry: Delivery | None = None
    retry_tier: int | None = None
    dead_letter: DeadLetter | None = None
    health: HealthOutcome | None = None


def _answer(status: int | None, excerpt: str | None) -> str | None:
    """What the endpoint said, for the health record's last error (H1, H5)."""
    if status is None:
        return None
    text = f"HTTP {status}"
    if excerpt:
        text += ": " + " ".join(excerpt.split())
    return text[:ERROR_CHARS]


def _excerpt(raw: bytes) -> str | None:
    if not raw:
        return None
    return raw[:EXCERPT_CHARS].decode("utf-8", errors="replace")


def settle(
    delivery: Delivery,
    result: AttemptResult,
    policy: RetryPolicy,
    *,
    now_ms: int,
    rand: Callable[[], float],
    url: str,
) -> Settlement:
    """Decide what happens after one attempt of ``delivery``."""
    verdict = classify(result.status, result.failure)
    first_attempt_at = delivery.first_attempt_at or result.started_at
    error = (result.error or "")[:ERROR_CHARS] or None
    excerpt = _excerpt(result.response_excerpt)
    base = Attempt(
        delivery_id=delivery.delivery_id,
        subscription_id=delivery.subscription_id,
        tenant_id=delivery.tenant_id,
        event_id=delivery.event.id,
        event_type=delivery.event.type,
        attempt=delivery.attempt,
        lane=delivery.lane,
        started_at=result.started_at,
        duration_ms=result.duration_ms,
        outcome=verdict.outcome,
        reason=verdict.reason,
        state=DeliveryState.SUCCESS,
        http_status=result.status,
        error=error,
        response_excerpt=excerpt,
        published_at=delivery.event.published_at,
        first_attempt_at=first_attempt_at,
    )

    def health(outcome: OutcomeClass) -> HealthOutcome:
        return HealthOutcome(
            subscription_id=delivery.subscription_id,
            delivery_id=delivery.delivery_id,
            outcome=outcome,
            reason=verdict.reason,
            at=now_ms,
            origin=origin_of(url),
            attempts=delivery.attempt,
            http_status=result.status,
            # a success has no error: "HTTP 200" is not one (H1)
            error=None
            if outcome is OutcomeClass.SUCCESS
            else error or _answer(result.status, excerpt),
        )

    if verdict.outcome is OutcomeClass.SUCCESS:
        return Settlement(attempt=base, health=health(OutcomeClass.SUCCESS))

    if verdict.outcome is OutcomeClass.RETRYABLE and delivery.lane not in _NO_RETRY_LANES:
        decision = plan_retry(
            policy,
            failed_attempt=delivery.attempt,
            first_attempt_at_ms=first_attempt_at,
            now_ms=now_ms,
            rand=rand,
            retry_after_s=(
                parse_retry_after(result.retry_after, now_ms)
                if result.status in _RETRY_AFTER_STATUSES
                else None
            ),
        )
        if not decision.exhausted and decision.tier is not None and decision.due_at_ms is not None:
            retry = structs.replace(
                delivery,
                attempt=delivery.attempt + 1,
                lane=Lane.RETRY,
                first_attempt_at=first_attempt_at,
                due_at=decision.due_at_ms,
            )
            attempt = structs.replace(
                base, state=DeliveryState.ERROR, next_retry_at=decision.due_at_ms
            )
            return Settlement(attempt=attempt, retry=retry, retry_tier=decision.tier)
        state, reason = DeliveryState.EXHAUSTED, f"exhausted:{verdict.reason}"
    else:
        state, reason = DeliveryState.DEAD, verdict.reason

    dead = DeadLetter(
        reason=reason,
        dead_at=now_ms,
        tenant_id=delivery.tenant_id,
        subscription_id=delivery.subscription_id,
        delivery=delivery,
        attempts=delivery.attempt,
        last_status=result.status,
        last_error=error,
        response_excerpt=excerpt,
        first_attempt_at=first_attempt_at,
    )
    attempt = structs.replace(base, state=state)
    if delivery.lane in _NO_RETRY_LANES:
        return Settlement(attempt=attempt)  # probes and tests answer their caller instead
    return Settlement(attempt=attempt, dead_letter=dead, health=health(verdict.outcome))


# Retry-After is honoured on these answers only (D6, F2).
_RETRY_AFTER_STATUSES = frozenset({429, 503})

# Probe and test deliveries report to whoever asked; they are not retried or dead-lettered,
# and they never move the health counters.
_NO_RETRY_LANES = frozenset({Lane.PROBE, Lane.TEST})
