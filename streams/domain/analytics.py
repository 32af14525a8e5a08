"""Delivery analytics per subscription and per tenant (SPEC O2), pure.

Every attempt on the ledger (`Attempt`) is folded into the **hourly tumbling window** of its
``started_at`` (UTC hours), per subscription. Windows are kept for `RETENTION_MS` (7 days); a
query picks the windows of its span and merges them, and a tenant's view merges its
subscriptions' windows, with the same code. Nothing here stores a raw sample: latencies go into
`LatencySketch` buckets and event types into a bounded top-K counter.

What one window counts (probe and test sends are not deliveries and are left out):

- ``attempts``, ``successes`` and ``failures``: HTTP attempts by outcome;
- ``first_attempts`` and ``first_attempt_successes``: attempt number 1, and those that succeeded;
- ``delivered`` and ``failed``: deliveries that *ended* in the window (success, or dead and
  exhausted), with ``terminal_attempts`` the sum of their attempt numbers (the average attempts
  per delivery) and ``rescued`` the successes after at least one failed attempt;
- ``time_to_deliver_ms``: the sum, over ``delivered``, of first attempt to successful answer;
- ``failed_types``: failed attempts by event type, at most `TOP_TYPES_KEPT` types (space-saving:
  exact while a window sees that many failing types or fewer, heavy hitters kept after that);
- ``duration``: the sketch of every attempt's duration (the time the endpoint took to answer);
- ``latency``: the sketch of publish-to-receive (the successful answer's time minus the event's
  ``published_at``) of live and retried deliveries; backfills and replays deliver old events
  by design and would hide the live figure.

The **retry backlog** (`RetryBacklog`) counts deliveries waiting in a retry tier: an attempt
with state ``error`` schedules one retry at ``next_retry_at``, and the next attempt on the retry
lane takes one off. Counts are kept per minute of due time, so memory stays bounded; a retry
more than `STALE_RETRY_MS` past due that never fired (its subscription was suspended or deleted)
stops counting.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from streams.domain.models import Attempt, DeliveryState, Lane, OutcomeClass
from streams.domain.sketch import LatencySketch
from streams.errors import DecodeError

HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS
#: How long hourly windows are kept.
RETENTION_MS: Final = 7 * DAY_MS
#: Query spans, by name (`--window` and ``?window=``).
SPANS: Final = {"1h": HOUR_MS, "24h": DAY_MS, "7d": 7 * DAY_MS}
DEFAULT_SPAN: Final = "24h"
#: Failing event types counted per window, and how many a report shows.
TOP_TYPES_KEPT: Final = 16
TOP_TYPES_SHOWN: Final = 5
#: p95 attempt duration above this share of the subscription's timeout raises a warning.
LATENCY_WARNING_RATIO: Final = 0.8
#: Granularity and bounds of the retry backlog.
DUE_BUCKET_MS: Final = 60_000
MAX_DUE_BUCKETS: Final = 1_600  # a 24h retry window plus the longest tier, by the minute
STALE_RETRY_MS: Final = 15 * 60_000

_NOT_DELIVERIES: Final = frozenset({Lane.PROBE, Lane.TEST})
_LIVE_LANES: Final = frozenset({Lane.LIVE, Lane.RETRY})
_TERMINAL_FAILURES: Final = frozenset({DeliveryState.DEAD, DeliveryState.EXHAUSTED})
_COUNTERS: Final = (
    "attempts",
    "successes",
    "failures",
    "first_attempts",
    "first_attempt_successes",
    "delivered",
    "failed",
    "rescued",
    "terminal_attempts",
    "time_to_deliver_ms",
)


def window_start(ms: int) -> int:
    """The start of the hourly window holding ``ms``."""
    return ms - ms % HOUR_MS


def span_start(span_ms: int, now_ms: int) -> int:
    """The first window of a query over the last ``span_ms``: every hourly window that overlaps
    ``[now - span, now]``, so a 1h query covers between 60 and 120 minutes."""
    return window_start(now_ms - span_ms)


def counts_as_delivery(attempt: Attempt) -> bool:
    return attempt.lane not in _NOT_DELIVERIES


def _top_add(table: dict[str, int], key: str, n: int) -> None:
    """Space-saving: a new key in a full table replaces the smallest, inheriting its count."""
    if key in table or len(table) < TOP_TYPES_KEPT:
        table[key] = table.get(key, 0) + n
        return
    smallest = min(table, key=lambda k: (table[k], k))
    floor = table.pop(smallest)
    table[key] = floor + n


@dataclass(slots=True)
class WindowAggregate:
    """Everything one subscription's window (or a merge of windows) counts; see the module."""

    start: int
    attempts: int = 0
    successes: int = 0
    failures: int = 0
    first_attempts: int = 0
    first_attempt_successes: int = 0
    delivered: int = 0
    failed: int = 0
    rescued: int = 0
    terminal_attempts: int = 0
    time_to_deliver_ms: int = 0
    failed_types: dict[str, int] = field(default_factory=dict)
    duration: LatencySketch = field(default_factory=LatencySketch)
    latency: LatencySketch = field(default_factory=LatencySketch)

    def add(self, att: Attempt) -> None:
        """Fold one attempt in (the caller skips probe and test sends)."""
        end_ms = att.started_at + att.duration_ms
        success = att.outcome is OutcomeClass.SUCCESS
        self.attempts += 1
        self.duration.add(att.duration_ms)
        if att.attempt == 1:
            self.first_attempts += 1
            self.first_attempt_successes += success
        if success:
            self.successes += 1
            self.delivered += 1
            self.terminal_attempts += att.attempt
            self.rescued += att.attempt > 1
            first = att.first_attempt_at or att.started_at
            self.time_to_deliver_ms += max(0, round(end_ms - first))
            if att.lane in _LIVE_LANES and att.published_at > 0:
                self.latency.add(end_ms - att.published_at)
            return
        self.failures += 1
        _top_add(self.failed_types, att.event_type, 1)
        if att.state in _TERMINAL_FAILURES:
            self.failed += 1
            self.terminal_attempts += att.attempt

    def merge(self, other: WindowAggregate) -> WindowAggregate:
        """Add ``other`` into this aggregate; returns it. ``start`` becomes the earlier one."""
        self.start = min(self.start, other.start)
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, n in other.failed_types.items():
            _top_add(self.failed_types, key, n)
        self.duration.merge(other.duration)
        self.latency.merge(other.latency)
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _COUNTERS}
        out.update(
            start=self.start,
            failed_types=dict(self.failed_types),
            duration=self.duration.to_dict(),
            latency=self.latency.to_dict(),
        )
        return out

    @classmethod
    def from_dict(cls, data: Any) -> WindowAggregate:
        try:
            agg = cls(
                start=int(data["start"]),
                failed_types={str(k): int(v) for k, v in data["failed_types"].items()},
                duration=LatencySketch.from_dict(data["duration"]),
                latency=LatencySketch.from_dict(data["latency"]),
                **{name: int(data[name]) for name in _COUNTERS},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DecodeError("invalid_aggregate", f"not a window aggregate: {exc!r}") from exc
        return agg


def merge_all(windows: Iterable[WindowAggregate], start: int = 0) -> WindowAggregate:
    """One aggregate of many (copies; the inputs are left as they are)."""
    total = WindowAggregate(start=start)
    first = True
    for window in windows:
        if first:
            total.start = window.start
            first = False
        total.merge(window)
    return total


@dataclass(slots=True)
class RetryBacklog:
    """Retries waiting in a tier, counted by the minute of their due time (see the module)."""

    due: dict[int, int] = field(default_factory=dict)

    def observe(self, att: Attempt) -> None:
        """Apply one attempt: a retry attempt takes one off, an ``error`` schedules one."""
        if att.lane is Lane.RETRY:
            self._fire(att.started_at)
        if att.state is DeliveryState.ERROR and att.next_retry_at is not None:
            self._schedule(att.next_retry_at)
        self.expire(att.started_at)

    def _schedule(self, due_ms: int) -> None:
        bucket = due_ms - due_ms % DUE_BUCKET_MS
        if bucket not in self.due and len(self.due) >= MAX_DUE_BUCKETS:
            target = bucket  # full: count it with the nearest minute already held
            bucket = min(self.due, key=lambda b: (abs(b - target), b))
        self.due[bucket] = self.due.get(bucket, 0) + 1

    def _fire(self, at_ms: int) -> None:
        """A retry fires at or after its due time: take it from the latest bucket due by then."""
        if not self.due:
            return
        earlier = [b for b in self.due if b <= at_ms]
        bucket = max(earlier) if earlier else min(self.due)
        self.due[bucket] -= 1
        if self.due[bucket] <= 0:
            del self.due[bucket]

    def expire(self, now_ms: int) -> None:
        for bucket in [b for b in self.due if b + DUE_BUCKET_MS + STALE_RETRY_MS < now_ms]:
            del self.due[bucket]

    def waiting(self, now_ms: int) -> int:
        """Deliveries waiting for a retry now (retries long overdue excluded)."""
        return sum(n for b, n in self.due.items() if b + DUE_BUCKET_MS + STALE_RETRY_MS >= now_ms)

    def to_dict(self) -> dict[str, int]:
        return {str(b): n for b, n in sorted(self.due.items())}

    @classmethod
    def from_dict(cls, data: Any) -> RetryBacklog:
        try:
            return cls({int(b): int(n) for b, n in (data or {}).items()})
        except (TypeError, ValueError, AttributeError) as exc:
            raise DecodeError("invalid_backlog", f"not a retry backlog: {exc!r}") from exc


@dataclass(slots=True)
class SubscriptionIndex:
    """Per subscription: the window starts held, and the retry backlog."""

    windows: set[int] = field(default_factory=set)
    backlog: RetryBacklog = field(default_factory=RetryBacklog)
    position: tuple[int, int] | None = None  # (partition, offset) of the last attempt applied

    def applied(self, partition: int, offset: int) -> bool:
        """Whether the ledger record at (partition, offset) is already counted: a consumer that
        restarts from its last commit reads some records again, and they must not count twice."""
        return (
            self.position is not None
            and self.position[0] == partition
            and (offset <= self.position[1])
        )

    def observe(self, att: Attempt) -> tuple[int, list[int]]:
        """Record ``att``: (its window start, windows now past retention to delete)."""
        start = window_start(att.started_at)
        self.windows.add(start)
        self.backlog.observe(att)
        newest = max(self.windows)
        expired = sorted(w for w in self.windows if w + HOUR_MS + RETENTION_MS <= newest)
        self.windows.difference_update(expired)
        return start, expired

    def to_dict(self) -> dict[str, Any]:
        return {
            "windows": sorted(self.windows),
            "backlog": self.backlog.to_dict(),
            "position": None if self.position is None else list(self.position),
        }

    @classmethod
    def from_dict(cls, data: Any) -> SubscriptionIndex:
        if data is None:
            return cls()
        try:
            windows = {int(w) for w in data["windows"]}
            found = data.get("position")
            position = None if found is None else (int(found[0]), int(found[1]))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise DecodeError("invalid_index", f"not an analytics index: {exc!r}") from exc
        return cls(windows, RetryBacklog.from_dict(data.get("backlog")), position)


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One subscription's stored windows (those asked for) and its retry backlog."""

    windows: list[WindowAggregate]
    backlog: RetryBacklog

    def to_dict(self) -> dict[str, Any]:
        return {"windows": [w.to_dict() for w in self.windows], "backlog": self.backlog.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> SubscriptionData:
        try:
            windows = [WindowAggregate.from_dict(w) for w in data["windows"]]
        except (KeyError, TypeError) as exc:
            raise DecodeError("invalid_analytics", f"not analytics data: {exc!r}") from exc
        return cls(windows, RetryBacklog.from_dict(data.get("backlog")))


# --- reports -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class DailyRate:
    day: str  # UTC date, YYYY-MM-DD
    deliveries: int
    delivered: int
    success_rate: float | None


@dataclass(frozen=True, slots=True)
class FailedType:
    event_type: str
    failures: int


@dataclass(frozen=True, slots=True)
class Stats:
    """A report over a span; rates and means are None when nothing was counted."""

    since: int
    until: int
    attempts: int
    successes: int
    failures: int
    deliveries: int
    delivered: int
    failed: int
    success_rate: float | None
    first_attempt_success_rate: float | None
    rescued_by_retry: int
    average_attempts: float | None
    mean_time_to_deliver_ms: float | None
    latency_ms: Percentiles
    attempt_duration_ms: Percentiles
    most_failed_types: tuple[FailedType, ...]
    daily: tuple[DailyRate, ...]
    retry_backlog: int
    timeout_ms: float | None
    latency_warning: bool


def _ratio(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


def percentiles(sketch: LatencySketch) -> Percentiles:
    return Percentiles(sketch.quantile(0.5), sketch.quantile(0.95), sketch.quantile(0.99))


def latency_warning(duration: LatencySketch, timeout_ms: float | None) -> bool:
    """p95 of the attempt duration is above 80% of the subscription's timeout."""
    p95 = duration.quantile(0.95)
    return timeout_ms is not None and p95 is not None and p95 > LATENCY_WARNING_RATIO * timeout_ms


def daily_rates(windows: Iterable[WindowAggregate]) -> tuple[DailyRate, ...]:
    """Delivery success rate per UTC day, oldest first."""
    days: dict[int, list[int]] = {}
    for w in windows:
        day = days.setdefault(w.start - w.start % DAY_MS, [0, 0])
        day[0] += w.delivered + w.failed
        day[1] += w.delivered
    return tuple(
        DailyRate(
            day=datetime.fromtimestamp(start / 1000, tz=UTC).date().isoformat(),
            deliveries=total,
            delivered=ok,
            success_rate=_ratio(ok, total),
        )
        for start, (total, ok) in sorted(days.items())
    )


def top_failed(failed_types: dict[str, int], n: int = TOP_TYPES_SHOWN) -> tuple[FailedType, ...]:
    ranked = sorted(failed_types.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(FailedType(t, c) for t, c in ranked[:n])


def summarise(
    windows: list[WindowAggregate],
    *,
    since: int,
    until: int,
    retry_backlog: int = 0,
    timeout_ms: float | None = None,
) -> Stats:
    """The report over the windows that start in ``[since, until]``."""
    chosen = [w for w in windows if since <= w.start <= until]
    total = merge_all(chosen, since)
    deliveries = total.delivered + total.failed
    mean_ttd = None if total.delivered == 0 else total.time_to_deliver_ms / total.delivered
    return Stats(
        since=since,
        until=until,
        attempts=total.attempts,
        successes=total.successes,
        failures=total.failures,
        deliveries=deliveries,
        delivered=total.delivered,
        failed=total.failed,
        success_rate=_ratio(total.delivered, deliveries),
        first_attempt_success_rate=_ratio(total.first_attempt_successes, total.first_attempts),
        rescued_by_retry=total.rescued,
        average_attempts=None if deliveries == 0 else total.terminal_attempts / deliveries,
        mean_time_to_deliver_ms=mean_ttd,
        latency_ms=percentiles(total.latency),
        attempt_duration_ms=percentiles(total.duration),
        most_failed_types=top_failed(total.failed_types),
        daily=daily_rates(chosen),
        retry_backlog=retry_backlog,
        timeout_ms=timeout_ms,
        latency_warning=latency_warning(total.duration, timeout_ms),
    )
