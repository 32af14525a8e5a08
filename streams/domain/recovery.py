"""Re-enable, backfill and replay rules (R1-R3), pure: no Kafka, no clock of its own.

- Which subscriptions may be re-enabled or replayed to, and the error a caller sees otherwise.
- The backfill window: ``[max(suspended_at, reenabled_at - retention), reenabled_at)``; replay
  ranges are clipped to the same retention window.
- Which archived events and dead letters a job selects: the subscription's tenant and filters;
  dead letters by subscription, reason prefix and time.
- `Job` (what a backfill or replay asks for, carried on `control`) and `Progress` (how far it
  got, stored with the runner's committed position so a crash resumes where it stopped).
- The re-enable claim: two concurrent re-enables of one subscription both append a claim to the
  subscription's `control` partition; the first claim on a subscription version wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from msgspec import structs

from streams.domain.filters import matches
from streams.domain.models import (
    DeadLetter,
    Delivery,
    Event,
    Lane,
    Subscription,
    SubscriptionStatus,
)
from streams.errors import ConflictError, ValidationError

# --- status reasons and control-event kinds ---------------------------------------------------

#: status_reason of a subscription whose re-enable probe failed (still suspended, R1).
PROBE_FAILED_REASON = "reenable_probe_failed"
#: status_reason of a subscription that came back through a successful probe (R1).
REENABLED_REASON = "reenabled"
#: The event type of the re-enable probe delivery (R1).
PROBE_EVENT_TYPE = "endpoint.probe"
#: Dead-letter reason of deliveries parked while their subscription was suspended (H4).
PARKED_SUSPENDED = "suspended"


class ControlKind(StrEnum):
    """Kinds of `ControlEvent` that re-enable, backfill and replay write on `control`."""

    REENABLE_REQUESTED = "reenable_requested"  # a claim: first per subscription version wins
    PROBE_FAILED = "reenable_probe_failed"  # audit: the probe failed, still suspended
    REENABLED = "reenabled"  # the probe passed: health is reset, the backfill starts
    JOB_REQUESTED = "replay_requested"  # a backfill or replay job for the runner
    JOB_FINISHED = "replay_finished"  # audit: a job ended (done / total in the payload)


#: How long a re-enable claim blocks another one on the same subscription version: longer than
#: the slowest probe (a 30 s timeout) plus the writes around it. A claimant that crashed stops
#: blocking after this.
CLAIM_LEASE_MS = 120_000
#: How far before a version's own time a claim on it may carry a timestamp (clock skew between
#: the hosts that write subscriptions and claims).
CLAIM_SKEW_MS = 300_000


# --- who may be re-enabled, replayed to --------------------------------------------------------


def check_reenable(sub: Subscription) -> None:
    """R1: only a suspended subscription is re-enabled; ConflictError names the status."""
    if sub.status is SubscriptionStatus.SUSPENDED:
        return
    if sub.status is SubscriptionStatus.DISABLED:
        raise ConflictError(
            f"subscription {sub.id} is disabled (reason {sub.status_reason}); "
            "a disabled subscription comes back with enable, not reenable"
        )
    raise ConflictError(f"subscription {sub.id} is already active")


def check_replayable(sub: Subscription) -> None:
    """R3: replays go to active subscriptions only; ConflictError names the status."""
    if sub.status is not SubscriptionStatus.ACTIVE:
        raise ConflictError(
            f"subscription {sub.id} is {sub.status.value} (reason {sub.status_reason}); "
            "replay is refused until it is active again"
        )


def check_duplicate(delivery_id: str, succeeded: bool, confirm_duplicate: bool) -> None:
    """R3: replaying a delivery that already succeeded needs ``confirm_duplicate``."""
    if succeeded and not confirm_duplicate:
        raise ConflictError(
            f"delivery {delivery_id} already succeeded; replay it again only with "
            "confirm_duplicate (the receiver sees the same webhook-id twice)"
        )


# --- windows --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time range ``[start_ms, end_ms)``; ``clipped`` when retention cut it."""

    start_ms: int
    end_ms: int
    clipped: bool = False

    @property
    def empty(self) -> bool:
        return self.end_ms <= self.start_ms

    def holds(self, at_ms: int) -> bool:
        return self.start_ms <= at_ms < self.end_ms


def retention_start(now_ms: int, retention_s: float) -> int:
    """The oldest moment still inside the archive's retention window."""
    return now_ms - round(retention_s * 1000)


