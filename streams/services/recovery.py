"""Re-enable behind a probe (R1), and the backfill it starts (R2): called by the API and CLI.

`reenable` works from any process (an API worker, the CLI) and any number of them at once:

1. It checks the subscription is suspended (a disabled one uses enable, R5; active: 409).
2. It appends a `reenable_requested` claim to the subscription's `control` partition and reads
   that partition back: the first live claim on the suspended version wins (see
   `streams.domain.recovery.claim_wins`). A second, concurrent re-enable gets a 409, so one
   suspension never starts two backfills, whatever the number of workers.
3. It sends one signed `endpoint.probe` through the one delivery path and classifies it (D5).
4. Probe failed: a new version, still suspended, status_reason `reenable_probe_failed`; the
   owner's `ProbeFailedNotice` on `notifications`; an audit record on `control`.
   Probe passed: a new version, active, status_reason `reenabled`; a `reenabled` control event
   (the health agent resets the health record on it); and one backfill job on `control` for
   the runner (``streams.lanes.backfill``), covering the archive window and the deliveries
   parked with reason `suspended` while it was suspended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from streams.adapters import codec
from streams.adapters.control_log import append, read_partition, stored_progress
from streams.adapters.delivery import attempt
from streams.adapters.http import Transport
from streams.adapters.kafka_clients import make_producer, produce
from streams.adapters.registry import publish_subscription
from streams.domain import recovery as rules
from streams.domain.backoff import RetryPolicy
from streams.domain.classify import classify
from streams.domain.idempotency import delivery_id
from streams.domain.models import (
    ControlEvent,
    Delivery,
    Event,
    Lane,
    OutcomeClass,
    Subscription,
    SubscriptionStatus,
)
from streams.domain.notices import ProbeFailedNotice, ReenabledNotice, to_notification
from streams.domain.pacing import effective_rate
from streams.domain.recovery import Claim, ControlKind, Job, JobKind, Progress
from streams.domain.settle import settle
from streams.errors import ConflictError, HookstreamError
from streams.services.portal_links import subscription_link
from streams.services.subscriptions import SubscriptionSource, get_subscription, public_view
from streams.settings import Settings

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    delivery_id: str
    status: int | None
    outcome: str
    reason: str
    error: str | None
    latency_ms: float


@dataclass(frozen=True, slots=True)
class ReenableResult:
    """What a re-enable did. ``ok`` False: the probe failed and the subscription is suspended."""

    ok: bool
    subscription: Subscription
    probe: ProbeResult
    job_id: str | None = None
    window: rules.Window | None = None

    def view(self) -> dict[str, Any]:
        window = None
        if self.window is not None:
            window = {"since": self.window.start_ms, "until": self.window.end_ms}
        return {
            "reenabled": self.ok,
            "subscription": public_view(self.subscription),
            "probe": dataclasses.asdict(self.probe),
            "backfill": None
            if self.job_id is None
            else {"job_id": self.job_id, **({"window": window} if window else {})},
        }


def backfill_rate(settings: Settings) -> float:
    """The default pace of backfills and replays (``HOOKSTREAM_BACKFILL_RATE``)."""
    return settings.backfill_rate


# --- the claim ---------------------------------------------------------------------------------


def _claim(settings: Settings, sub: Subscription, clock: Clock) -> None:
    """Append this re-enable's claim and check it is the first on ``sub``'s version (409)."""
    request_id = uuid.uuid4().hex
    event = ControlEvent(
        subscription_id=sub.id,
        kind=ControlKind.REENABLE_REQUESTED.value,
        at=int(clock() * 1000),
        payload_json=orjson.dumps({"request_id": request_id, "version": sub.updated_at}).decode(),
    )
    (mine,) = append(settings, [event])
    since = sub.updated_at - rules.CLAIM_SKEW_MS
    claims = []
    for offset, at, seen in read_partition(settings, mine.partition, since, mine.offset):
        if seen.kind != ControlKind.REENABLE_REQUESTED.value or seen.subscription_id != sub.id:
            continue
        payload = orjson.loads(seen.payload_json)
        claims.append(
            Claim(
                str(payload.get("request_id")), sub.id, int(payload.get("version", -1)), offset, at
            )
        )
    own = Claim(request_id, sub.id, sub.updated_at, mine.offset, mine.at)
    if not rules.claim_wins(own, claims):
        raise ConflictError(f"a re-enable of subscription {sub.id} is already in progress")


# --- the probe ---------------------------------------------------------------------------------


def probe_delivery(sub: Subscription, now_ms: int) -> Delivery:
    """The one signed ``endpoint.probe`` event of a re-enable (R1)."""
    event = Event(
        id=f"evt_probe_{uuid.uuid4().hex[:16]}",
        tenant_id=sub.tenant_id,
        type=rules.PROBE_EVENT_TYPE,
        timestamp=now_ms,
        data_json=orjson.dumps(
            {
                "subscription_id": sub.id,
                "message": "hookstream checks the endpoint before re-enabling the subscription",
            }
        ).decode(),
        published_at=now_ms,
    )
    return Delivery(
        delivery_id=delivery_id(event.id, sub.id),
        subscription_id=sub.id,
        tenant_id=sub.tenant_id,
        event=event,
        lane=Lane.PROBE,
        routed_at=now_ms,
    )


async def _probe(
    settings: Settings, sub: Subscription, transport: Transport, clock: Clock
) -> ProbeResult:
    probe = probe_delivery(sub, int(clock() * 1000))
    result = await attempt(transport, sub, probe, clock)
    verdict = classify(result.status, result.failure)
    ledger = settle(
        probe,
        result,
        RetryPolicy(schedule=(1.0,)),
        now_ms=int(clock() * 1000),
        rand=lambda: 0.0,
        url=sub.url,
    )
    await asyncio.to_thread(_write_attempt, settings, ledger.attempt)
    return ProbeResult(
        delivery_id=probe.delivery_id,
        status=result.status,
        outcome=verdict.outcome.value,
        reason=verdict.reason,
        error=(result.error or "")[:500] or None,
        latency_ms=round(result.duration_ms, 3),
    )


def _write_attempt(settings: Settings, record: Any) -> None:
    producer = make_producer(settings)
    produce(producer, settings.topic("attempts"), record.subscription_id, codec.encode(record))
    if producer.flush(15):
        raise HookstreamError("could not write the probe's attempt to the ledger")


# --- the outcomes ------------------------------------------------------------------------------


def _version(sub: Subscription, clock: Clock) -> int:
    return max(int(clock() * 1000), sub.updated_at + 1)


def _publish(settings: Settings, sub: Subscription, notes: list[tuple[str, bytes]]) -> None:
    """Write the new subscription version, then the notifications, and wait for the acks."""
    producer = make_producer(settings)
    publish_subscription(producer, settings, sub)
    for key, value in notes:
        produce(producer, settings.topic("notifications"), key, value)
    if producer.flush(15):
        raise HookstreamError("could not write the re-enable's records to Kafka")


def _failed(
    settings: Settings, sub: Subscription, probe: ProbeResult, clock: Clock
) -> Subscription:
    now = _version(sub, clock)
    kept = dataclasses.replace(sub, status_reason=rules.PROBE_FAILED_REASON, updated_at=now)
    notice = ProbeFailedNotice(
        subscription_id=sub.id,
        subscription_name=sub.name,
        tenant_id=sub.tenant_id,
        url=sub.url,
        probed_at=now,
        outcome_class=OutcomeClass(probe.outcome),
        retention_s=settings.archive_retention,
        probe_status=probe.status,
        probe_error=probe.error or probe.reason,
        suspended_at=sub.suspended_at,
        portal_link=subscription_link(settings, sub.id, now / 1000),
    )
    note = to_notification(notice, sub.owner_emails)
    _publish(settings, kept, [(sub.id, codec.encode(note))])
    audit = ControlEvent(
        subscription_id=sub.id,
        kind=ControlKind.PROBE_FAILED.value,
        at=now,
        reason=rules.PROBE_FAILED_REASON,
        payload_json=orjson.dumps(dataclasses.asdict(probe)).decode(),
    )
    append(settings, [audit])
    return kept


def backfill_job(
    settings: Settings, sub: Subscription, active_version: int, rate: float | None
) -> tuple[Job, rules.Window]:
    """The job a successful re-enable starts: the archive window and the parked deliveries."""
    settle_ms = round(settings.reenable_settle * 1000)
    window = rules.backfill_window(
        sub.suspended_at, active_version, settings.archive_retention, settle_ms
    )
    job = Job(
        job_id=f"bf_{uuid.uuid4().hex[:16]}",
        kind=JobKind.BACKFILL,
        subscription_id=sub.id,
        requested_at=active_version,
        rate=effective_rate(rate, backfill_rate(settings), sub.rate_limit),
        since_ms=window.start_ms,
        until_ms=window.end_ms,
        dlq_reason=rules.PARKED_SUSPENDED,
        dlq_since_ms=sub.suspended_at or window.start_ms,
        dlq_until_ms=window.end_ms,
        min_version=active_version,
    )
    return job, window


def job_event(job: Job) -> ControlEvent:
    return ControlEvent(
        subscription_id=job.subscription_id,
        kind=ControlKind.JOB_REQUESTED.value,
        at=job.requested_at,
        reason=job.kind.value,
        payload_json=job.to_json(),
    )


def _succeeded(
    settings: Settings, sub: Subscription, clock: Clock, rate: float | None
) -> tuple[Subscription, Job, rules.Window]:
    now = _version(sub, clock)
    active = dataclasses.replace(
        sub,
        status=SubscriptionStatus.ACTIVE,
        status_reason=rules.REENABLED_REASON,
        suspended_at=None,
        updated_at=now,
    )
    job, window = backfill_job(settings, sub, now, rate)
    notice = ReenabledNotice(
        subscription_id=sub.id,
        subscription_name=sub.name,
        tenant_id=sub.tenant_id,
        url=sub.url,
        reenabled_at=now,
        suspended_at=sub.suspended_at,
    )
    _publish(settings, active, [(sub.id, codec.encode(to_notification(notice, sub.owner_emails)))])
    reenabled = ControlEvent(
        subscription_id=sub.id,
        kind=ControlKind.REENABLED.value,
        at=now,
        reason=rules.REENABLED_REASON,
        payload_json=orjson.dumps(
            {"suspended_at": sub.suspended_at, "job_id": job.job_id, "url": sub.url}
        ).decode(),
    )
    append(settings, [reenabled, job_event(job)])
    return active, job, window


async def reenable(
    settings: Settings,
    subscription_id: str,
    transport: Transport,
    *,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
    rate: float | None = None,
) -> ReenableResult:
    """R1: probe, then re-enable and backfill, or keep it suspended and tell the owner."""
    sub = await asyncio.to_thread(get_subscription, settings, subscription_id, source=source)
    rules.check_reenable(sub)
    if rate is not None:
        effective_rate(rate)  # a bad rate is refused before anything is written
    await asyncio.to_thread(_claim, settings, sub, clock)
    probe = await _probe(settings, sub, transport, clock)
    if probe.outcome != OutcomeClass.SUCCESS.value:
        kept = await asyncio.to_thread(_failed, settings, sub, probe, clock)
        return ReenableResult(ok=False, subscription=kept, probe=probe)
    active, job, window = await asyncio.to_thread(_succeeded, settings, sub, clock, rate)
    return ReenableResult(
        ok=True, subscription=active, probe=probe, job_id=job.job_id, window=window
    )


# --- progress ------------------------------------------------------------------------------------


#: How long one read of the runner's committed progress answers progress questions.
PROGRESS_CACHE_S = 1.0
_progress_cache: dict[str, tuple[float, list[str]]] = {}


def _stored(settings: Settings) -> list[str]:
    key = f"{settings.kafka_bootstrap}/{settings.group_id}/{settings.topic_prefix}"
    cached = _progress_cache.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < PROGRESS_CACHE_S:
        return cached[1]
    texts = stored_progress(settings)
    _progress_cache[key] = (now, texts)
    return texts


def backfill_progress(settings: Settings, subscription_id: str) -> dict[str, Any] | None:
    """The subscription's running (or last finished) backfill or replay: done / total (R2).

    Read from the runner's committed progress, at most once a second per pipeline."""
    for text in _stored(settings):
        for item in _progress_items(text):
            if item.subscription_id == subscription_id:
                return item.view()
    return None


def _progress_items(text: str) -> list[Progress]:
    try:
        data = orjson.loads(text)
        items = data if isinstance(data, list) else [data]
        return [Progress.from_json(orjson.dumps(item).decode()) for item in items]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return []
