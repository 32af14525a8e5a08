"""Hourly windows of a subscription's delivery analytics (SPEC O2), pure.

A `WindowAggregate` counts one hour of one subscription's attempts: outcomes, first-attempt
successes, rescues, time to deliver, a latency sketch and the most-failed event types. Windows
merge exactly, so hours, workers and subscriptions combine without loss (`merge_all`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
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
#: Granularity and bounds of the retry backlog.
DUE_BUCKET_MS: Final = 60_000
MAX_DUE_BUCKETS: Final = 1_600  # a 24h retry window plus the longest tier, by the minute
STALE_RETRY_MS: Final = 15 * 60_000

#: Where a record sits on the topic folded (`attempt-digests`, or `attempts` for a scan of the
#: ledger): (partition, offset).
Position = tuple[int, int]
#: The key of a stored value's position: that of the last digest folded into it.
POSITION_KEY: Final = "digest_position"

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


def is_new_position(last: Position | None, at: Position) -> bool:
    """Whether the record at ``at`` comes after ``last``, the last one a value holds. A record
    of another partition is new: the topic was re-partitioned and offsets start over."""
    return last is None or last[0] != at[0] or at[1] > last[1]


def position_of(data: Any) -> Position | None:
    found = data.get(POSITION_KEY)
    return None if found is None else (int(found[0]), int(found[1]))


def position_dict(position: Position | None) -> list[int] | None:
    return None if position is None else list(position)


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
    position: Position | None = None  # the last record folded in (None when merged)

    def holds(self, at: Position) -> bool:
        """Whether the ledger record at ``at`` is already counted here."""
        return not is_new_position(self.position, at)

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
        out[POSITION_KEY] = position_dict(self.position)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> WindowAggregate:
        try:
            agg = cls(
                start=int(data["start"]),
                failed_types={str(k): int(v) for k, v in data["failed_types"].items()},
                duration=LatencySketch.from_dict(data["duration"]),
                latency=LatencySketch.from_dict(data["latency"]),
                position=position_of(data),
                **{name: int(data[name]) for name in _COUNTERS},
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
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
