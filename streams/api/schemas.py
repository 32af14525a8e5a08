"""JSON Schemas of the admin API's request and response bodies (OpenAPI 3.1 uses JSON Schema).

Request schemas are built from the limits in ``streams.domain.validation`` (one source of the
rules): the validator stays the authority and answers 422 naming each bad field; these schemas
describe the same rules to clients. The analytics reports' schemas live in `stats_schemas` and
are re-exported here, so every schema a route names is in this module.
"""

from __future__ import annotations

from typing import Any

from streams.api.stats_schemas import SUBSCRIPTION_STATS as SUBSCRIPTION_STATS
from streams.api.stats_schemas import TENANT_STATS as TENANT_STATS
from streams.domain import validation as v

Schema = dict[str, Any]

_STR = {"type": "string"}
_MS = {"type": ["integer", "null"], "description": "Unix epoch milliseconds."}
_TENANT = {"type": "string", "pattern": v.TENANT_PATTERN}
_URL = {"type": "string", "format": "uri", "minLength": 1, "maxLength": v.MAX_URL}
_FILTERS = {
    "type": "array",
    "items": {"type": "string"},
    "maxItems": v.MAX_FILTERS,
    "description": 'Event types or wildcards such as invoice.*; default ["*"].',
}
_EMAILS = {"type": "array", "items": {"type": "string", "format": "email"}}
_HEADERS = {
    "type": "object",
    "propertyNames": {"pattern": v.HEADER_NAME_PATTERN},
    "additionalProperties": {"type": "string", "maxLength": v.MAX_HEADER_VALUE},
}
_STATUS = {"type": "string", "enum": ["active", "suspended", "disabled"]}

_EDITABLE: Schema = {
    "name": {"type": "string", "maxLength": v.MAX_NAME},
    "url": _URL,
    "filters": _FILTERS,
    "owner_emails": _EMAILS,
    "notify_url": {"type": ["string", "null"], "format": "uri", "maxLength": v.MAX_URL},
    "rate_limit": {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "maximum": v.MAX_RATE_LIMIT,
    },
    "max_in_flight": {"type": ["integer", "null"], "minimum": 1, "maximum": v.MAX_IN_FLIGHT},
    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": v.MAX_TIMEOUT_S},
    "headers": _HEADERS,
}

SUBSCRIPTION_CREATE: Schema = {
    "type": "object",
    "properties": {"tenant_id": _TENANT, **_EDITABLE},
    "required": ["url"],
    "additionalProperties": False,
    "description": "tenant_id is required with the operator key; a tenant key may omit it "
    "(its own tenant is used) and may not name another tenant.",
}

SUBSCRIPTION_UPDATE: Schema = {
    "type": "object",
    "properties": _EDITABLE,
    "additionalProperties": False,
    "description": "Only the fields given change; null clears notify_url, rate_limit and "
    "max_in_flight.",
}

SUBSCRIPTION: Schema = {
    "type": "object",
    "properties": {
        "id": _STR,
        "tenant_id": _STR,
        **_EDITABLE,
        "status": _STATUS,
        "status_reason": {"type": ["string", "null"]},
        "created_at": _MS,
        "updated_at": _MS,
        "suspended_at": _MS,
        "secrets": {
            "type": "array",
            "items": {"type": "object", "properties": {"not_after": _MS}},
            "description": "The signing secrets (values never shown) and their grace ends.",
        },
        "secret": {
            "type": "string",
            "description": "The signing secret whsec_...: only in create and rotate answers.",
        },
        "backfill": {
            "type": ["object", "null"],
            "description": "The running or last backfill/replay (R2): job_id, state, done, "
            "total. Only in the answer of GET /v1/subscriptions/{id}.",
        },
    },
    "required": ["id", "tenant_id", "url", "status"],
}

SUBSCRIPTION_LIST: Schema = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": SUBSCRIPTION},
        "next_cursor": {"type": ["string", "null"]},
    },
    "required": ["items", "next_cursor"],
}

ROTATE_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "grace_s": {
            "type": "number",
            "minimum": 0,
            "maximum": 604800,
            "description": "How long the old secret keeps signing; default 86400 (24h).",
        }
    },
    "additionalProperties": False,
}

TEST_RESULT: Schema = {
    "type": "object",
    "properties": {
        "delivery_id": _STR,
        "url": _STR,
        "status": {"type": ["integer", "null"]},
        "latency_ms": {"type": "number"},
        "outcome": {"type": "string", "enum": ["success", "retryable", "permanent", "fatal"]},
        "reason": _STR,
        "error": {"type": ["string", "null"]},
        "response_excerpt": {"type": ["string", "null"]},
    },
    "required": ["delivery_id", "status", "latency_ms", "outcome", "reason", "error"],
}

DELETED: Schema = {
    "type": "object",
    "properties": {"id": _STR, "deleted": {"type": "boolean"}},
    "required": ["id", "deleted"],
}

