"""The attempt ledger (D7) and the dead letters (D8), read from their topics.

Each HTTP attempt is one record on `attempts`; a delivery's state is the state of its latest
attempt. This reader scans the topic (fine for the CLI and for audits); an indexed table for
the admin API is a separate piece of work.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.models import Attempt, DeadLetter, DeliveryState
from streams.errors import DecodeError, NotFoundError
from streams.settings import Settings


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    delivery_id: str
    subscription_id: str
    event_id: str
    event_type: str
    state: DeliveryState
    attempts: int
    last_http_status: int | None
    last_error: str | None
    first_attempt_at: int | None
    last_attempt_at: int
    next_retry_at: int | None


def all_attempts(settings: Settings) -> list[Attempt]:
    out = []
    for msg in scan(settings, settings.topic("attempts")):
        try:
            out.append(codec.decode(Attempt, msg.value() or b""))
        except DecodeError:
            continue
    return out


def summarise(history: list[Attempt]) -> DeliverySummary:
    """The ledger entry of one delivery from its attempts (oldest first)."""
    last = max(history, key=lambda a: (a.attempt, a.started_at))
    return DeliverySummary(
        delivery_id=last.delivery_id,
        subscription_id=last.subscription_id,
        event_id=last.event_id,
        event_type=last.event_type,
        state=last.state,
        attempts=max(a.attempt for a in history),
        last_http_status=last.http_status,
        last_error=last.error,
        first_attempt_at=min((a.started_at for a in history), default=None),
        last_attempt_at=last.started_at,
        next_retry_at=last.next_retry_at,
    )


def delivery_history(settings: Settings, delivery_id: str) -> list[Attempt]:
    history = [a for a in all_attempts(settings) if a.delivery_id == delivery_id]
    if not history:
        raise NotFoundError(f"delivery {delivery_id} not found in the ledger")
    return sorted(history, key=lambda a: (a.attempt, a.started_at))


def list_deliveries(
    settings: Settings, subscription_id: str | None = None, state: str | None = None
) -> list[DeliverySummary]:
    grouped: dict[str, list[Attempt]] = {}
    for att in all_attempts(settings):
        if subscription_id is None or att.subscription_id == subscription_id:
            grouped.setdefault(att.delivery_id, []).append(att)
    summaries = [summarise(h) for h in grouped.values()]
    if state is not None:
        summaries = [s for s in summaries if s.state.value == state]
    return sorted(summaries, key=lambda s: s.last_attempt_at)


def list_dead_letters(
    settings: Settings,
    subscription_id: str | None = None,
    reason: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[DeadLetter]:
    out = []
    for msg in scan(settings, settings.topic("dlq")):
        try:
            letter = codec.decode(DeadLetter, msg.value() or b"")
        except DecodeError:
            continue
        if subscription_id is not None and letter.subscription_id != subscription_id:
            continue
        if reason is not None and not letter.reason.startswith(reason):
            continue
        if since_ms is not None and letter.dead_at < since_ms:
            continue
        if until_ms is not None and letter.dead_at >= until_ms:
            continue
        out.append(letter)
    return out
