"""Validation of subscription input (S1): every bad field is named, unknown fields refused."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from streams.domain.filters import validate_filter
from streams.errors import ValidationError

# The limits of subscription input: the one source of these rules. The admin API's JSON Schemas
# (streams.api.schemas) are built from them, so the OpenAPI document cannot drift from the
# validator, which stays the authority and names each bad field.
MAX_TIMEOUT_S = 30.0
MAX_NAME = 200
MAX_URL = 2048
MAX_FILTERS = 100
MAX_HEADER_VALUE = 4096
MAX_RATE_LIMIT = 100_000
MAX_IN_FLIGHT = 10_000
TENANT_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
_TENANT = re.compile(TENANT_PATTERN)
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
_EMAIL = re.compile(r"^[^@\s]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
# Headers hookstream sets itself; a subscription may not override them.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "x-idempotency-key",
    }
)
FIELDS = frozenset(
    {
        "tenant_id",
        "name",
        "url",
        "filters",
        "owner_emails",
        "notify_url",
        "rate_limit",
        "max_in_flight",
        "timeout_s",
        "headers",
    }
)
#: What an update (PATCH) may change; the tenant of a subscription never changes.
UPDATABLE = FIELDS - {"tenant_id"}


def validate_tenant_id(value: Any) -> str:
    """A tenant id, or ValidationError naming ``tenant_id``."""
    if not (isinstance(value, str) and _TENANT.match(value)):
        raise ValidationError({"tenant_id": "is required: 1-128 characters of A-Z a-z 0-9 . _ -"})
    return value


def check_update_fields(patch: Mapping[str, Any]) -> None:
    """Refuse an update that names fields it may not change; names each one."""
    errors = {
        name: "cannot be changed" if name in FIELDS else "unknown field"
        for name in patch
        if name not in UPDATABLE
    }
    if errors:
        raise ValidationError(errors)


@dataclass(frozen=True, slots=True)
class SubscriptionInput:
    tenant_id: str
    name: str
    url: str
    filters: tuple[str, ...]
    owner_emails: tuple[str, ...]
    notify_url: str | None
    rate_limit: float | None
    max_in_flight: int | None
    timeout_s: float
    headers: tuple[tuple[str, str], ...]


def _url(value: Any, *, allow_http: bool) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_URL:
        raise ValueError(f"is required: a URL of at most {MAX_URL} characters")
    parts = urlsplit(value)
    schemes = {"https", "http"} if allow_http else {"https"}
    if parts.scheme not in schemes:
        raise ValueError(f"scheme must be one of {sorted(schemes)}")
    if not parts.hostname:
        raise ValueError("has no host")
    if parts.username or parts.password:
        raise ValueError("must not carry credentials; use a custom header")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 and parts.netloc.rpartition("]")[2].count(":"):
        raise ValueError("has an invalid port")
    return value


def _filters(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of event-type patterns")
    if len(value) > MAX_FILTERS:
        raise ValueError(f"at most {MAX_FILTERS} filters")
    return tuple(validate_filter(v) for v in value)


def _emails(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of email addresses")
    bad = [v for v in value if not _EMAIL.match(v)]
    if bad:
        raise ValueError(f"not an email address: {bad[0]!r}")
    return tuple(value)


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        raise ValueError("must be an object of header names to values")
    out = []
    for name, val in value.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise ValueError(f"invalid header name {name!r}")
        if name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by hookstream")
        if not isinstance(val, str) or "\r" in val or "\n" in val or len(val) > MAX_HEADER_VALUE:
            raise ValueError(f"invalid value for header {name!r}")
        out.append((name, val))
    return tuple(out)


def _positive(value: Any, *, integer: bool, upper: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if integer and not isinstance(value, int):
        raise ValueError("must be an integer")
    if not 0 < value <= upper:
        raise ValueError(f"must be greater than 0 and at most {upper:g}")
    return value


def _check(errors: dict[str, str], name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        errors[name] = str(exc)
        return None


def validate_subscription(
    data: Mapping[str, Any], *, allow_http: bool, default_timeout: float
) -> SubscriptionInput:
    """Validate create input; raise ValidationError naming every bad field."""
    errors: dict[str, str] = {f: "unknown field" for f in data if f not in FIELDS}
    tenant = data.get("tenant_id", "")
    if not (isinstance(tenant, str) and _TENANT.match(tenant)):
        errors["tenant_id"] = "is required: 1-128 characters of A-Z a-z 0-9 . _ -"
    name = data.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME:
        errors["name"] = f"must be a string of at most {MAX_NAME} characters"
    url: str = _check(errors, "url", _url, data.get("url"), allow_http=allow_http) or ""
    notify = data.get("notify_url")
    if notify is not None:
        notify = _check(errors, "notify_url", _url, notify, allow_http=allow_http)
    filters = _check(errors, "filters", _filters, data.get("filters", ["*"]))
    emails = _check(errors, "owner_emails", _emails, data.get("owner_emails", []))
    headers = _check(errors, "headers", _headers, data.get("headers", {}))
    timeout = _check(
        errors,
        "timeout_s",
        _positive,
        data.get("timeout_s", default_timeout),
        integer=False,
        upper=MAX_TIMEOUT_S,
    )
    rate = data.get("rate_limit")
    if rate is not None:
        rate = _check(errors, "rate_limit", _positive, rate, integer=False, upper=MAX_RATE_LIMIT)
    in_flight = data.get("max_in_flight")
    if in_flight is not None:
        in_flight = _check(
            errors, "max_in_flight", _positive, in_flight, integer=True, upper=MAX_IN_FLIGHT
        )
    if errors:
        raise ValidationError(errors)
    return SubscriptionInput(
        tenant_id=tenant,
        name=name,
        url=url,
        filters=filters,
        owner_emails=emails,
        notify_url=notify,
        rate_limit=rate,
        max_in_flight=in_flight,
        timeout_s=float(timeout),
        headers=headers,
    )
