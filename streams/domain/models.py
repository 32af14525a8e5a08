"""The records that flow through hookstream's topics, as plain frozen records.

Each has an Avro schema of the same name in ``schemas/`` (see ``streams.adapters.codec``).
Times are integer milliseconds since the Unix epoch unless a name says otherwise. Event data is
kept as the producer's JSON text (``data_json``) so the hot path never re-parses it.

The four records built for every delivery (`Event`, `Delivery`, `Attempt`, `HealthOutcome`)
are frozen `msgspec.Struct`s, the rest frozen dataclasses. A frozen dataclass's ``__init__``
sets each field through ``object.__setattr__``: an `Attempt` (18 fields, by keyword, as
`streams.domain.settle` builds it) took 4.4 µs to build against 0.76 µs as a Struct and 0.93
as a mutable dataclass (`timeit`, 2026-12-07), and the worker builds about six of these per
delivery. The Structs are also left out of the garbage collector (``gc=False``: they hold only
strings, numbers, enums and each other, so they can form no cycle), so the collector has fewer
objects to walk. Change one with `msgspec.structs.replace`, read its fields with
``__struct_fields__`` (`streams.plain.plain` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import msgspec


class OutcomeClass(StrEnum):
    """How an attempt ended (D5)."""

    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    FATAL = "fatal"


class FailureKind(StrEnum):
    """Why an attempt failed below HTTP; the transport reports it, `classify` judges it (D5)."""

    TIMEOUT = "timeout"
    CONNECT_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    DNS_TEMPORARY = "dns_temporary"
    DNS_NXDOMAIN = "dns_nxdomain"
    TLS_INVALID = "tls_invalid"  # the certificate: untrusted, expired, another host's
    TLS_ERROR = "tls_error"  # any other TLS failure: an alert, no TLS spoken, a broken record
    BLOCKED_DESTINATION = "blocked_destination"
    PROTOCOL_ERROR = "protocol_error"  # a garbage status line or a broken HTTP exchange


class DeliveryState(StrEnum):
    """Ledger state of a delivery (D7)."""

    PENDING = "pending"
    DELIVERING = "delivering"
    SUCCESS = "success"
    ERROR = "error"  # failed, a retry is scheduled (next_retry_at)
    EXHAUSTED = "exhausted"  # retryable failures used up the attempts or the window
    DEAD = "dead"  # a permanent or fatal failure


class SubscriptionStatus(StrEnum):
    ACTIVE = "active"
    SUSPENDED = "suspended"
    DISABLED = "disabled"


class Lane(StrEnum):
    """Where a delivery attempt comes from. Every lane uses the same delivery function."""

    LIVE = "live"
    RETRY = "retry"
    BACKFILL = "backfill"
    REPLAY = "replay"
    PROBE = "probe"
    TEST = "test"


class Event(msgspec.Struct, frozen=True, gc=False):
    """An accepted event, as archived (normalised)."""

    id: str
    tenant_id: str
    type: str
    timestamp: int  # event time, ms
    data_json: str  # the event's `data`, as JSON text
    published_at: int  # when the producer published it (or ingest time), ms


@dataclass(frozen=True, slots=True)
class Secret:
    """A signing secret ``whsec_<base64>``; ``not_after`` ends its rotation grace period."""

    value: str
    not_after: int | None = None


@dataclass(frozen=True, slots=True)
class Subscription:
    id: str
    tenant_id: str
    name: str
    url: str
    filters: tuple[str, ...]
    secrets: tuple[Secret, ...]
    status: SubscriptionStatus = SubscriptionStatus.ACTIVE
    status_reason: str | None = None
    owner_emails: tuple[str, ...] = ()
    notify_url: str | None = None
    rate_limit: float | None = None  # deliveries per second
    max_in_flight: int | None = None
    timeout_s: float = 10.0
    headers: tuple[tuple[str, str], ...] = ()
    created_at: int = 0
    updated_at: int = 0
    suspended_at: int | None = None


class Delivery(msgspec.Struct, frozen=True, gc=False):
    """One (event, subscription) pair on its way: the value on routed, backfill and retry.*."""

    delivery_id: str  # the idempotency key (D2)
    subscription_id: str
    tenant_id: str
    event: Event
    attempt: int = 1  # the number of the attempt this record asks for, from 1
    lane: Lane = Lane.LIVE
    routed_at: int = 0
    first_attempt_at: int | None = None
    due_at: int = 0  # not before this time, ms (retry tiers)


class Attempt(msgspec.Struct, frozen=True, gc=False):
    """One HTTP attempt, in the attempt ledger (D7)."""

    delivery_id: str
    subscription_id: str
    tenant_id: str
    event_id: str
    event_type: str
    attempt: int
    lane: Lane
    started_at: int
    duration_ms: float
    outcome: OutcomeClass
    reason: str
    state: DeliveryState
    http_status: int | None = None
    error: str | None = None
    response_excerpt: str | None = None
    next_retry_at: int | None = None
    published_at: int = 0
    first_attempt_at: int | None = None


@dataclass(frozen=True, slots=True)
class AnalyticsDigest:
    """What one dispatcher settled in one partition between two commits, for the analytics
    agent (O2): one record per partition and commit, with each subscription's attempts folded
    ahead (`streams.domain.analytics.Tally`)."""

    sealed_at: int  # ms
    subscription_ids: tuple[str, ...] = ()
    tallies: tuple[bytes, ...] = ()  # the JSON form of each subscription's Tally, in that order


@dataclass(frozen=True, slots=True)
class AttemptDigest:
    """The digest record of releases before `AnalyticsDigest`: one partition's attempts between
    two commits, each as the ledger holds it. Read (never written) so that digests left on the
    topic by an older worker still count after an upgrade."""

    sealed_at: int  # ms
    attempts: tuple[bytes, ...] = ()  # each exactly as written to the attempts topic


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A terminal or exhausted delivery with its context (D8), or an invalid input record."""

    reason: str
    dead_at: int
    tenant_id: str | None = None
    subscription_id: str | None = None
    delivery: Delivery | None = None
    raw: bytes | None = None  # the undecodable input, for invalid events
    attempts: int = 0
    last_status: int | None = None
    last_error: str | None = None
    response_excerpt: str | None = None
    first_attempt_at: int | None = None


class HealthOutcome(msgspec.Struct, frozen=True, gc=False):
    """The terminal outcome of one delivery, counted once (D10)."""

    subscription_id: str
    delivery_id: str
    outcome: OutcomeClass
    reason: str
    at: int
    origin: str
    attempts: int
    http_status: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ControlEvent:
    """A state transition or command for one subscription, or a config change."""

    subscription_id: str
    kind: str
    at: int
    reason: str | None = None
    payload_json: str = "{}"


@dataclass(frozen=True, slots=True)
class Notification:
    """An outbox entry: one email and/or notification webhook. ``notification_id`` dedupes."""

    notification_id: str
    subscription_id: str
    kind: str
    at: int
    payload_json: str = "{}"
    recipients: tuple[str, ...] = field(default_factory=tuple)
