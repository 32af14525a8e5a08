"""/openapi.json and the served routes come from one table and agree (SPEC S2)."""

from __future__ import annotations

from typing import Any

from streams.api import api_component
from streams.api.openapi import build_openapi
from streams.api.routes import ROUTES
from streams.app import create_app
from streams.settings import load_settings


def _served(tmp_path: Any) -> set[tuple[str, str]]:
    app: Any = create_app(load_settings(data_dir=tmp_path), [api_component])
    served = set()
    for route in app.web.web_app.router.routes():
        path = route.resource.canonical
        if (path.startswith("/v1") or path == "/openapi.json") and route.method != "HEAD":
            served.add((route.method.lower(), path))
    return served


def test_every_served_route_is_documented_and_vice_versa(tmp_path: Any) -> None:
    """S2: the worker serves exactly the operations the document describes."""
    document = build_openapi(ROUTES)
    documented = {(method, path) for path, ops in document["paths"].items() for method in ops}
    assert documented == _served(tmp_path)


def test_every_operation_has_schemas_and_security() -> None:
    """S2: request and response schemas for every route; bearer everywhere but the document."""
    document = build_openapi(ROUTES)
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    ids = set()
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            ids.add(op["operationId"])
            ok = next(code for code in op["responses"] if code.startswith("2"))
            assert op["responses"][ok]["content"]["application/json"]["schema"]
            if method in ("post", "patch") and "requestBody" in op:
                assert op["requestBody"]["content"]["application/json"]["schema"]
            public = path == "/openapi.json"
            assert (op["security"] == []) is public
            if not public:
                assert "401" in op["responses"]
    assert len(ids) == len(ROUTES)