def backfill_window(
    suspended_at: int | None, reenabled_at: int, retention_s: float, settle_ms: int = 0
) -> Window:
    """R2: from suspended_at (or the oldest retained moment) up to ``settle_ms`` past the
    re-enable. Until every worker's registry has the active version, a router may still skip
    the subscription and a dispatcher may still park its retries: the settle time covers them.
    What the live path delivered in it is not sent again (`overlaps_live`)."""
    oldest = retention_start(reenabled_at, retention_s)
    start = oldest if suspended_at is None else max(suspended_at, oldest)
    clipped = suspended_at is None or suspended_at < oldest
    return Window(start, reenabled_at + max(0, settle_ms), clipped=clipped)


def replay_window(since_ms: int, until_ms: int, now_ms: int, retention_s: float) -> Window:
    """R3: a requested replay range, clipped to retention and to now; 422 when it is inverted."""
    if until_ms <= since_ms:
        raise ValidationError({"until": "must be later than since"})
    oldest = retention_start(now_ms, retention_s)
    start, end = max(since_ms, oldest), min(until_ms, now_ms)
    return Window(start, max(start, end), clipped=start != since_ms or end != until_ms)


# --- selection --------------------------------------------------------------------------------


def selects(sub: Subscription, event: Event) -> bool:
    """Whether ``event`` belongs in ``sub``'s backfill or replay: its tenant, its filters."""
    return event.tenant_id == sub.tenant_id and matches(sub.filters, event.type)


def letter_selected(
    letter: DeadLetter,
    subscription_id: str,
    reason: str | None,
    window: Window | None,
) -> bool:
    """A dead letter of ``subscription_id`` with a delivery, a reason prefix, in ``window``."""
    if letter.delivery is None or letter.subscription_id != subscription_id:
        return False
    if reason is not None and not letter.reason.startswith(reason):
        return False
    return window is None or window.holds(letter.dead_at)


def redelivery(
    delivery_id: str, sub: Subscription, event: Event, lane: Lane, attempt: int, now_ms: int
) -> Delivery:
    """The record a backfill or replay writes: the live delivery's key (D2), on ``lane``."""
    return Delivery(
        delivery_id=delivery_id,
        subscription_id=sub.id,
        tenant_id=sub.tenant_id,
        event=event,
        attempt=max(1, attempt),
        lane=lane,
        routed_at=now_ms,
    )


def from_letter(letter: DeadLetter, lane: Lane, now_ms: int) -> Delivery:
    """A dead letter's delivery sent again: same key and lifetime attempt count (D2, D7), and
    a fresh retry window (its first attempt of this replay starts it again)."""
    assert letter.delivery is not None
    return structs.replace(
        letter.delivery,
        attempt=max(letter.delivery.attempt, letter.attempts + 1),
        lane=lane,
        routed_at=now_ms,
        first_attempt_at=None,
        due_at=0,
    )


# --- jobs and progress ------------------------------------------------------------------------


class JobKind(StrEnum):
    BACKFILL = "backfill"  # after a re-enable: archive window + parked dead letters
    REPLAY = "replay"  # an operator's archive time range
    DLQ = "dlq"  # an operator's dead-letter selection


@dataclass(frozen=True, slots=True)
class Job:
    """One backfill or replay of one subscription, as carried on `control`."""

    job_id: str
    kind: JobKind
    subscription_id: str
    requested_at: int
    rate: float
    since_ms: int | None = None  # archive window (backfill, replay)
    until_ms: int | None = None
    dlq_reason: str | None = None  # dead-letter selection (backfill: parked ones; dlq)
    dlq_since_ms: int | None = None
    dlq_until_ms: int | None = None
    min_version: int = 0  # the subscription version the job needs to see before it writes

    @property
    def lane(self) -> Lane:
        return Lane.BACKFILL if self.kind is JobKind.BACKFILL else Lane.REPLAY

    @property
    def archive_window(self) -> Window | None:
        if self.since_ms is None or self.until_ms is None:
            return None
        return Window(self.since_ms, self.until_ms)

    @property
    def dlq_window(self) -> Window | None:
        if self.dlq_reason is None and self.kind is not JobKind.DLQ:
            return None
        return Window(self.dlq_since_ms or 0, self.dlq_until_ms or 2**62)

    @property
    def reads_dlq(self) -> bool:
        return self.dlq_window is not None

    @property
    def writes_after_ms(self) -> int:
        """A backfill's windows reach past its re-enable (`backfill_window`): it plans and
        writes only once they have ended (R2). Replays cover the past only: 0."""
        if self.kind is not JobKind.BACKFILL:
            return 0
        return max(self.until_ms or 0, self.dlq_until_ms or 0)

    def overlaps_live(self, archived_at_ms: int, attempts: int) -> bool:
        """R2: an event archived once the subscription was active again that the live path
        already attempted. A backfill leaves it to the live path (its retries, its dead letter)
        instead of starting a second chain of attempts with the same webhook-id."""
        live = archived_at_ms >= self.requested_at
        return self.kind is JobKind.BACKFILL and live and attempts > 0

    def to_json(self) -> str:
        values = {f: getattr(self, f) for f in self.__dataclass_fields__}
        return orjson.dumps(values).decode()

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = orjson.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a job is a JSON object")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["kind"] = JobKind(known["kind"])
        return cls(**known)


