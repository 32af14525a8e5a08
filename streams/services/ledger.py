"""The attempt ledger (D7), the dead letters (D8) and the health records (S4), as the admin API
and the CLI read them (S6).

Every read goes to a `LedgerSource`: the worker's state (``streams.agents.ledger``), read from
whichever worker holds the subscription's partition. Nothing here scans a topic. This module
holds what every source and caller share: how a delivery's attempts become its summary and its
JSON view, and the tenant checks (another tenant's delivery is a 404, like one that does not
exist).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from typing import Any, Protocol

from streams.adapters import codec
from streams.domain.models import Attempt, DeadLetter, DeliveryState
from streams.errors import DecodeError, NotFoundError
from streams.plain import plain

#: The states a delivery is seen in: the ledger records attempts, so a delivery appears with
#: its first attempt's outcome (D7; ``pending`` and ``delivering`` are never written).
LISTED_STATES = (
    DeliveryState.SUCCESS.value,
    DeliveryState.ERROR.value,
    DeliveryState.EXHAUSTED.value,
    DeliveryState.DEAD.value,
)


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


def decode_attempts(records: list[bytes]) -> list[Attempt]:
    """A delivery's stored attempts, oldest first; unreadable ones are left out."""
    out = []
    for raw in records:
        try:
            out.append(codec.decode(Attempt, raw))
        except DecodeError:
            continue
    return sorted(out, key=lambda a: (a.attempt, a.started_at))


def delivery_view(records: list[bytes]) -> dict[str, Any] | None:
    """``{"tenant_id", "summary", "attempts"}`` of a delivery's stored attempts."""
    history = decode_attempts(records)
    if not history:
        return None
    return {
        "tenant_id": history[-1].tenant_id,
        "summary": plain(summarise(history)),
        "attempts": plain(history),
    }


def letter_view(record: bytes) -> dict[str, Any] | None:
    try:
        return dict(plain(codec.decode(DeadLetter, record)))
    except DecodeError:
        return None


class LedgerSource(Protocol):
    """The ledger, dead-letter and health state, from any worker."""

    async def delivery(self, delivery_id: str) -> dict[str, Any] | None: ...

    async def deliveries(
        self, subscription_id: str, state: str | None, cursor: str | None, limit: int
    ) -> dict[str, Any]: ...

    async def dead_letters(
        self,
        *,
        subscription_id: str | None,
        tenant_id: str | None,
        reason: str | None,
        since_ms: int | None,
        until_ms: int | None,
        cursor: str | None,
        limit: int,
        raw: bool = False,
    ) -> dict[str, Any]: ...

    async def letters_of(self, delivery_id: str, subscription_id: str) -> list[DeadLetter]: ...

    async def attempt_counts(
        self, subscription_id: str, delivery_ids: list[str]
    ) -> dict[str, int]: ...

    async def health(self, subscription_ids: list[str]) -> dict[str, dict[str, Any]]: ...


async def get_delivery(
    source: LedgerSource, delivery_id: str, visible: Any = lambda _tenant: True
) -> dict[str, Any]:
    """A delivery with every attempt; `NotFoundError` when it is unknown or not ``visible``."""
    found = await source.delivery(delivery_id)
    if found is None or not visible(found["tenant_id"]):
        raise NotFoundError(f"delivery {delivery_id} not found in the ledger")
    return {"summary": found["summary"], "attempts": found["attempts"]}


async def letters_to_replay(
    source: LedgerSource,
    subscription_id: str,
    reason: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[DeadLetter]:
    """R3: the selected dead letters of one subscription, one per delivery (its newest), oldest
    first, each with its delivery's lifetime attempt count from the ledger, so a replay is sent
    once per delivery and its attempt number only rises (D7)."""
    newest: dict[str, DeadLetter] = {}
    cursor: str | None = None
    while True:
        page = await source.dead_letters(
            subscription_id=subscription_id, tenant_id=None, reason=reason, since_ms=since_ms,
            until_ms=until_ms, cursor=cursor, limit=500, raw=True,
        )  # fmt: skip
        for item in page["items"]:
            try:
                letter = codec.decode(DeadLetter, base64.b64decode(item["record"]))
            except (DecodeError, ValueError):
                continue
            if letter.delivery is not None:
                newest.setdefault(letter.delivery.delivery_id, letter)  # pages are newest first
        cursor = page["next_cursor"]
        if cursor is None:
            break
    counts = await source.attempt_counts(subscription_id, list(newest))
    chosen = [
        replace(letter, attempts=max(letter.attempts, counts.get(delivery_id, 0)))
        for delivery_id, letter in newest.items()
    ]
    return sorted(chosen, key=lambda d: d.dead_at)
