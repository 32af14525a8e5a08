"""hookstream's Prometheus metric families and the fixed label sets they take (SPEC O1).

`streams.metrics` wraps them in the helpers the lanes call; docs/observability.md describes each.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

# ``*_created`` series double the series count and no hookstream query or alert uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated

#: The registry `/metrics` serves. Process, platform and GC metrics of the worker are included.
REGISTRY: Final = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

OUTCOMES: Final = frozenset({"success", "retryable", "permanent", "fatal"})
LANES: Final = frozenset({"live", "retry", "backfill", "replay", "probe", "test"})
BREAKER_STATES: Final = frozenset({"closed", "open", "half_open"})
DEFER_REASONS: Final = frozenset({"breaker_open", "rate_limited", "max_in_flight", "suspended"})
CHANNELS: Final = frozenset({"email", "webhook"})
DECREASE_REASONS: Final = frozenset({"overload", "latency"})
SENT_OUTCOMES: Final = frozenset({"sent", "failed"})

UNKNOWN: Final = "unknown"
OTHER: Final = "other"
#: Distinct free-form reasons kept per metric before new ones are counted as ``other``.
MAX_REASONS: Final = 200

#: Attempt-duration buckets, in seconds: 5 ms (a local receiver) to 30 s (the largest timeout).
ATTEMPT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)

#: Garbage-collector pause buckets, in seconds: a generation-0 pass (well under a millisecond)
#: to a full pass over a large heap, which stops every delivery of the worker while it lasts.
GC_PAUSE_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
LOOP_LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# --- the metrics ------------------------------------------------------------------------------

DELIVERIES = Counter(
    "hookstream_deliveries",
    "Delivery attempts by outcome class (D5) and lane.",
    ["outcome", "lane"],
    registry=REGISTRY,
)
ATTEMPT_DURATION = Histogram(
    "hookstream_attempt_duration_seconds",
    "Duration of one HTTP attempt, from sending the request to the classified answer.",
    ["lane"],
    buckets=ATTEMPT_BUCKETS,
    registry=REGISTRY,
)
GC_PAUSES = Histogram(
    "hookstream_gc_pause_seconds",
    "Duration of one pass of Python's cycle collector, by generation; the event loop, and with "
    "it every delivery of the worker, waits while it runs.",
    ["generation"],
    buckets=GC_PAUSE_BUCKETS,
    registry=REGISTRY,
)
LOOP_LAG = Histogram(
    "hookstream_event_loop_lag_seconds",
    "How late the worker's event loop ran a timer it set for every 50 ms: the time any "
    "delivery ready on the loop then waited behind other work.",
    buckets=LOOP_LAG_BUCKETS,
    registry=REGISTRY,
)
RETRIES = Counter(
    "hookstream_retries_scheduled",
    "Deliveries handed to a retry tier, by tier delay (1m, 5m, ...).",
    ["tier"],
    registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "hookstream_dlq",
    "Records written to the dead-letter topic, by reason.",
    ["reason"],
    registry=REGISTRY,
)
SUSPENSIONS = Counter(
    "hookstream_subscription_suspensions",
    "Subscriptions auto-suspended (H3), by the outcome class that reached its threshold.",
    ["outcome"],
    registry=REGISTRY,
)
BREAKER_TRANSITIONS = Counter(
    "hookstream_breaker_transitions",
    "Circuit-breaker transitions (H7) this worker made in the fleet's shared breakers, by the "
    "state entered (the fleet's total is the sum over workers).",
    ["to"],
    registry=REGISTRY,
)
BREAKERS = Gauge(
    "hookstream_breakers",
    "Endpoint origins by circuit-breaker state, in the fleet's shared view (the breakers "
    "topic, H8): every worker reports the same numbers; closed counts origins that tripped once.",
    ["state"],
    registry=REGISTRY,
)
DEFERRED = Counter(
    "hookstream_deliveries_deferred",
    "Deliveries delayed without an attempt (breaker open, rate limit, max in-flight).",
    ["reason"],
    registry=REGISTRY,
)
INTAKE_PAUSES = Counter(
    "hookstream_intake_pauses",
    "Times the dispatcher paused reading one partition because it held its share of the "
    "intake buffer (F3, F7), by lane.",
    ["lane"],
    registry=REGISTRY,
)
CONCURRENCY_DECREASES = Counter(
    "hookstream_origin_limit_decreases",
    "Times an endpoint origin's adaptive in-flight limit went down (F3), by reason: overload "
    "(429, 5xx, timeout) or latency (attempts slower than twice the origin's average).",
    ["reason"],
    registry=REGISTRY,
)
DUPLICATES_SUPPRESSED = Counter(
    "hookstream_duplicates_suppressed",
    "Copies of already delivered deliveries settled without sending them again (after a "
    "crash or rebalance), by lane.",
    ["lane"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "hookstream_in_flight",
    "HTTP attempts in progress on this worker, by lane.",
    ["lane"],
    registry=REGISTRY,
)
BACKFILL_PROGRESS = Gauge(
    "hookstream_backfill_progress",
    "Events of the running backfills (R2): state=done so far, state=total planned.",
    ["state", "subscription"],
    registry=REGISTRY,
)
BACKFILLS_RUNNING = Gauge(
    "hookstream_backfills_running",
    "Backfills running on this worker.",
    registry=REGISTRY,
)
LEDGER_COMPACTION = Gauge(
    "hookstream_ledger_compaction",
    "The ledger state's RocksDB compaction (S6): what=pending_bytes (its estimate of the bytes "
    "still to compact), what=running (compactions under way). Reads are slower while it runs.",
    ["what"],
    registry=REGISTRY,
)
EVENTS_ROUTED = Counter(
    "hookstream_events_routed",
    "Ingest events accepted, archived and routed.",
    registry=REGISTRY,
)
DELIVERIES_ROUTED = Counter(
    "hookstream_deliveries_routed",
    "Deliveries created by routing: one per (event, matching subscription).",
    registry=REGISTRY,
)
EVENTS_INVALID = Counter(
    "hookstream_events_invalid",
    "Ingest events refused and dead-lettered (Q2), by reason.",
    ["reason"],
    registry=REGISTRY,
)
NOTIFICATIONS = Counter(
    "hookstream_notifications",
    "Owner notifications (H5, H6, R1), by channel and outcome.",
    ["channel", "outcome"],
    registry=REGISTRY,
)
