"""The audit of a chaos run: every (event, matching subscription) pair must have ended (D1).

Inputs are joined by delivery id (`streams.domain.idempotency.delivery_id`, the ``webhook-id``
receivers see, D2):

- what was published: the runner's own list of acknowledged events, checked against the
  ``events`` and ``archive`` topics;
- what the router wrote to ``routed``;
- the attempt ledger (``attempts``, D7) and the dead letters (``dlq``, D8), where a reason of
  ``suspended`` or ``disabled`` means parked (H4);
- what the receivers saw: 2xx answers per ``webhook-id``.

A pair is **delivered** when a receiver answered it 2xx, **dead** when it has a dead letter,
**parked** when its dead letter says the subscription was suspended or disabled, and **lost**
otherwise. `AuditReport.passed` is false as soon as one pair is lost.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from streams.adapters import codec
from streams.adapters.ingest import decode_ingest_event
from streams.adapters.kafka_clients import header
from streams.adapters.topic_reader import scan
from streams.domain.filters import matches
from streams.domain.idempotency import delivery_id
from streams.domain.models import (
    Attempt,
    DeadLetter,
    Delivery,
    Event,
    FailureKind,
    OutcomeClass,
    Subscription,
)
from streams.errors import DecodeError
from streams.services.ledger import summarise
from streams.settings import Settings

PARKED_REASONS = frozenset({"suspended", "disabled"})
SAMPLE = 20  # how many lost ids the report names
T = TypeVar("T")


@dataclass(frozen=True)
class Recorded:
    """What Kafka holds after the run, reduced to what the audit joins on."""

    events_topic: frozenset[str]  # event ids on `events`
    archived: frozenset[str]  # event ids on `archive`
    routed: Counter[str]  # delivery id -> records on `routed`
    attempts: list[Attempt]
    dead_letters: list[DeadLetter]


@dataclass
class AuditReport:
    published_events: int
    expected_pairs: int
    events_on_topic: int
    archived_events: int
    routed_pairs: int
    routed_records: int
    missing_from_events: int
    missing_from_archive: int
    missing_from_routed: int
    delivered: int
    dead: int
    parked: int
    lost: int
    delivered_and_dead: int
    duplicates: int
    duplicate_rate: float
    final_states: dict[str, int]
    dead_reasons: dict[str, int]
    ledger_states: dict[str, int]
    attempts_recorded: int
    receiver_requests: int
    receiver_statuses: dict[str, int]
    unsigned_requests: int
    lost_sample: list[str] = field(default_factory=list)
    duplicate_causes: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.lost == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def expected_pairs(
    events: Iterable[Event], subscriptions: Iterable[Subscription]
) -> dict[str, tuple[str, str]]:
    """delivery id -> (event id, subscription id) for every pair the router must create."""
    by_tenant: dict[str, list[Subscription]] = {}
    for sub in subscriptions:
        by_tenant.setdefault(sub.tenant_id, []).append(sub)
    pairs: dict[str, tuple[str, str]] = {}
    for event in events:
        for sub in by_tenant.get(event.tenant_id, []):
            if matches(sub.filters, event.type):
                pairs[delivery_id(event.id, sub.id)] = (event.id, sub.id)
    return pairs


def read_recorded(settings: Settings, timeout_s: float = 300.0) -> Recorded:
    """Scan the run's topics to their current end."""
    now_ms = int(time.time() * 1000)
    on_events: set[str] = set()
    for msg in scan(settings, settings.topic("events"), timeout_s):
        try:
            value = msg.value() or b""
            event = decode_ingest_event(value, header(msg, "content-type"), now_ms)
        except DecodeError:
            continue
        on_events.add(event.id)
    archived = {e.id for e in _decoded(settings, "archive", Event, timeout_s)}
    routed = Counter(d.delivery_id for d in _decoded(settings, "routed", Delivery, timeout_s))
    return Recorded(
        events_topic=frozenset(on_events),
        archived=frozenset(archived),
        routed=routed,
        attempts=_decoded(settings, "attempts", Attempt, timeout_s),
        dead_letters=_decoded(settings, "dlq", DeadLetter, timeout_s),
    )


