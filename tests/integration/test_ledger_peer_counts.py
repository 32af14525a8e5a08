"""S6, R3 on the real broker: a worker that forwards a long list of delivery ids to the worker
holding their ledger is answered.

A DLQ replay (and a backfill) reads each delivery's lifetime attempt count from the ledger, so
the replay's attempt numbers only rise. When another worker holds the subscription's partition
the ids go to it in the URL of ``GET /internal/ledger``; 200 ids of 44 characters made a 9.4 KB
request line, which the peer's web server refused with 400, so the replay of a subscription with
more than about 170 dead deliveries failed on every worker but one (found by the 50k cluster
chaos run, where a backfill stalled on it). Here a subscription has 400 dead deliveries and both
of two workers must count them in a dry run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from streams.adapters import codec
from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.adapters.kafka_clients import make_producer, produce
from streams.domain.idempotency import delivery_id
from streams.domain.models import DeadLetter, Delivery, Lane
from streams.services.subscriptions import create_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import WorkerProcess

pytestmark = pytest.mark.integration

ADMIN = "op-" + uuid.uuid4().hex
LETTERS = 400


def _dead_letters(settings: Settings, sub_id: str, tenant: str) -> None:
    producer = make_producer(settings)
    now_ms = int(time.time() * 1000)
    for n in range(LETTERS):
        event = make_event(tenant, "order.created", n)
        delivery = Delivery(
            delivery_id=delivery_id(event.id, sub_id), subscription_id=sub_id,
            tenant_id=tenant, event=event, attempt=3, lane=Lane.RETRY, routed_at=now_ms,
        )  # fmt: skip
        letter = DeadLetter(
            reason="exhausted:http_503", dead_at=now_ms - LETTERS + n, tenant_id=tenant,
            subscription_id=sub_id, delivery=delivery, attempts=3, last_status=503,
        )  # fmt: skip
        produce(producer, settings.topic("dlq"), sub_id, codec.encode(letter))
    assert producer.flush(30) == 0


def _dry_run(worker: WorkerProcess, sub_id: str) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{worker.port}/v1/dlq/replay",
        json={"subscription_id": sub_id, "dry_run": True},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    )


@pytest.mark.timeout(600)
def test_s6_r3_a_dlq_dry_run_counts_400_deliveries_on_either_worker(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings(admin_token=ADMIN, secret_key="k-" + uuid.uuid4().hex)
    apply_topics(settings)
    workers: list[WorkerProcess] = []
    try:
        workers = [WorkerProcess(settings, f"w{n}", tmp_path).start() for n in (1, 2)]
        for worker in workers:
            worker.wait_ready(120)
        tenant = f"t{uuid.uuid4().hex[:8]}"
        sub = create_subscription(settings, {"tenant_id": tenant, "url": "http://127.0.0.1:9/x"})
        _dead_letters(settings, sub.id, tenant)

        answers: dict[int, Any] = {}
        deadline = time.monotonic() + 240
        while len(answers) < len(workers):
            for index, worker in enumerate(workers):
                if index in answers:
                    continue
                response = _dry_run(worker, sub.id)
                if response.status_code == 200 and response.json()["dead_letters"] == LETTERS:
                    answers[index] = response.json()
                elif response.status_code not in (200, 503):  # 503: partitions still moving
                    raise AssertionError(f"worker {index + 1}: {response.text}")
            if time.monotonic() > deadline:
                logs = "\n".join(w.tail(20) for w in workers)
                last = [_dry_run(w, sub.id).text for w in workers]
                raise AssertionError(f"not counted by both workers: {last}\n{logs}")
            time.sleep(1.0)
        assert answers[0] == answers[1]
    finally:
        for worker in workers:
            worker.stop(20)
        delete_topics(settings, [t.full_name for t in load_topology(settings).topics])
