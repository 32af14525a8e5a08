"""Tenant keys see only their own tenant (SPEC Q6, S2): other tenants' objects are 404."""

from __future__ import annotations

import time
import uuid

import pytest

from streams.services import keys
from tests.integration.test_api import ApiWorker, api_worker

pytestmark = pytest.mark.integration
__all__ = ["api_worker"]


def test_tenant_keys_are_isolated_and_revocable(api_worker: ApiWorker) -> None:
    """Q6: 404 for another tenant's objects, lists filtered, own tenant forced, revoke -> 401."""
    a, b = f"a{uuid.uuid4().hex[:6]}", f"b{uuid.uuid4().hex[:6]}"
    _, key_a = keys.create_key(api_worker.settings, a)
    key_b_record, key_b = keys.create_key(api_worker.settings, b)
    with api_worker.client(key_a) as api_a, api_worker.client(key_b) as api_b:
        deadline = time.monotonic() + 10
        while api_b.get("/v1/subscriptions").status_code == 401:  # the key reaches the worker
            assert time.monotonic() < deadline, "the new key was never accepted"
            time.sleep(0.1)
        while api_a.get("/v1/subscriptions").status_code == 401:
            assert time.monotonic() < deadline, "the new key was never accepted"
            time.sleep(0.1)
        created = api_a.post("/v1/subscriptions", json={"url": "http://127.0.0.1:9/a"})
        assert created.status_code == 201 and created.json()["tenant_id"] == a
        sub_id = created.json()["id"]

        for method, path in (
            ("get", f"/v1/subscriptions/{sub_id}"),
            ("patch", f"/v1/subscriptions/{sub_id}"),
            ("delete", f"/v1/subscriptions/{sub_id}"),
            ("post", f"/v1/subscriptions/{sub_id}/disable"),
            ("post", f"/v1/subscriptions/{sub_id}/test"),
            ("post", f"/v1/subscriptions/{sub_id}/rotate-secret"),
            ("get", f"/v1/subscriptions/{sub_id}/deliveries"),
        ):
            body = {"name": "x"} if method == "patch" else None
            assert api_b.request(method, path, json=body).status_code == 404, path
        assert api_b.get("/v1/subscriptions").json()["items"] == []
        assert api_b.get("/v1/subscriptions", params={"tenant_id": a}).json()["items"] == []
        assert api_b.get("/v1/dlq", params={"subscription_id": sub_id}).status_code == 404
        other = api_b.post("/v1/subscriptions", json={"tenant_id": a, "url": "http://127.0.0.1:9/"})
        assert other.status_code == 422 and "tenant_id" in other.json()["fields"]
        assert [s["id"] for s in api_a.get("/v1/subscriptions").json()["items"]] == [sub_id]

        keys.revoke_key(api_worker.settings, key_b_record.key_id)
        deadline = time.monotonic() + 10
        while api_b.get("/v1/subscriptions").status_code != 401:
            assert time.monotonic() < deadline, "a revoked key still works"
            time.sleep(0.1)