class JobState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"  # the subscription was deleted


@dataclass(slots=True)
class Progress:
    """How far a job got: dead letters written, then archive positions per partition.

    ``ends`` are fixed when the job starts (the archive offset of the window's end per
    partition), so a resumed job reads exactly the range the first run meant to.
    """

    job_id: str
    subscription_id: str
    total: int = 0
    done: int = 0
    dlq_written: int = 0
    dlq_finished: bool = False
    positions: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    state: JobState = JobState.RUNNING
    started: bool = False  # totals and ends are fixed

    @property
    def archive_finished(self) -> bool:
        return all(self.positions.get(p, end) >= end for p, end in self.ends.items())

    def view(self) -> dict[str, Any]:
        """What the API and CLI show."""
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "done": self.done,
            "total": max(self.total, self.done),
        }

    def to_json(self) -> str:
        data = {
            "j": self.job_id,
            "s": self.subscription_id,
            "t": self.total,
            "d": self.done,
            "q": self.dlq_written,
            "qf": self.dlq_finished,
            "p": {str(k): v for k, v in self.positions.items()},
            "e": {str(k): v for k, v in self.ends.items()},
            "st": self.state.value,
            "ok": self.started,
        }
        return orjson.dumps(data).decode()

    @classmethod
    def from_json(cls, text: str) -> Progress:
        data = orjson.loads(text)
        return cls(
            job_id=str(data["j"]),
            subscription_id=str(data["s"]),
            total=int(data["t"]),
            done=int(data["d"]),
            dlq_written=int(data["q"]),
            dlq_finished=bool(data["qf"]),
            positions=_int_map(data["p"]),
            ends=_int_map(data["e"]),
            state=JobState(data["st"]),
            started=bool(data["ok"]),
        )


def _int_map(raw: Mapping[str, Any]) -> dict[int, int]:
    return {int(k): int(v) for k, v in raw.items()}


def resume_point(stored: str | None, job: Job) -> Progress:
    """The progress to start ``job`` from: the stored one when it is this job's, else fresh."""
    if stored:
        try:
            progress = Progress.from_json(stored)
        except (ValueError, KeyError, TypeError):
            progress = None
        if progress is not None and progress.job_id == job.job_id:
            return progress
    return Progress(job_id=job.job_id, subscription_id=job.subscription_id)


# --- the re-enable claim ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """One re-enable request as it sits in the subscription's `control` partition."""

    request_id: str
    subscription_id: str
    base_version: int  # the suspended version's updated_at the claimant saw
    offset: int
    at: int  # the claim's timestamp, ms


def claim_wins(mine: Claim, seen: Iterable[Claim]) -> bool:
    """Whether ``mine`` is the first live claim on its subscription version.

    Claims on one subscription share one partition, so their offsets order them totally. An
    earlier claim on the same version blocks mine unless its lease ran out (its claimant
    crashed before finishing; a finished one changed the version, which frees the next).
    """
    for other in seen:
        if (
            other.offset < mine.offset
            and other.subscription_id == mine.subscription_id
            and other.base_version == mine.base_version
            and other.request_id != mine.request_id
            and mine.at - other.at < CLAIM_LEASE_MS
        ):
            return False
    return True


def breaker_reset_due(sub: Subscription, seen: dict[str, int]) -> bool:
    """For the dispatcher: True once per re-enabled version of ``sub`` (R1), when the breaker
    of its origin should start fresh. ``seen`` remembers the versions already handled."""
    if sub.status_reason != REENABLED_REASON or seen.get(sub.id) == sub.updated_at:
        return False
    seen[sub.id] = sub.updated_at
    return True
