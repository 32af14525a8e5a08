"""Audits: the `attempts` and `dlq` topics read whole, from the beginning.

Not a read path of the admin API or the CLI's lookups (those read the worker state, S6): these
scans serve checks that must see what Kafka holds, independently of any worker's state (the
demo's progress check, `hookstream stats --ledger`, the tests' assertions). Their cost grows
with retention: about 11-15 µs per retained record.
"""

from __future__ import annotations

from streams.adapters import codec
from streams.adapters.topic_reader import scan
from streams.domain.models import Attempt, DeadLetter
from streams.errors import DecodeError
from streams.settings import Settings


def all_attempts(settings: Settings) -> list[Attempt]:
    out = []
    for msg in scan(settings, settings.topic("attempts")):
        try:
            out.append(codec.decode(Attempt, msg.value() or b""))
        except DecodeError:
            continue
    return out


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
