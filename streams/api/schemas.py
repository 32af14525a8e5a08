"""JSON Schemas of the admin API's request and response bodies (OpenAPI 3.1 uses JSON Schema).

Request schemas mirror ``streams.domain.validation``: the validator stays the authority and
answers 422 naming each bad field; these schemas describe the same rules to clients.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_STR = {"type": "string"}
_MS = {"type": ["integer", "null"], "description": "Unix epoch milliseconds."}
_TENANT = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"}
_URL = {"type": "string", "format": "uri", "maxLength": 2048}
_FILTERS = {
    "type": "array",
    "items": {"type": "string"},
    "maxItems": 100,
    "description": 'Event types or wildcards such as invoice.*; default ["*"].',
}
_EMAILS = {"type": "array", "items": {"type": "string", "format": "email"}}
_HEADERS = {"type": "object", "additionalProperties": {"type": "string", "maxLength": 4096}}
_STATUS = {"type": "string", "enum": ["active", "suspended", "disabled"]}

_EDITABLE: Schema = {
    "name": {"type": "string", "maxLength": 200},
    "url": _URL,
    "filters": _FILTERS,
    "owner_emails": _EMAILS,
    "notify_url": {"type": ["string", "null"], "format": "uri", "maxLength": 2048},
    "rate_limit": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100000},
    "max_in_flight": {"type": ["integer", "null"], "minimum": 1, "maximum": 10000},
    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 30},
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
        "state": {"type": "string"},
        "attempts": {"type": "integer"},
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
    "properties": {"items": {"type": "array", "items": DELIVERY_SUMMARY}},
    "required": ["items"],
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
    "properties": {"items": {"type": "array", "items": {"type": "object"}}},
    "required": ["items"],
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

OPENAPI_DOCUMENT: Schema = {"type": "object", "description": "This document."}
