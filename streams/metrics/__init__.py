"""Every Prometheus metric hookstream exports (SPEC O1), and the helpers the lanes call.

The metric families are defined in `streams.metrics.families`, all in one registry, `REGISTRY`,
served at ``GET /metrics`` on every worker by `streams.api.metrics_page`. Names start with
``hookstream_``; docs/observability.md describes each.

Label values are bounded by construction, so one noisy tenant cannot blow up the time-series
count of a Prometheus server:

- ``outcome``, ``lane``, ``to``, ``state`` and the like only take values from fixed sets; anything
  else is counted as ``unknown``.
- Free-form reasons (DLQ and invalid-event reasons) must look like a reason code and at most
  `MAX_REASONS` distinct values are kept per metric; later ones share ``other``.
- No metric carries a subscription id by default. `allow_subscription_labels` opts a short list
  of subscriptions in; `subscription_label` maps every other id to ``other``.

The helpers are on the delivery hot path (thousands of calls a second), so each caches its
pre-bound label children in a dict: one dict lookup and one lock-protected add per call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import generate_latest

from streams.metrics.families import (
    ATTEMPT_DURATION,
    BACKFILL_PROGRESS,
    BACKFILLS_RUNNING,
    BREAKER_STATES,
    BREAKER_TRANSITIONS,
    BREAKERS,
    CHANNELS,
    CONCURRENCY_DECREASES,
    DEAD_LETTERS,
    DECREASE_REASONS,
    DEFER_REASONS,
    DEFERRED,
    DELIVERIES,
    DELIVERIES_ROUTED,
    DUPLICATES_SUPPRESSED,
    EVENTS_INVALID,
    EVENTS_ROUTED,
    IN_FLIGHT,
    INTAKE_PAUSES,
    LANES,
    LEDGER_COMPACTION,
    MAX_REASONS,
    NOTIFICATIONS,
    OTHER,
    OUTCOMES,
    REGISTRY,
    RETRIES,
    SENT_OUTCOMES,
    SUSPENSIONS,
    UNKNOWN,
)

_REASON = re.compile(r"^[a-z][a-z0-9_]{0,47}(:[a-z][a-z0-9_]{0,47})?$")
_TIER = re.compile(r"^\d+(ms|s|m|h|d)$")

# --- label guards -----------------------------------------------------------------------------


def _member(value: str, allowed: frozenset[str]) -> str:
    text = str(value)
    return text if text in allowed else UNKNOWN


class _Reasons:
    """Keeps the set of reason labels of one metric bounded (see the module docstring)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def label(self, reason: str) -> str:
        text = str(reason)
        if text in self._seen:
            return text
        if len(self._seen) >= MAX_REASONS or not _REASON.match(text):
            return OTHER
        self._seen.add(text)
        return text


_allowed_subscriptions: frozenset[str] = frozenset()


def allow_subscription_labels(subscription_ids: Iterable[str]) -> None:
    """Give these subscriptions their own ``subscription`` label value (opt-in, keep it short)."""
    global _allowed_subscriptions
    _allowed_subscriptions = frozenset(subscription_ids)


def subscription_label(subscription_id: str) -> str:
    """The ``subscription`` label of an id: itself when allow-listed, else ``other``."""
    return subscription_id if subscription_id in _allowed_subscriptions else OTHER


# --- hot-path helpers ---------------------------------------------------------------------------

_attempt_children: dict[tuple[str, str], tuple[Any, Any]] = {}
#: attempts in progress by lane, read at scrape time: a plain add per attempt, where the
#: gauge's own `inc` takes a lock (about 1 µs, twice per attempt)
_in_flight: dict[str, int] = {}
_retry_children: dict[str, Any] = {}
_dlq_children: dict[str, Any] = {}
_invalid_children: dict[str, Any] = {}
_dlq_reasons = _Reasons()
_invalid_reasons = _Reasons()


def record_attempt(outcome: str, lane: str, duration_s: float) -> None:
    """One finished HTTP attempt: its outcome class, lane and duration in seconds."""
    children = _attempt_children.get((outcome, lane))
    if children is None:
        lane_label = _member(lane, LANES)
        children = (
            DELIVERIES.labels(_member(outcome, OUTCOMES), lane_label),
            ATTEMPT_DURATION.labels(lane_label),
        )
        _attempt_children[(str(outcome), str(lane))] = children
    children[0].inc()
    children[1].observe(duration_s)


def set_ledger_compaction(pending_bytes: int, running: int) -> None:
    LEDGER_COMPACTION.labels(what="pending_bytes").set(pending_bytes)
    LEDGER_COMPACTION.labels(what="running").set(running)


def add_in_flight(lane: str, delta: int) -> None:
    """One attempt started (+1) or finished (-1) on ``lane``."""
    if lane in _in_flight:
        _in_flight[lane] += delta
        return
    label = _member(lane, LANES)
    if label not in _in_flight:
        _count_in_flight(label)
    _in_flight[label] += delta


def _count_in_flight(label: str) -> None:
    """Start ``label``'s count at 0; its gauge reads it at scrape time."""
    _in_flight[label] = 0
    IN_FLIGHT.labels(label).set_function(functools.partial(_in_flight_on, label))


def _in_flight_on(lane: str) -> float:
    return float(_in_flight[lane])


def record_retry(tier: str) -> None:
    """A delivery handed to the retry tier whose delay is ``tier`` (``1m``, ``5m``, ...)."""
    child = _retry_children.get(tier)
    if child is None:
        label = tier if _TIER.match(str(tier)) else UNKNOWN
        child = _retry_children[str(tier)] = RETRIES.labels(label)
    child.inc()


