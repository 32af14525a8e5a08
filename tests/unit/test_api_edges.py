"""The admin API's edges answer in the documented JSON shape (SPEC S1, S2).

The worker's own aiohttp application (routes, views and middleware as `create_app` builds them)
is served on a local port by aiohttp's test server; no Kafka is needed because every request
here is refused before a view reads any state.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from streams.api import api_component
from streams.api.openapi import build_openapi
from streams.api.routes import ROUTES
from streams.app import create_app
from streams.settings import load_settings

TOKEN = "op-edges"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = b'{"tenant_id": "acme", "url": "https://hooks.example.com/in"}'


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    settings = load_settings(data_dir=tmp_path, admin_token=TOKEN)
    app: Any = create_app(settings, [api_component])
    async with TestClient(TestServer(app.web.web_app)) as test_client:
        yield test_client


def _is_error_shape(body: Any, code: str) -> bool:
    return (
        isinstance(body, dict)
        and body.get("error") == code
        and isinstance(body.get("message"), str)
        and bool(body["message"])
    )


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "text/json", "application/octet-stream"],
)
async def test_S1_a_json_body_not_sent_as_json_creates_nothing(
    client: TestClient[Any, Any], content_type: str
) -> None:
    """S1, S2: a JSON body sent as text/plain (or any non-JSON type) is 415, before any write."""
    headers = {**AUTH, "Content-Type": content_type}
    response = await client.post("/v1/subscriptions", data=BODY, headers=headers)
    assert response.status == 415
    body = await response.json()
    assert _is_error_shape(body, "unsupported_media_type")
    assert "application/json" in body["message"]


async def test_S2_unknown_route_is_json_404(client: TestClient[Any, Any]) -> None:
    """S2: a path the API does not serve answers 404 in the error shape, not plain text."""
    response = await client.get("/v1/no-such-thing", headers=AUTH)
    assert response.status == 404
    assert response.content_type == "application/json"
    assert _is_error_shape(await response.json(), "not_found")


async def test_S2_wrong_method_is_json_405_with_allow(client: TestClient[Any, Any]) -> None:
    """S2: a method the path does not serve answers 405 in the error shape, with Allow."""
    response = await client.put("/v1/subscriptions", data=BODY, headers=AUTH)
    assert response.status == 405
    assert response.content_type == "application/json"
    body = await response.json()
    assert _is_error_shape(body, "method_not_allowed")
    assert "POST" in response.headers["Allow"]
    assert "PUT" in body["message"]


async def test_S2_a_body_over_the_server_limit_is_json_413(client: TestClient[Any, Any]) -> None:
    """S2: a body over the web server's size limit is 413 in the error shape."""
    huge = io.BytesIO(b'{"tenant_id": "' + b"a" * (3 * 1024 * 1024) + b'"}')
    headers = {**AUTH, "Content-Type": "application/json"}
    response = await client.post("/v1/subscriptions", data=huge, headers=headers)
    assert response.status == 413
    assert response.content_type == "application/json"
    assert _is_error_shape(await response.json(), "payload_too_large")


async def test_S2_json_with_a_charset_is_still_json(client: TestClient[Any, Any]) -> None:
    """S2: ``application/json; charset=utf-8`` passes the media-type check (422 from the view)."""
    headers = {**AUTH, "Content-Type": "application/json; charset=utf-8"}
    response = await client.post("/v1/subscriptions", data=b"[1]", headers=headers)
    assert response.status == 400  # parsed as JSON, refused as not an object
    assert _is_error_shape(await response.json(), "bad_request")


def test_S2_openapi_lists_the_server_errors() -> None:
    """S2: every body-taking operation documents 400, 413 and 415; the server's own 404, 405
    and 413 are documented components."""
    document = build_openapi(ROUTES)
    assert set(document["components"]["responses"]) == {"http_404", "http_405", "http_413"}
    for ops in document["paths"].values():
        for op in ops.values():
            if "requestBody" in op:
                assert {"400", "413", "415"} <= set(op["responses"]), op["operationId"]
