"""The OpenAPI 3.1 document of the admin API, built from the route table (see `routes`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from streams import __version__
from streams.api.schemas import ERROR

_PARAM = re.compile(r"{(\w+)}")
_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted: written to Kafka, delivery follows",
    400: "The body is not a JSON object",
    401: "Missing or invalid API key",
    404: "Not found, or not visible to this key",
    405: "The path does not serve this method; Allow lists those it serves",
    409: "Conflicts with the subscription's state",
    413: "The request or one of its events is larger than the limit",
    415: "The body is not application/json",
    422: "Invalid input; fields names each bad field",
    429: "Over the producer's rate limit; try again after Retry-After seconds",
    501: "Not available in this release yet",
    503: "Kafka or the registry is not reachable right now, or the state asked for is moving "
    "between workers (Retry-After)",
}


#: What any operation with a request body may answer before its view runs.
_BODY_ERRORS = frozenset({400, 413, 415})
#: What the web server answers for any path or method outside the table, in the same shape.
_SERVER_ERRORS = (404, 405, 413)


def _error(status: int) -> dict[str, Any]:
    return {
        "description": _REASONS[status],
        "content": {"application/json": {"schema": ERROR}},
    }


def _operation(route: Any) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM.findall(route.path)
    ]
    params += [
        {"name": q.name, "in": "query", "required": False, "schema": q.schema,
         "description": q.description}
        for q in route.query
    ]  # fmt: skip
    responses: dict[str, Any] = {
        str(route.status): {
            "description": _REASONS[route.status],
            "content": {"application/json": {"schema": route.response}},
        }
    }
    statuses = set(route.errors) | ({401, 503} if route.auth else set())
    if route.request is not None:
        statuses |= _BODY_ERRORS
    for status in sorted(statuses):
        responses[str(status)] = _error(status)
    operation: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
        "parameters": params,
        "responses": responses,
    }
    if route.request is not None:
        operation["requestBody"] = {
            "required": route.request_required,
            "content": {"application/json": {"schema": route.request}},
        }
    operation["security"] = [{"bearer": []}] if route.auth else []
    return operation


def build_openapi(routes: Iterable[Any]) -> dict[str, Any]:
    """The document: one operation per route, with its request and response schemas."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hookstream admin API",
            "version": __version__,
            "description": "Manage webhook subscriptions, read the delivery ledger and dead "
            "letters. Bearer keys: the operator key sees everything; a tenant key sees only "
            "its own tenant (404 for anything else). Every error, including those for a "
            "path or method the API does not serve, is a JSON object with `error` (a code) "
            "and `message`; a validation error has `fields` instead.",
        },
        "paths": paths,
        "components": {
            "responses": {f"http_{status}": _error(status) for status in _SERVER_ERRORS},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API key."}
            },
        },
        "security": [{"bearer": []}],
    }
