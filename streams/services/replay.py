"""Replay (R3): one delivery by id, an archive time range, or dead letters, with the same keys.

Every replay keeps the delivery's idempotency key (D2), so receivers can tell a replay from a
new event. A replay goes out on the `backfill` topic with lane ``replay``: a single delivery is
written at once; a range or a dead-letter selection becomes a paced job for the backfill runner
(``streams.lanes.backfill``), one job per subscription. Replays go to active subscriptions
only: a suspended or disabled one is refused with a 409 that names its status.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from msgspec import structs

from streams.adapters import codec
from streams.adapters.archive_reader import ArchiveReader
from streams.adapters.control_log import append
from streams.adapters.kafka_clients import make_producer, produce
from streams.domain import recovery as rules
from streams.domain.models import Delivery, DeliveryState, Event, Lane, Subscription
from streams.domain.pacing import effective_rate
from streams.domain.recovery import Job, JobKind, Window
from streams.errors import HookstreamError, NotFoundError, ValidationError
from streams.services import ledger
from streams.services.recovery import backfill_rate, job_event
from streams.services.subscriptions import SubscriptionSource, get_subscription, load_registry
from streams.settings import Settings

Clock = Callable[[], float]
#: How far before an event's publish time its archive record may be (producer clock skew).
ARCHIVE_LOOKBACK_MS = 60_000


# --- one delivery --------------------------------------------------------------------------------


def _find_event(settings: Settings, tenant_id: str, event_id: str, published_at: int) -> Event:
    reader = ArchiveReader(settings)
    try:
        window = Window(published_at - ARCHIVE_LOOKBACK_MS, int(time.time() * 1000) + 1)
        for record in reader.read(tenant_id, reader.ranges(window)):
            if record.event is not None and record.event.id == event_id:
                return record.event
    finally:
        reader.close()
    raise NotFoundError(f"event {event_id} is no longer in the archive (retention)")


async def replay_delivery(
    settings: Settings,
    ledger_source: ledger.LedgerSource,
    key: str,
    *,
    confirm_duplicate: bool = False,
    source: SubscriptionSource | None = None,
    visible: Callable[[str], bool] = lambda _tenant: True,
    clock: Clock = time.time,
) -> dict[str, Any]:
    """R3: send delivery ``key`` again now; 409 if it already succeeded, unless confirmed.

    Its ledger entry (S6) gives its subscription, whether it succeeded and its lifetime attempt
    count: the replay's attempt number is the next one (D7). Its newest dead letter, if any,
    carries the payload; otherwise the event is read back from the archive."""
    found = await ledger_source.delivery(key)
    if found is None or not visible(found["tenant_id"]):
        raise NotFoundError(f"delivery {key} not found in the ledger")
    summary = found["summary"]
    sub = get_subscription(settings, summary["subscription_id"], source=source)
    rules.check_replayable(sub)
    succeeded = any(a["state"] == DeliveryState.SUCCESS.value for a in found["attempts"])
    rules.check_duplicate(key, succeeded, confirm_duplicate)
    letters = await ledger_source.letters_of(key, sub.id)
    now_ms = int(clock() * 1000)
    attempts = int(summary["attempts"])
    if letters:
        delivery = rules.from_letter(letters[-1], Lane.REPLAY, now_ms)
    else:
        last = found["attempts"][-1]
        event = await asyncio.to_thread(
            _find_event, settings, found["tenant_id"], last["event_id"], last["published_at"]
        )
        delivery = rules.redelivery(key, sub, event, Lane.REPLAY, attempts + 1, now_ms)
    delivery = structs.replace(delivery, attempt=max(delivery.attempt, attempts + 1))
    await asyncio.to_thread(_send_now, settings, sub.id, delivery)
    return {
        "delivery_id": key,
        "subscription_id": sub.id,
        "event_id": delivery.event.id,
        "attempt": delivery.attempt,
        "lane": Lane.REPLAY.value,
        "duplicate": succeeded,
    }


def _send_now(settings: Settings, sub_id: str, delivery: Delivery) -> None:
    producer = make_producer(settings)
    produce(producer, settings.topic("backfill"), sub_id, codec.encode(delivery))
    if producer.flush(15):
        raise HookstreamError("could not write the replay to Kafka")


# --- archive ranges ------------------------------------------------------------------------------


def _targets(
    settings: Settings,
    subscription_id: str | None,
    tenant_id: str | None,
    source: SubscriptionSource | None,
) -> tuple[list[Subscription], list[Subscription]]:
    """(active targets, refused ones). One subscription must be active (409 otherwise)."""
    if (subscription_id is None) == (tenant_id is None):
        raise ValidationError({"subscription": "give exactly one of a subscription or a tenant"})
    if subscription_id is not None:
        sub = get_subscription(settings, subscription_id, source=source)
        rules.check_replayable(sub)
        return [sub], []
    subs = [s for s in (source or load_registry(settings)).all() if s.tenant_id == tenant_id]
    if not subs:
        raise NotFoundError(f"tenant {tenant_id} has no subscriptions")
    active = [s for s in subs if s.status.value == "active"]
    return active, [s for s in subs if s.status.value != "active"]


def _count(settings: Settings, subs: list[Subscription], window: Window) -> dict[str, int]:
    counts = {s.id: 0 for s in subs}
    if not subs or window.empty:
        return counts
    reader = ArchiveReader(settings)
    try:
        seen: set[str] = set()
        for record in reader.read(subs[0].tenant_id, reader.ranges(window)):
            event = record.event
            if event is None or event.id in seen:
                continue
            seen.add(event.id)
            for sub in subs:
                if rules.selects(sub, event):
                    counts[sub.id] += 1
    finally:
        reader.close()
    return counts


def replay_range(
    settings: Settings,
    since_ms: int,
    until_ms: int,
    *,
    subscription_id: str | None = None,
    tenant_id: str | None = None,
    dry_run: bool = False,
    rate: float | None = None,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
) -> dict[str, Any]:
    """R3: the archived events of a time range, for one subscription or a whole tenant."""
    now_ms = int(clock() * 1000)
    window = rules.replay_window(since_ms, until_ms, now_ms, settings.archive_retention)
    if rate is not None:
        effective_rate(rate)
    active, refused = _targets(settings, subscription_id, tenant_id, source)
    out: dict[str, Any] = {
        "dry_run": dry_run,
        "since": window.start_ms,
        "until": window.end_ms,
        "clipped": window.clipped,
        "refused": [{"id": s.id, "status": s.status.value} for s in refused],
    }
    if dry_run:
        counts = _count(settings, active, window)
        out["subscriptions"] = [{"id": s.id, "events": counts[s.id]} for s in active]
        out["events"] = sum(counts.values())
        return out
    jobs = [
        Job(
            job_id=f"rp_{uuid.uuid4().hex[:16]}",
            kind=JobKind.REPLAY,
            subscription_id=s.id,
            requested_at=now_ms,
            rate=effective_rate(rate, backfill_rate(settings), s.rate_limit),
            since_ms=window.start_ms,
            until_ms=window.end_ms,
            min_version=s.updated_at,
        )
        for s in active
    ]
    if jobs:
        append(settings, [job_event(job) for job in jobs])
    out["subscriptions"] = [{"id": j.subscription_id, "job_id": j.job_id} for j in jobs]
    return out


# --- dead letters -------------------------------------------------------------------------------


async def replay_dead_letters(
    settings: Settings,
    ledger_source: ledger.LedgerSource,
    subscription_id: str,
    *,
    reason: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    dry_run: bool = False,
    rate: float | None = None,
    source: SubscriptionSource | None = None,
    clock: Clock = time.time,
) -> dict[str, Any]:
    """R3: dead letters of one subscription, by reason prefix and time, sent again paced: each
    delivery once, whatever its number of dead letters (the dry run counts deliveries)."""
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ValidationError({"until": "must be later than since"})
    if rate is not None:
        effective_rate(rate)
    sub = get_subscription(settings, subscription_id, source=source)
    rules.check_replayable(sub)
    now_ms = int(clock() * 1000)
    job = Job(
        job_id=f"dq_{uuid.uuid4().hex[:16]}",
        kind=JobKind.DLQ,
        subscription_id=sub.id,
        requested_at=now_ms,
        rate=effective_rate(rate, backfill_rate(settings), sub.rate_limit),
        dlq_reason=reason,
        dlq_since_ms=since_ms,
        dlq_until_ms=until_ms,
        min_version=sub.updated_at,
    )
    out: dict[str, Any] = {"dry_run": dry_run, "subscription_id": sub.id, "reason": reason}
    if dry_run:
        letters = await ledger.letters_to_replay(ledger_source, sub.id, reason, since_ms, until_ms)
        out["dead_letters"] = len(letters)
        return out
    await asyncio.to_thread(append, settings, [job_event(job)])
    out["job_id"] = job.job_id
    return out
