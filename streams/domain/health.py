"""A subscription's health record and how each delivery outcome moves it (SPEC H1-H3, H6, D10).

The health agent feeds `apply_outcome` one `HealthOutcome` per delivery: the *terminal* outcome,
after the delivery's retries have ended (D10). A delivery that took five attempts therefore moves
the record exactly once, and a retryable attempt that later succeeded never reaches it. The
function is pure: the record and the policy come in, and a `HealthStep` comes out with the new
record and, at most once per failure episode each, a suspension and an early warning to emit.

**Episodes.** A failure episode is the run of failures since the last success (or since the last
`reset`, on re-enable). The first failure of an episode bumps ``episode`` and sets
``first_failure_at``; a success ends it, clears the counters and records ``last_success_at``.
``warned_episode`` and ``suspended_episode`` remember the episode for which the early warning and
the suspension were already decided, so neither is decided twice, however many workers or
redelivered messages there are (H3, H6).

**How the classes mix.** Within an episode the record keeps one exact count per class. Each
class's threshold counts the failures *of that class or a more severe one*, in the order
retryable < permanent < fatal: a vanished host (fatal) is worse than a 404 (permanent), which is
worse than a 503 (retryable). So the retryable threshold counts every failure of the episode, the
permanent threshold counts permanent and fatal failures, and the fatal threshold counts only
fatal ones. A milder failure never restarts a severe count; only a success does. A 410 Gone is a
permanent outcome (reason ``http_410``) and counts like any other permanent failure (D5).

**Suspension** is decided when, for some class, its count reaches the threshold's count *and*
the episode is at least the threshold's minimum age old (H2), checking fatal, then permanent, then
retryable, and naming the first class that qualifies: ``auto_suspend:<class>:<count>``. Because
the policy is an argument, a new policy applies from the very next outcome.

**Early warning** is decided once per episode, when ``consecutive_failures`` reaches
``early_warning_at`` (or is already past it because the policy was lowered). It is not reported
for an episode that is suspended, or on the outcome that suspends it: the suspension notice
says more.

**Times.** Record times are the outcome's own time (``outcome.at``, when the delivery ended), so
replaying the health topic rebuilds the same record whatever the consumer lag. ``now_ms`` (the
health worker's clock) caps it: an outcome stamped in the future by a worker with a fast clock
is taken as happening now.

**Redelivery and order.** A redelivered outcome must not count twice. The record keeps the keys
(delivery id and class) of the last `DEDUP_WINDOW` outcomes it applied and ignores a repeat, so a
batch replayed after a crash is harmless. A new class for the same delivery (a replay that now
succeeds) is applied. Outcomes that arrive late are *stale* and ignored: a failure that ended
before the last success or reset (the endpoint has recovered since), and a success that ended
before the current episode's first failure (the endpoint has failed since).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from streams.domain.models import HealthOutcome, OutcomeClass
from streams.domain.policy import SuspensionPolicy
from streams.errors import ValidationError

__all__ = [
    "DEDUP_WINDOW",
    "MAX_ERROR_CHARS",
    "SUSPENSION_ORDER",
    "HealthRecord",
    "HealthStep",
    "SuspendDecision",
    "WarningDecision",
    "apply_outcome",
    "reset",
]

#: How many recently applied outcomes a record remembers to drop redeliveries.
DEDUP_WINDOW = 16
#: ``last_error`` is cut to this many characters (H1).
MAX_ERROR_CHARS = 500
#: The order in which classes are checked for suspension: the most severe first.
SUSPENSION_ORDER: tuple[OutcomeClass, ...] = (
    OutcomeClass.FATAL,
    OutcomeClass.PERMANENT,
    OutcomeClass.RETRYABLE,
)
_SEVERITY = {OutcomeClass.RETRYABLE: 1, OutcomeClass.PERMANENT: 2, OutcomeClass.FATAL: 3}


@dataclass(frozen=True, slots=True)
class HealthRecord:
    """One subscription's health (H1), kept in a changelog-backed table as `to_dict`'s JSON."""

    subscription_id: str
    consecutive_failures: int = 0  # failures of every class in the current episode
    retryable_failures: int = 0  # exact per-class counts in the current episode
    permanent_failures: int = 0
    fatal_failures: int = 0
    first_failure_at: int | None = None  # ms; the start of the current episode
    last_success_at: int | None = None
    last_outcome: OutcomeClass | None = None
    last_status: int | None = None
    last_error: str | None = None  # at most MAX_ERROR_CHARS
    last_reason: str | None = None
    last_attempt_at: int | None = None
    episode: int = 0  # bumped by the first failure of each episode
    warned_episode: int | None = None
    suspended_episode: int | None = None
    counted_since: int | None = None  # failures that ended before this are stale
    recent: tuple[str, ...] = ()  # dedup keys of the last DEDUP_WINDOW applied outcomes

    @property
    def failing(self) -> bool:
        """Whether a failure episode is open."""
        return self.consecutive_failures > 0

    @property
    def last_delivery_id(self) -> str | None:
        return self.recent[-1].split(":", 1)[1] if self.recent else None

    def counted_toward(self, outcome: OutcomeClass) -> int:
        """Failures of the episode that count toward ``outcome``'s threshold: it or worse."""
        floor = _SEVERITY[outcome]
        return sum(
            count
            for cls, count in (
                (OutcomeClass.RETRYABLE, self.retryable_failures),
                (OutcomeClass.PERMANENT, self.permanent_failures),
                (OutcomeClass.FATAL, self.fatal_failures),
            )
            if _SEVERITY[cls] >= floor
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form stored in the health table."""
        data = {name: getattr(self, name) for name in _FIELDS}
        data["last_outcome"] = None if self.last_outcome is None else self.last_outcome.value
        data["recent"] = list(self.recent)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HealthRecord:
        """Read `to_dict`'s form back; raises `ValidationError` naming every bad field."""
        errors: dict[str, str] = {}
        values = {name: _read_field(data, name, kind, errors) for name, kind in _FIELDS.items()}
        if errors:
            raise ValidationError(errors)
        outcome = values["last_outcome"]
        values["last_outcome"] = None if outcome is None else OutcomeClass(outcome)
        values["recent"] = tuple(values["recent"])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class SuspendDecision:
    """Suspend the subscription (H3); the control agent applies it if it is still active."""

    subscription_id: str
    outcome_class: OutcomeClass
    count: int
    episode: int
    first_failure_at: int
    at: int

    @property
    def status_reason(self) -> str:
        return f"auto_suspend:{self.outcome_class.value}:{self.count}"

    @property
    def key(self) -> str:
        """Stable across workers and redelivery: dedupes the control event and the notice."""
        return f"{self.subscription_id}:suspend:{self.episode}"


@dataclass(frozen=True, slots=True)
class WarningDecision:
    """Tell the endpoint's owner it is failing, once per episode (H6)."""

    subscription_id: str
    consecutive_failures: int
    episode: int
    first_failure_at: int
    at: int

    @property
    def key(self) -> str:
        return f"{self.subscription_id}:warn:{self.episode}"


@dataclass(frozen=True, slots=True)
class HealthStep:
    """The result of one outcome. ``ignored`` is ``duplicate`` or ``stale`` when it did nothing."""

    record: HealthRecord
    suspend: SuspendDecision | None = None
    warn: WarningDecision | None = None
    ignored: str | None = None


def apply_outcome(
    record: HealthRecord | None,
    outcome: HealthOutcome,
    policy: SuspensionPolicy,
    now_ms: int,
) -> HealthStep:
    """Move ``record`` by one delivery's terminal ``outcome`` under ``policy`` (see the module)."""
    current = HealthRecord(outcome.subscription_id) if record is None else record
    if current.subscription_id != outcome.subscription_id:
        raise ValueError("the outcome belongs to another subscription")
    when = min(outcome.at, now_ms)
    key = f"{outcome.outcome.value}:{outcome.delivery_id}"
    if key in current.recent:
        return HealthStep(current, ignored="duplicate")
    if _is_stale(current, outcome.outcome, when):
        return HealthStep(current, ignored="stale")
    if outcome.outcome is OutcomeClass.SUCCESS:
        return HealthStep(_succeed(current, outcome, when, key))
    failed = _fail(current, outcome, when, key)
    suspend = _suspension(failed, policy, when)
    if suspend is not None:
        return HealthStep(replace(failed, suspended_episode=failed.episode), suspend=suspend)
    warn = _warning(failed, policy, when)
    if warn is not None:
        return HealthStep(replace(failed, warned_episode=failed.episode), warn=warn)
    return HealthStep(failed)


def reset(record: HealthRecord, now_ms: int | None = None) -> HealthRecord:
    """The record after a re-enable (R1): counters cleared, the episode closed.

    With ``now_ms``, failures that ended before it (deliveries still in flight while the
    subscription was suspended) are stale and do not open a new episode.
    """
    since = record.counted_since
    if now_ms is not None:
        since = now_ms if since is None else max(since, now_ms)
    return replace(
        record,
        consecutive_failures=0,
        retryable_failures=0,
        permanent_failures=0,
        fatal_failures=0,
        first_failure_at=None,
        counted_since=since,
        recent=(),
    )


def _is_stale(record: HealthRecord, outcome: OutcomeClass, when: int) -> bool:
    if outcome is OutcomeClass.SUCCESS:
        return record.first_failure_at is not None and when < record.first_failure_at
    return record.counted_since is not None and when < record.counted_since


def _remember(record: HealthRecord, key: str) -> tuple[str, ...]:
    return (*record.recent, key)[-DEDUP_WINDOW:]


def _last_fields(
    outcome: HealthOutcome, when: int, key: str, record: HealthRecord
) -> dict[str, Any]:
    failed = outcome.outcome is not OutcomeClass.SUCCESS  # a success clears the last error
    error = outcome.error[:MAX_ERROR_CHARS] if failed and outcome.error is not None else None
    return {
        "last_outcome": outcome.outcome,
        "last_status": outcome.http_status,
        "last_error": error,
        "last_reason": outcome.reason,
        "last_attempt_at": when,
        "recent": _remember(record, key),
    }


def _succeed(record: HealthRecord, outcome: HealthOutcome, when: int, key: str) -> HealthRecord:
    cleared = reset(record)
    since = when if record.counted_since is None else max(record.counted_since, when)
    return replace(
        cleared,
        last_success_at=when,
        counted_since=since,
        **_last_fields(outcome, when, key, record),
    )


def _fail(record: HealthRecord, outcome: HealthOutcome, when: int, key: str) -> HealthRecord:
    cls = outcome.outcome
    if record.failing and record.first_failure_at is not None:
        episode, first = record.episode, min(record.first_failure_at, when)
    else:
        episode, first = record.episode + 1, when
    return replace(
        record,
        consecutive_failures=record.consecutive_failures + 1,
        retryable_failures=record.retryable_failures + (cls is OutcomeClass.RETRYABLE),
        permanent_failures=record.permanent_failures + (cls is OutcomeClass.PERMANENT),
        fatal_failures=record.fatal_failures + (cls is OutcomeClass.FATAL),
        first_failure_at=first,
        episode=episode,
        **_last_fields(outcome, when, key, record),
    )


def _suspension(
    record: HealthRecord, policy: SuspensionPolicy, when: int
) -> SuspendDecision | None:
    first = record.first_failure_at
    if first is None or record.suspended_episode == record.episode:
        return None
    age_ms = max(0, when - first)
    for cls in SUSPENSION_ORDER:
        threshold = policy.threshold(cls)
        count = record.counted_toward(cls)
        if count >= threshold.count and age_ms >= threshold.min_age_ms:
            return SuspendDecision(record.subscription_id, cls, count, record.episode, first, when)
    return None


def _warning(record: HealthRecord, policy: SuspensionPolicy, when: int) -> WarningDecision | None:
    first = record.first_failure_at
    if first is None or record.episode in (record.warned_episode, record.suspended_episode):
        return None
    if record.consecutive_failures < policy.early_warning_at:
        return None
    return WarningDecision(
        record.subscription_id, record.consecutive_failures, record.episode, first, when
    )


# --- JSON form -------------------------------------------------------------------------------

_FIELDS: dict[str, str] = {
    "subscription_id": "str",
    "consecutive_failures": "count",
    "retryable_failures": "count",
    "permanent_failures": "count",
    "fatal_failures": "count",
    "first_failure_at": "opt_int",
    "last_success_at": "opt_int",
    "last_outcome": "outcome",
    "last_status": "opt_int",
    "last_error": "text",
    "last_reason": "text",
    "last_attempt_at": "opt_int",
    "episode": "count",
    "warned_episode": "opt_int",
    "suspended_episode": "opt_int",
    "counted_since": "opt_int",
    "recent": "keys",
}
_OUTCOMES = frozenset(cls.value for cls in OutcomeClass)
_OPTIONAL = {"subscription_id": False, "count": False, "keys": False}
_DEFAULTS: dict[str, Any] = {"count": 0, "keys": []}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problem(value: Any, kind: str) -> str | None:
    if value is None:
        return None if _OPTIONAL.get(kind, True) else "is required"
    checks: dict[str, tuple[bool, str]] = {
        "str": (isinstance(value, str) and value != "", "must be a non-empty string"),
        "count": (_is_int(value) and value >= 0, "must be a whole number >= 0"),
        "opt_int": (_is_int(value), "must be a whole number or null"),
        "text": (isinstance(value, str), "must be a string or null"),
        "outcome": (
            isinstance(value, str) and value in _OUTCOMES,
            f"must be one of {sorted(_OUTCOMES)} or null",
        ),
        "keys": (
            isinstance(value, list) and all(isinstance(k, str) and ":" in k for k in value),
            "must be a list of outcome:delivery_id keys",
        ),
    }
    ok, message = checks[kind]
    return None if ok else message


def _read_field(data: dict[str, Any], name: str, kind: str, errors: dict[str, str]) -> Any:
    value = data.get(name, _DEFAULTS.get(kind))
    problem = _problem(value, kind)
    if problem is not None:
        errors[name] = problem
    return value