def _decoded(settings: Settings, name: str, cls: type[T], timeout_s: float) -> list[T]:
    out: list[T] = []
    for msg in scan(settings, settings.topic(name), timeout_s):
        try:
            out.append(codec.decode(cls, msg.value() or b""))
        except DecodeError:
            continue
    return out


def _final_state(did: str, ok: Mapping[str, int], dead: Mapping[str, str]) -> str:
    if ok.get(did, 0) > 0:
        return "delivered"
    reason = dead.get(did)
    if reason is None:
        return "lost"
    return "parked" if reason in PARKED_REASONS else "dead"


def duplicate_cause(answered_2xx: int, history: list[Attempt]) -> str:
    """Why a receiver answered one delivery 2xx ``answered_2xx`` (> 1) times, from its ledger.

    - ``sent_after_a_recorded_success``: the ledger holds two successes or more, so a worker
      sent it although a success was on record (the dedup window missed it, or the two
      attempts overlapped);
    - ``answered_after_its_timeout``: a receiver's 2xx that the worker had given up on, which
      the ledger holds as a timeout and retried;
    - ``success_not_recorded``: a 2xx the ledger never heard of: the attempt was in flight, or
      its record in the producer's queue, when its worker died.
    """
    successes = sum(1 for a in history if a.outcome is OutcomeClass.SUCCESS)
    if successes >= 2:
        return "sent_after_a_recorded_success"
    if successes < answered_2xx and any(a.reason == FailureKind.TIMEOUT for a in history):
        return "answered_after_its_timeout"
    return "success_not_recorded"


def audit(
    pairs: Mapping[str, tuple[str, str]],
    published: Iterable[str],
    recorded: Recorded,
    ok: Mapping[str, int],
    statuses: Mapping[int, int],
    unsigned: int = 0,
) -> AuditReport:
    """Join everything by delivery id; see the module docstring for the states."""
    published_ids = set(published)
    dead: dict[str, str] = {}
    for letter in recorded.dead_letters:
        if letter.delivery is not None:
            dead.setdefault(letter.delivery.delivery_id, letter.reason)
    by_delivery: dict[str, list[Attempt]] = {}
    for att in recorded.attempts:
        if att.delivery_id in pairs:
            by_delivery.setdefault(att.delivery_id, []).append(att)
    ledger = Counter(summarise(history).state.value for history in by_delivery.values())
    ledger["never_attempted"] = len(pairs) - len(by_delivery)
    states = Counter(_final_state(did, ok, dead) for did in pairs)
    lost = sorted(did for did in pairs if _final_state(did, ok, dead) == "lost")
    duplicates = sum(max(0, ok.get(did, 0) - 1) for did in pairs)
    causes = Counter(
        duplicate_cause(ok[did], by_delivery.get(did, [])) for did in pairs if ok.get(did, 0) > 1
    )
    reasons = Counter(reason for did, reason in dead.items() if did in pairs)
    return AuditReport(
        published_events=len(published_ids),
        expected_pairs=len(pairs),
        events_on_topic=len(recorded.events_topic & published_ids),
        archived_events=len(recorded.archived & published_ids),
        routed_pairs=sum(1 for did in pairs if recorded.routed.get(did, 0) > 0),
        routed_records=sum(recorded.routed.get(did, 0) for did in pairs),
        missing_from_events=len(published_ids - recorded.events_topic),
        missing_from_archive=len(published_ids - recorded.archived),
        missing_from_routed=sum(1 for did in pairs if recorded.routed.get(did, 0) == 0),
        delivered=states["delivered"],
        dead=states["dead"],
        parked=states["parked"],
        lost=states["lost"],
        delivered_and_dead=sum(1 for did in pairs if ok.get(did, 0) > 0 and did in dead),
        duplicates=duplicates,
        duplicate_rate=duplicates / len(pairs) if pairs else 0.0,
        final_states=dict(states),
        dead_reasons=dict(reasons),
        ledger_states=dict(ledger),
        attempts_recorded=sum(len(h) for h in by_delivery.values()),
        receiver_requests=sum(statuses.values()),
        receiver_statuses={str(code): n for code, n in sorted(statuses.items())},
        unsigned_requests=unsigned,
        lost_sample=lost[:SAMPLE],
        duplicate_causes=dict(causes),
    )
