"""POST /v1/events on a real worker (F5, F6): 202, 413, 429 with Retry-After, all or nothing."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.integration.test_api import ADMIN, ApiWorker, api_worker

pytestmark = pytest.mark.integration
__all__ = ["api_worker"]


def _event(n: int, **extra: object) -> dict[str, object]:
    return {
        "id": f"evt_{uuid.uuid4().hex[:8]}_{n}",
        "tenant_id": "acme",
        "type": "invoice.paid",
        "timestamp": int(time.time() * 1000),
        "data": {"n": n},
        **extra,
    }


def test_f5_f6_ingest_accepts_limits_and_refuses_cleanly(api_worker: ApiWorker) -> None:
    with api_worker.client() as api:
        ok = api.post("/v1/events", json=_event(1))
        assert ok.status_code == 202 and ok.json()["accepted"] == 1
        batch = api.post("/v1/events", json={"events": [_event(i) for i in range(3)]})
        assert batch.status_code == 202 and batch.json()["accepted"] == 3
        half = api.post("/v1/events", json={"events": [_event(1), {"id": "no-type"}]})
        assert half.status_code == 422 and "events[1]" in half.json()["fields"]
        huge = api.post("/v1/events", json=_event(1, data={"blob": "x" * 300_000}))
        assert huge.status_code == 413
        unauthenticated = httpx.post(f"{api_worker.base_url}/v1/events", json=_event(1))
        assert unauthenticated.status_code == 401
        # the worker's default limit is 300 events/s with a burst of 300 per producer key
        flood = api.post("/v1/events", json={"events": [_event(i) for i in range(400)]})
        assert flood.status_code == 429 and int(flood.headers["Retry-After"]) >= 1
    assert ADMIN