DELIVERY_SUMMARY: Schema = {
    "type": "object",
    "properties": {
        "delivery_id": _STR,
        "subscription_id": _STR,
        "event_id": _STR,
        "event_type": _STR,
        "state": {"type": "string", "enum": ["success", "error", "exhausted", "dead"]},
        "attempts": {"type": "integer", "description": "Lifetime count (D7)."},
        "last_http_status": {"type": ["integer", "null"]},
        "last_error": {"type": ["string", "null"]},
        "first_attempt_at": _MS,
        "last_attempt_at": _MS,
        "next_retry_at": _MS,
    },
    "required": ["delivery_id", "subscription_id", "state", "attempts"],
}

DELIVERY_LIST: Schema = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": DELIVERY_SUMMARY},
        "next_cursor": {"type": ["string", "null"]},
    },
    "required": ["items", "next_cursor"],
}

DELIVERY: Schema = {
    "type": "object",
    "properties": {
        "summary": DELIVERY_SUMMARY,
        "attempts": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["summary", "attempts"],
}

DEAD_LETTER_LIST: Schema = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {"type": "object"}},
        "next_cursor": {"type": ["string", "null"]},
    },
    "required": ["items", "next_cursor"],
}

_RATE = {
    "type": "number",
    "exclusiveMinimum": 0,
    "maximum": 10000,
    "description": "Deliveries per second (default 5); never above the subscription's rate_limit.",
}
_EPOCH_MS = {"type": "integer", "minimum": 0, "description": "Unix epoch milliseconds."}

REENABLE_REQUEST: Schema = {
    "type": "object",
    "properties": {"rate": _RATE},
    "additionalProperties": False,
}

PROBE_RESULT: Schema = {
    "type": "object",
    "properties": {
        "delivery_id": _STR,
        "status": {"type": ["integer", "null"]},
        "outcome": {"type": "string", "enum": ["success", "retryable", "permanent", "fatal"]},
        "reason": _STR,
        "error": {"type": ["string", "null"]},
        "latency_ms": {"type": "number"},
    },
    "required": ["delivery_id", "status", "outcome", "reason", "error"],
}

REENABLE_RESULT: Schema = {
    "type": "object",
    "properties": {
        "reenabled": {"type": "boolean"},
        "subscription": SUBSCRIPTION,
        "probe": PROBE_RESULT,
        "backfill": {"type": ["object", "null"], "description": "job_id and window."},
        "error": _STR,
        "message": _STR,
    },
    "required": ["reenabled", "subscription", "probe"],
    "description": "The 409 answer of a failed probe has the same shape, with "
    'error "probe_failed" and reenabled false.',
}

REPLAY_RANGE_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "since": _EPOCH_MS,
        "until": _EPOCH_MS,
        "dry_run": {"type": "boolean"},
        "rate": _RATE,
    },
    "required": ["since", "until"],
    "additionalProperties": False,
}

REPLAY_DELIVERY_REQUEST: Schema = {
    "type": "object",
    "properties": {"confirm_duplicate": {"type": "boolean"}},
    "additionalProperties": False,
}

REPLAY_DLQ_REQUEST: Schema = {
    "type": "object",
    "properties": {
        "subscription_id": _STR,
        "reason": {"type": "string", "description": "Reason prefix, e.g. suspended."},
        "since": _EPOCH_MS,
        "until": _EPOCH_MS,
        "dry_run": {"type": "boolean"},
        "rate": _RATE,
    },
    "required": ["subscription_id"],
    "additionalProperties": False,
}

REPLAY_RESULT: Schema = {
    "type": "object",
    "description": "What was started (job ids) or, with dry_run, counted.",
}

ERROR: Schema = {
    "type": "object",
    "properties": {
        "error": _STR,
        "message": _STR,
        "fields": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["error"],
}

HEALTH_RECORD: Schema = {
    "type": "object",
    "properties": {
        "subscription_id": _STR,
        "tenant_id": _STR,
        "status": {"type": "string", "enum": ["active", "suspended", "disabled"]},
        "status_reason": {"type": ["string", "null"]},
        "suspended_at": {"type": ["integer", "null"]},
        "health": {
            "type": "object",
            "description": "consecutive_failures, per-class counts, first_failure_at, "
            "last_success_at, last outcome, status and error (H1).",
        },
        "breaker": {"type": "string", "enum": ["closed", "open", "half_open", "unknown"]},
    },
    "required": ["subscription_id", "status", "health", "breaker"],
}

HEALTH_SUMMARY: Schema = {
    "type": "object",
    "properties": {
        "active": {"type": "integer"},
        "suspended": {"type": "integer"},
        "disabled": {"type": "integer"},
        "failing": {"type": "integer"},
        "failing_subscriptions": {"type": "array", "items": _STR},
        "total": {"type": "integer"},
        "subscriptions": {"type": "array", "items": HEALTH_RECORD},
    },
    "required": ["active", "suspended", "disabled", "failing", "total", "subscriptions"],
}

INGEST_REQUEST: Schema = {
    "type": "object",
    "description": 'One event {id, type, timestamp, data, tenant_id?} or {"events": [...]}; '
    "a tenant key publishes for its own tenant.",
}

INGEST_RESULT: Schema = {
    "type": "object",
    "properties": {"accepted": {"type": "integer"}, "ids": {"type": "array", "items": _STR}},
    "required": ["accepted", "ids"],
}

OPENAPI_DOCUMENT: Schema = {"type": "object", "description": "This document."}