def record_dead_letter(reason: str) -> None:
    """One record written to the DLQ with ``reason`` (``http_404``, ``exhausted:http_500``...)."""
    child = _dlq_children.get(reason)
    if child is None:
        label = _dlq_reasons.label(reason)
        child = DEAD_LETTERS.labels(label)
        if label != OTHER:
            _dlq_children[str(reason)] = child
    child.inc()


def record_routed(events: int, deliveries: int) -> None:
    """A routed batch: events accepted and archived, and the deliveries they fanned out to."""
    if events:
        EVENTS_ROUTED.inc(events)
    if deliveries:
        DELIVERIES_ROUTED.inc(deliveries)


def record_invalid_event(reason: str) -> None:
    """One ingest event refused and dead-lettered, with its decode ``reason``."""
    child = _invalid_children.get(reason)
    if child is None:
        label = _invalid_reasons.label(reason)
        child = EVENTS_INVALID.labels(label)
        if label != OTHER:
            _invalid_children[str(reason)] = child
    child.inc()


# --- control-plane helpers (rare events: no caching needed) ---------------------------------------


def record_suspension(outcome: str) -> None:
    """One subscription auto-suspended because its ``outcome`` class reached the threshold."""
    SUSPENSIONS.labels(_member(outcome, OUTCOMES)).inc()


def record_breaker_transition(to_state: str) -> None:
    """A breaker entered ``to_state`` (closed, open or half_open)."""
    BREAKER_TRANSITIONS.labels(_member(to_state, BREAKER_STATES)).inc()


_breaker_counts: dict[str, int] = {}


def set_breakers(counts: Mapping[str, int]) -> None:
    """How many origins are in each state in the fleet's shared view; others are set to 0.

    One snapshot, replaced at once and read at scrape time, so a scrape during a transition does
    not see an origin in two states."""
    global _breaker_counts
    _breaker_counts = {state: counts.get(state, 0) for state in BREAKER_STATES}


def _breakers_in(state: str) -> float:
    return float(_breaker_counts.get(state, 0))


def record_duplicate_suppressed(lane: str) -> None:
    """A copy of a delivery that already succeeded was settled without an attempt (Q1)."""
    DUPLICATES_SUPPRESSED.labels(_member(lane, LANES)).inc()


def record_intake_paused(lane: str) -> None:
    """One partition's intake paused: it holds its share of the dispatcher's buffer."""
    INTAKE_PAUSES.labels(_member(lane, LANES)).inc()


def record_concurrency_decrease(reason: str) -> None:
    """An origin's adaptive in-flight limit went down, for `reason`."""
    CONCURRENCY_DECREASES.labels(_member(reason, DECREASE_REASONS)).inc()


def record_deferred(reason: str) -> None:
    """A delivery delayed without an attempt: breaker_open, rate_limited or max_in_flight."""
    DEFERRED.labels(_member(reason, DEFER_REASONS)).inc()


def record_notification(channel: str, outcome: str) -> None:
    """An owner notification sent or failed on ``channel`` (email or webhook)."""
    NOTIFICATIONS.labels(_member(channel, CHANNELS), _member(outcome, SENT_OUTCOMES)).inc()


_backfills: dict[str, tuple[int, int]] = {}


def set_backfill_progress(subscription_id: str, done: int, total: int) -> None:
    """The progress of one subscription's backfill (R2); sums per ``subscription`` label."""
    _backfills[subscription_id] = (done, total)
    _publish_backfills()


def backfill_finished(subscription_id: str) -> None:
    """A backfill completed or stopped: it no longer counts toward the progress gauges."""
    _backfills.pop(subscription_id, None)
    _publish_backfills()


def _publish_backfills() -> None:
    sums: dict[str, list[int]] = {OTHER: [0, 0]}
    for sub_id, (done, total) in _backfills.items():
        pair = sums.setdefault(subscription_label(sub_id), [0, 0])
        pair[0] += done
        pair[1] += total
    for label, (done, total) in sums.items():
        BACKFILL_PROGRESS.labels("done", label).set(done)
        BACKFILL_PROGRESS.labels("total", label).set(total)
    for label in _backfill_labels - set(sums):
        BACKFILL_PROGRESS.remove("done", label)
        BACKFILL_PROGRESS.remove("total", label)
    _backfill_labels.clear()
    _backfill_labels.update(sums)
    BACKFILLS_RUNNING.set(len(_backfills))


_backfill_labels: set[str] = set()


def _initialise() -> None:
    """Create the fixed label sets at zero, so rate() and dashboards see them from the start."""
    for outcome in OUTCOMES:
        SUSPENSIONS.labels(outcome)
        for lane in LANES:
            DELIVERIES.labels(outcome, lane)
    for lane in LANES:
        ATTEMPT_DURATION.labels(lane)
        _count_in_flight(lane)
        DUPLICATES_SUPPRESSED.labels(lane)
    for state in BREAKER_STATES:
        BREAKER_TRANSITIONS.labels(state)
        BREAKERS.labels(state).set_function(functools.partial(_breakers_in, state))
    set_breakers({})
    for reason in DEFER_REASONS:
        DEFERRED.labels(reason)
    for channel in CHANNELS:
        for sent in SENT_OUTCOMES:
            NOTIFICATIONS.labels(channel, sent)
    _publish_backfills()


_initialise()


def render() -> bytes:
    """Every metric in the Prometheus text exposition format."""
    return generate_latest(REGISTRY)
