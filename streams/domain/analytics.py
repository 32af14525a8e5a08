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

**Each record counts once.** A consumer that restarts, or takes over a partition after a
rebalance, reads again the records after the last committed offset, and the state it restored
(a table's changelog) may hold some of them already. Every stored value (a subscription's
`SubscriptionIndex`, which holds the backlog, and each of its windows) remembers the position
(partition, offset) of the last record folded into it, and `fold` skips a record that value
already holds. Each value is judged on its own: a crash can keep a window's write and lose its
index's (or the reverse), and the record is then folded into the one that lacks it only. An
attempt the dispatcher itself made twice (at least once, D1) is two attempts, and counts twice.

The analytics agent reads **digests** (`AnalyticsDigest`: one partition's attempts between two
dispatcher commits), which hold a `Tally` per subscription: its attempts folded ahead by the
dispatcher, per window, with the steps that move its retry backlog. A tally counts once by the
position of its digest, all of it or none. A scan of the ledger (`MemoryAnalytics`) folds each
attempt as a tally of one, at the attempt's own position. Stored values name their position
``digest_position``: values written when the agent read the ledger itself hold ledger positions
under ``position``, which say nothing about digests, and read as holding none.

`fold` is the one way records enter the state. `MemoryAnalytics` keeps the state as objects (a
scan of the ledger); `streams.domain.analytics_store` keeps it in two mappings of serialised
values (the analytics agent's tables, or plain dicts in tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.domain.analytics_window import (
    DUE_BUCKET_MS,
    HOUR_MS,
    MAX_DUE_BUCKETS,
    POSITION_KEY,
    RETENTION_MS,
    STALE_RETRY_MS,
    Position,
    WindowAggregate,
    counts_as_delivery,
    is_new_position,
    position_dict,
    position_of,
    window_start,
)
from streams.domain.models import Attempt, DeliveryState, Lane
from streams.errors import DecodeError


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

    def replay(self, tally: Tally) -> None:
        """Apply a tally's attempts: the same as `observe` of each of them, in order."""
        for step in tally.steps:
            if step.quiet_until is not None:
                self.expire(step.quiet_until)
            if step.fires:
                self._fire(step.started_at)
            if step.due is not None:
                self._schedule(step.due)
            self.expire(step.started_at)
        if tally.quiet_until is not None:
            self.expire(tally.quiet_until)

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


@dataclass(frozen=True, slots=True)
class BacklogStep:
    """One attempt that moved the retry backlog, as a tally keeps it."""

    quiet_until: int | None  # latest start of the attempts since the step before (moved none)
    started_at: int
    fires: bool  # a retry attempt: one retry fired
    due: int | None  # an ``error``: the retry it scheduled


