"""S1, S2: the admin API's JSON Schema and the validator accept and refuse the same input.

The schema is built from the validator's limits (`streams.domain.validation`); this checks the
two at every boundary, with an independent JSON Schema implementation (jsonschema-rs).
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest

from streams.api.schemas import SUBSCRIPTION_CREATE
from streams.domain import validation as v
from streams.errors import ValidationError

URL = "https://hooks.example.com/in"
BASE: dict[str, Any] = {"tenant_id": "acme", "url": URL}


def _long_url(length: int) -> str:
    return URL + "?" + "a" * (length - len(URL) - 1)


CASES: list[tuple[str, dict[str, Any]]] = [
    ("name at the limit", {"name": "n" * v.MAX_NAME}),
    ("name past it", {"name": "n" * (v.MAX_NAME + 1)}),
    ("url at the limit", {"url": _long_url(v.MAX_URL)}),
    ("url past it", {"url": _long_url(v.MAX_URL + 1)}),
    ("filters at the limit", {"filters": [f"t{i}" for i in range(v.MAX_FILTERS)]}),
    ("filters past it", {"filters": [f"t{i}" for i in range(v.MAX_FILTERS + 1)]}),
    ("header value at the limit", {"headers": {"X-A": "v" * v.MAX_HEADER_VALUE}}),
    ("header value past it", {"headers": {"X-A": "v" * (v.MAX_HEADER_VALUE + 1)}}),
    ("header name with a space", {"headers": {"X A": "v"}}),
    ("rate limit at the limit", {"rate_limit": v.MAX_RATE_LIMIT}),
    ("rate limit past it", {"rate_limit": v.MAX_RATE_LIMIT + 0.5}),
    ("rate limit zero", {"rate_limit": 0}),
    ("in-flight at the limit", {"max_in_flight": v.MAX_IN_FLIGHT}),
    ("in-flight past it", {"max_in_flight": v.MAX_IN_FLIGHT + 1}),
    ("in-flight not whole", {"max_in_flight": 1.5}),
    ("timeout at the limit", {"timeout_s": v.MAX_TIMEOUT_S}),
    ("timeout past it", {"timeout_s": v.MAX_TIMEOUT_S + 0.5}),
    ("tenant of 128", {"tenant_id": "t" * 128}),
    ("tenant of 129", {"tenant_id": "t" * 129}),
    ("tenant with a slash", {"tenant_id": "a/b"}),
    ("unknown field", {"colour": "blue"}),
]


def _validator_accepts(body: dict[str, Any]) -> bool:
    try:
        v.validate_subscription(body, allow_http=False, default_timeout=10.0)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(("case", "change"), CASES, ids=[c for c, _ in CASES])
def test_s1_schema_and_validator_agree_at_every_limit(case: str, change: dict[str, Any]) -> None:
    body = {**BASE, **change}
    schema_accepts = jsonschema_rs.validator_for(SUBSCRIPTION_CREATE).is_valid(body)
    assert schema_accepts == _validator_accepts(body), case
