"""The health summary (S4): counts per status and each subscription's health record.

Health records are rebuilt from the `health` topic (terminal outcomes) and the re-enable events
on `control`, with the same pure function the health agent uses (`apply_outcome`, `reset`):
outcomes carry their own times, so the replay gives the record the agent holds. This works from
any worker and from the CLI, at the cost of reading both topics per request; breaker states are
those of the worker that answers (each worker keeps its own, H8).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from streams.adapters import codec
from streams.adapters.runtime_config import load_policy
from streams.adapters.topic_reader import scan
from streams.domain.health import HealthRecord, apply_outcome, reset
from streams.domain.models import ControlEvent, HealthOutcome, Subscription, SubscriptionStatus
from streams.domain.recovery import ControlKind
from streams.errors import DecodeError
from streams.settings import Settings


def health_records(settings: Settings) -> dict[str, HealthRecord]:
    """Every subscription's health record, replayed from the topics."""
    policy = load_policy(settings)
    steps: list[tuple[int, int, HealthOutcome | ControlEvent]] = []
    for order, msg in enumerate(scan(settings, settings.topic("health"))):
        try:
            outcome = codec.decode(HealthOutcome, msg.value() or b"")
        except DecodeError:
            continue
        steps.append((outcome.at, order, outcome))
    for order, msg in enumerate(scan(settings, settings.topic("control"))):
        try:
            event = codec.decode(ControlEvent, msg.value() or b"")
        except DecodeError:
            continue
        if event.kind == ControlKind.REENABLED.value:
            steps.append((event.at, order, event))
    records: dict[str, HealthRecord] = {}
    for _at, _order, item in sorted(steps, key=lambda s: (s[0], s[1])):
        current = records.get(item.subscription_id)
        if isinstance(item, ControlEvent):
            if current is not None:
                records[item.subscription_id] = reset(current, item.at)
            continue
        records[item.subscription_id] = apply_outcome(current, item, policy, item.at).record
    return records


def summary(subs: list[Subscription], records: dict[str, HealthRecord]) -> dict[str, Any]:
    """Counts of active, suspended (auto), disabled (manual) and failing subscriptions."""
    counts = Counter(sub.status.value for sub in subs)
    failing = [
        sub.id
        for sub in subs
        if sub.status is SubscriptionStatus.ACTIVE
        and (rec := records.get(sub.id)) is not None
        and rec.consecutive_failures > 0
    ]
    return {
        "active": counts.get(SubscriptionStatus.ACTIVE.value, 0),
        "suspended": counts.get(SubscriptionStatus.SUSPENDED.value, 0),
        "disabled": counts.get(SubscriptionStatus.DISABLED.value, 0),
        "failing": len(failing),
        "failing_subscriptions": sorted(failing),
        "total": len(subs),
    }


def record_view(sub: Subscription, record: HealthRecord | None, breaker: str) -> dict[str, Any]:
    """One subscription's health (H1) and its endpoint's breaker state here (H7)."""
    data = (record or HealthRecord(sub.id)).to_dict()
    data.pop("recent", None)  # de-duplication keys: internal
    return {
        "subscription_id": sub.id,
        "status": sub.status.value,
        "status_reason": sub.status_reason,
        "suspended_at": sub.suspended_at,
        "health": data,
        "breaker": breaker,
    }
