"""The health summary (S4): counts per status and each subscription's health record.

The records are the health agent's own (``streams.agents.health``): the table that drives
suspension (H1), read from whichever worker holds each subscription (S6), never recomputed from
the topics. Breaker states are the fleet's shared view (H8), the same on every worker.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from streams.domain.health import HealthRecord
from streams.domain.models import Subscription, SubscriptionStatus

log = logging.getLogger(__name__)


def records_of(stored: Mapping[str, Any]) -> dict[str, HealthRecord]:
    """The health agent's stored records (``HealthRecord.to_dict`` values), by subscription."""
    out: dict[str, HealthRecord] = {}
    for sub_id, value in stored.items():
        try:
            out[sub_id] = HealthRecord.from_dict(value)
        except (KeyError, TypeError, ValueError):
            log.error("unreadable health record", extra={"subscription_id": sub_id})
    return out


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
    """One subscription's health (H1) and its endpoint origin's breaker state, the fleet's (H8)."""
    data = (record or HealthRecord(sub.id)).to_dict()
    data.pop("recent", None)  # de-duplication keys: internal
    return {
        "subscription_id": sub.id,
        "tenant_id": sub.tenant_id,
        "status": sub.status.value,
        "status_reason": sub.status_reason,
        "suspended_at": sub.suspended_at,
        "health": data,
        "breaker": breaker,
    }
