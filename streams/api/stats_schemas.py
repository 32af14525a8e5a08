"""JSON Schemas of the admin API's delivery analytics answers (SPEC O2).

The reports of GET /v1/subscriptions/{id}/stats and GET /v1/tenants/{id}/stats, as
``streams.domain.analytics_report`` builds them: one set of properties shared by both, the
tenant's adding a line per subscription. `streams.api.schemas` re-exports them with the other
request and response schemas.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_STR = {"type": "string"}
_RATE = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
_MS_OR_NULL = {"type": ["number", "null"], "description": "Milliseconds."}
_PERCENTILES: Schema = {
    "type": "object",
    "properties": {"p50": _MS_OR_NULL, "p95": _MS_OR_NULL, "p99": _MS_OR_NULL},
    "required": ["p50", "p95", "p99"],
    "description": "Within 1% of the exact percentile (docs/observability.md, Analytics).",
}
_STATS_PROPERTIES: Schema = {
    "window": {"type": "string", "enum": ["1h", "24h", "7d"]},
    "since": {"type": "integer", "description": "Start of the first hourly window (epoch ms)."},
    "until": {"type": "integer", "description": "When the report was made (epoch ms)."},
    "attempts": {"type": "integer"},
    "successes": {"type": "integer"},
    "failures": {"type": "integer"},
    "deliveries": {"type": "integer", "description": "Deliveries that ended in the span."},
    "delivered": {"type": "integer"},
    "failed": {"type": "integer", "description": "Dead-lettered or exhausted."},
    "success_rate": _RATE,
    "first_attempt_success_rate": _RATE,
    "rescued_by_retry": {"type": "integer", "description": "Delivered after a failed attempt."},
    "average_attempts": {"type": ["number", "null"]},
    "mean_time_to_deliver_ms": _MS_OR_NULL,
    "latency_ms": {**_PERCENTILES, "description": "Publish to the receiver's 2xx."},
    "attempt_duration_ms": {**_PERCENTILES, "description": "One HTTP attempt."},
    "most_failed_types": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"event_type": _STR, "failures": {"type": "integer"}},
            "required": ["event_type", "failures"],
        },
    },
    "daily": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "day": {"type": "string", "format": "date"},
                "deliveries": {"type": "integer"},
                "delivered": {"type": "integer"},
                "success_rate": _RATE,
            },
            "required": ["day", "deliveries", "delivered", "success_rate"],
        },
    },
    "retry_backlog": {"type": "integer", "description": "Deliveries waiting in retry tiers."},
    "timeout_ms": _MS_OR_NULL,
    "latency_warning": {
        "type": "boolean",
        "description": "p95 attempt duration above 80% of the subscription's timeout.",
    },
}
_STATS_REQUIRED = [
    "window",
    "attempts",
    "success_rate",
    "first_attempt_success_rate",
    "rescued_by_retry",
    "latency_ms",
    "attempt_duration_ms",
    "most_failed_types",
    "daily",
    "retry_backlog",
    "latency_warning",
]

SUBSCRIPTION_STATS: Schema = {
    "type": "object",
    "properties": {"subscription_id": _STR, **_STATS_PROPERTIES},
    "required": ["subscription_id", *_STATS_REQUIRED],
}

TENANT_STATS: Schema = {
    "type": "object",
    "properties": {
        "tenant_id": _STR,
        **_STATS_PROPERTIES,
        "subscriptions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "subscription_id": _STR,
                    "name": _STR,
                    "attempts": {"type": "integer"},
                    "success_rate": _RATE,
                    "p95_latency_ms": _MS_OR_NULL,
                    "p95_attempt_duration_ms": _MS_OR_NULL,
                    "retry_backlog": {"type": "integer"},
                    "latency_warning": {"type": "boolean"},
                },
                "required": ["subscription_id", "attempts", "latency_warning"],
            },
        },
        "latency_warnings": {"type": "array", "items": _STR},
    },
    "required": ["tenant_id", "subscriptions", "latency_warnings", *_STATS_REQUIRED],
}