@dataclass(slots=True)
class Tally:
    """One subscription's attempts, folded ahead: what the dispatcher's outbox sends the
    analytics agent per subscription and commit (O2), and what one attempt of the ledger is
    when a scan folds it.

    Its windows are the `WindowAggregate` of its attempts by hourly window; its steps are the
    attempts that moved the retry backlog, in order, each with the latest start of the attempts
    between it and the step before (they only expired old retries). `RetryBacklog.replay` of a
    tally therefore leaves exactly the backlog that `RetryBacklog.observe` of each attempt
    would. The one approximation is in ``failed_types``: a window that sees more than
    `TOP_TYPES_KEPT` failing types keeps heavy hitters (space-saving), and merging a tally's
    counts differs from adding its attempts one by one in which light type it keeps.
    """

    windows: dict[int, WindowAggregate] = field(default_factory=dict)
    steps: list[BacklogStep] = field(default_factory=list)
    quiet_until: int | None = None  # latest start of the attempts after the last step

    @property
    def attempts(self) -> int:
        """How many attempts the tally holds."""
        return sum(w.attempts for w in self.windows.values())

    @classmethod
    def of(cls, att: Attempt) -> Tally:
        tally = cls()
        tally.add(att)
        return tally

    def add(self, att: Attempt) -> None:
        """Fold one attempt in (the caller leaves out probe and test sends)."""
        start = window_start(att.started_at)
        window = self.windows.get(start)
        if window is None:
            window = self.windows[start] = WindowAggregate(start=start)
        window.add(att)
        fires = att.lane is Lane.RETRY
        due = att.next_retry_at if att.state is DeliveryState.ERROR else None
        if fires or due is not None:
            self.steps.append(BacklogStep(self.quiet_until, att.started_at, fires, due))
            self.quiet_until = None
        elif self.quiet_until is None or att.started_at > self.quiet_until:
            self.quiet_until = att.started_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "windows": [w.to_dict() for w in self.windows.values()],
            "steps": [[s.quiet_until, s.started_at, s.fires, s.due] for s in self.steps],
            "quiet_until": self.quiet_until,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Tally:
        try:
            windows = [WindowAggregate.from_dict(w) for w in data["windows"]]
            steps = [
                BacklogStep(
                    None if quiet is None else int(quiet),
                    int(started),
                    bool(fires),
                    None if due is None else int(due),
                )
                for quiet, started, fires, due in data["steps"]
            ]
            quiet_until = data["quiet_until"]
            return cls(
                {w.start: w for w in windows},
                steps,
                None if quiet_until is None else int(quiet_until),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DecodeError("invalid_tally", f"not an attempt tally: {exc!r}") from exc


@dataclass(slots=True)
class SubscriptionIndex:
    """Per subscription: the window starts held, and the retry backlog."""

    windows: set[int] = field(default_factory=set)
    backlog: RetryBacklog = field(default_factory=RetryBacklog)
    position: Position | None = None  # the last record observed

    def holds(self, at: Position) -> bool:
        """Whether the ledger record at ``at`` is already counted here (window set, backlog)."""
        return not is_new_position(self.position, at)

    def observe(self, att: Attempt) -> tuple[int, list[int]]:
        """Record ``att``: (its window start, windows now past retention to delete)."""
        return window_start(att.started_at), self.take(Tally.of(att))

    def take(self, tally: Tally) -> list[int]:
        """Record a tally: its windows and backlog steps; returns the windows now past
        retention, to delete."""
        self.windows.update(tally.windows)
        self.backlog.replay(tally)
        if not self.windows:
            return []
        newest = max(self.windows)
        expired = sorted(w for w in self.windows if w + HOUR_MS + RETENTION_MS <= newest)
        self.windows.difference_update(expired)
        return expired

    def to_dict(self) -> dict[str, Any]:
        return {
            "windows": sorted(self.windows),
            "backlog": self.backlog.to_dict(),
            POSITION_KEY: position_dict(self.position),
        }

    @classmethod
    def from_dict(cls, data: Any) -> SubscriptionIndex:
        if data is None:
            return cls()
        try:
            windows = {int(w) for w in data["windows"]}
            position = position_of(data)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
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


# --- folding ledger records ----------------------------------------------------------------------


@dataclass(slots=True)
class Fold:
    """What folding some records changed in one subscription's state: the values to write."""

    index: SubscriptionIndex
    index_changed: bool = False
    windows: dict[int, WindowAggregate] = field(default_factory=dict)  # changed, by start
    expired: list[int] = field(default_factory=list)  # window starts to delete


def fold(
    index: SubscriptionIndex,
    load: Callable[[int], WindowAggregate | None],
    records: Iterable[tuple[Position, Tally]],
) -> Fold:
    """Fold one subscription's tallies, in their topic's order, into its index and windows.

    ``index`` is changed in place; ``load(start)`` gives the stored window that starts at
    ``start``, or None. A record a value already holds is not folded into it again (see the
    module): the index and each window judge that on their own.
    """
    result = Fold(index)
    loaded: dict[int, WindowAggregate | None] = {}
    for at, tally in records:
        if not index.holds(at):
            for old in index.take(tally):
                result.windows.pop(old, None)
                loaded[old] = None
                result.expired.append(old)
            index.position = at
            result.index_changed = True
        for start, part in tally.windows.items():
            if start not in index.windows:
                continue  # older than the retention: expired already
            if start not in loaded:
                loaded[start] = load(start)
            window = loaded[start] or WindowAggregate(start=start)
            loaded[start] = window
            if not window.holds(at):
                window.merge(part)
                window.position = at
                result.windows[start] = window
    return result


class MemoryAnalytics:
    """Every subscription's index and windows in memory, folded from ledger records in order
    (a scan of the `attempts` topic, each record at its own position: ``hookstream stats``
    without a worker)."""

    def __init__(self) -> None:
        self.indexes: dict[str, SubscriptionIndex] = {}
        self.windows: dict[str, dict[int, WindowAggregate]] = {}

    def add(self, at: Position, att: Attempt) -> None:
        if not counts_as_delivery(att):
            return
        sub_id = att.subscription_id
        index = self.indexes.setdefault(sub_id, SubscriptionIndex())
        mine = self.windows.setdefault(sub_id, {})
        result = fold(index, mine.get, [(at, Tally.of(att))])
        mine.update(result.windows)
        for start in result.expired:
            mine.pop(start, None)

    def data(self, sub_id: str, since: int) -> SubscriptionData | None:
        """The windows starting at or after ``since``, and the backlog; None if never seen."""
        index = self.indexes.get(sub_id)
        if index is None:
            return None
        mine = self.windows.get(sub_id, {})
        chosen = [mine[s] for s in sorted(index.windows) if s >= since and s in mine]
        return SubscriptionData(chosen, index.backlog)
