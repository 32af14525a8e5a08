"""Auth (Q6) and the one error mapping of the admin API (S1, S2), without a broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from streams.adapters.registry import ApiKeyRegistry, key_hash
from streams.api.component import dispatch
from streams.api.context import ApiContext
from streams.api.errors import render
from streams.api.routes import ROUTES, Route
from streams.errors import ConflictError, NotFoundError, UnauthorizedError, ValidationError
from streams.services.auth import authenticate
from streams.services.keys import parse_key
from streams.settings import load_settings

ADMIN = "operator-key-for-tests"
TOKEN = "hsk_0123456789ab_" + "s" * 43


@dataclass
class FakeRequest:
    headers: dict[str, str] = field(default_factory=dict)
    match_info: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""

    async def read(self) -> bytes:
        return self.raw


def _keys(tmp_path: Any) -> ApiKeyRegistry:
    keys = ApiKeyRegistry(load_settings(data_dir=tmp_path))
    record = {"tenant_id": "acme", "key_hash": key_hash(TOKEN), "name": "", "created_at": 1}
    keys.apply(b"key_0123456789ab", orjson.dumps(record))
    return keys


def _route(method: str, path: str) -> Route:
    return next(r for r in ROUTES if (r.method, r.path) == (method, path))


def test_operator_and_tenant_keys(tmp_path: Any) -> None:
    """Q6: the admin token is the operator; a stored key is its tenant; revoked is refused."""
    keys = _keys(tmp_path)
    assert authenticate(f"Bearer {ADMIN}", ADMIN, keys).is_operator
    tenant = authenticate(f"Bearer {TOKEN}", ADMIN, keys)
    assert (tenant.tenant_id, tenant.key_id) == ("acme", "key_0123456789ab")
    assert parse_key(TOKEN) == "key_0123456789ab"
    keys.apply(b"key_0123456789ab", None)
    with pytest.raises(UnauthorizedError):
        authenticate(f"Bearer {TOKEN}", ADMIN, keys)


@pytest.mark.parametrize(
    "header", [None, "", "Basic abc", "Bearer ", "Bearer wrong", "Bearer hsk_0123456789ab_x"]
)
def test_refused_headers(header: str | None, tmp_path: Any) -> None:
    with pytest.raises(UnauthorizedError) as caught:
        authenticate(header, ADMIN, _keys(tmp_path))
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_no_admin_token_means_no_operator(tmp_path: Any) -> None:
    with pytest.raises(UnauthorizedError):
        authenticate("Bearer ", None, None)
    with pytest.raises(UnauthorizedError):
        authenticate("Bearer None", None, _keys(tmp_path))


def test_error_mapping() -> None:
    """S1: each typed error has one status; 422 names every field."""
    assert render(ValidationError({"url": "bad", "x": "unknown field"}))[:2] == (
        422,
        {"error": "validation", "fields": {"url": "bad", "x": "unknown field"}},
    )
    assert render(NotFoundError("gone"))[0] == 404
    assert render(ConflictError("state"))[0] == 409


def _ctx(tmp_path: Any) -> ApiContext:
    settings = load_settings(data_dir=tmp_path, admin_token=ADMIN, kafka_bootstrap="127.0.0.1:1")
    return ApiContext(settings=settings, keys=_keys(tmp_path), routes=ROUTES)


async def test_dispatch_maps_errors_before_any_write(tmp_path: Any) -> None:
    """S1, S2, Q6: 401, 400 and 422 answers come before Kafka is ever touched."""
    ctx, create = _ctx(tmp_path), _route("post", "/v1/subscriptions")
    status, _, headers = await dispatch(ctx, create, FakeRequest())
    assert status == 401 and "WWW-Authenticate" in headers
    auth = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    assert (await dispatch(ctx, create, FakeRequest(auth, raw=b"{nope")))[0] == 400
    assert (await dispatch(ctx, create, FakeRequest(auth, raw=b"[1]")))[0] == 400
    body = orjson.dumps({"tenant_id": "acme", "url": "https://x.test/", "bogus": 1, "timeout_s": 0})
    status, payload, _ = await dispatch(ctx, create, FakeRequest(auth, raw=body))
    assert status == 422 and set(payload["fields"]) == {"bogus", "timeout_s"}


async def test_tenant_key_cannot_create_for_another_tenant(tmp_path: Any) -> None:
    """Q6: naming another tenant is a 422 on tenant_id."""
    ctx = _ctx(tmp_path)
    request = FakeRequest(
        {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        raw=orjson.dumps({"tenant_id": "other", "url": "https://x.test/"}),
    )
    status, payload, _ = await dispatch(ctx, _route("post", "/v1/subscriptions"), request)
    assert status == 422 and set(payload["fields"]) == {"tenant_id"}


async def test_openapi_needs_no_key(tmp_path: Any) -> None:
    status, payload, _ = await dispatch(
        _ctx(tmp_path), _route("get", "/openapi.json"), FakeRequest()
    )
    assert status == 200 and payload["openapi"] == "3.1.0"
