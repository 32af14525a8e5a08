"""R3 with the ledger (S6, D7): a DLQ replay sends each delivery once, with a rising attempt.

The defect this guards: a delivery with attempts 1-4 and two dead letters (parked while its
subscription was disabled, then exhausted) came back as attempts ``[1, 2, 3, 4, 4, 5]``: one
replay per dead letter, numbered from each letter. The records are written straight to the
topics as the dispatcher writes them; the replay then runs for real: the job on `control`, the
backfill runner, the dispatcher, and a real receiver.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
import pytest
from msgspec import structs

from streams.adapters import codec
from streams.adapters.kafka_clients import make_producer, produce
from streams.domain.idempotency import delivery_id
from streams.domain.models import (
    Attempt,
    DeadLetter,
    Delivery,
    DeliveryState,
    Lane,
    OutcomeClass,
    Subscription,
)
from streams.services import replay
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.integration.recovery_support import runner
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration


def _history(sub: Subscription, delivery: Delivery, now_ms: int) -> tuple[list[bytes], list[bytes]]:
    """Attempts 1-4 of ``delivery`` (three retryable failures, then exhausted) and its two dead
    letters: parked while disabled after attempt 3, and exhausted after attempt 4."""
    attempts = [
        codec.encode(
            Attempt(
                delivery_id=delivery.delivery_id,
                subscription_id=sub.id,
                tenant_id=sub.tenant_id,
                event_id=delivery.event.id,
                event_type=delivery.event.type,
                attempt=n,
                lane=Lane.LIVE if n == 1 else Lane.RETRY,
                started_at=now_ms - 60_000 + n * 1000,
                duration_ms=3.0,
                outcome=OutcomeClass.RETRYABLE,
                reason="http_503",
                state=DeliveryState.EXHAUSTED if n == 4 else DeliveryState.ERROR,
                http_status=503,
                published_at=delivery.event.published_at,
            )
        )
        for n in range(1, 5)
    ]
    parked = DeadLetter(
        reason="disabled", dead_at=now_ms - 50_000, tenant_id=sub.tenant_id,
        subscription_id=sub.id, delivery=structs.replace(delivery, attempt=4),
        attempts=3,
    )  # fmt: skip
    exhausted = DeadLetter(
        reason="exhausted:http_503", dead_at=now_ms - 40_000, tenant_id=sub.tenant_id,
        subscription_id=sub.id, delivery=structs.replace(delivery, attempt=4),
        attempts=4, last_status=503,
    )  # fmt: skip
    return attempts, [codec.encode(parked), codec.encode(exhausted)]


async def test_r3_s6_a_dlq_replay_sends_each_delivery_once_with_the_next_attempt_number(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/ok", Respond(200))
    async with PipelineHarness(make_settings()) as h, runner(h) as running:
        sub = await h.subscribe(url, ["*"])
        events = [make_event("acme", "invoice.paid", n) for n in range(2)]
        deliveries = [Delivery(delivery_id(e.id, sub.id), sub.id, sub.tenant_id, e) for e in events]
        now_ms = int(time.time() * 1000)
        producer = make_producer(h.settings)
        for delivery in deliveries:
            attempts, letters = _history(sub, delivery, now_ms)
            for record in attempts:
                produce(producer, h.settings.topic("attempts"), sub.id, record)
            for record in letters:
                produce(producer, h.settings.topic("dlq"), sub.id, record)
        assert producer.flush(15) == 0
        ledger = h.ledger()
        await ledger.wait_ready(60)

        async def dead_letters() -> int:
            page = await ledger.dead_letters(
                subscription_id=sub.id, tenant_id=None, reason=None, since_ms=None,
                until_ms=None, cursor=None, limit=10,
            )  # fmt: skip
            return len(page["items"])

        deadline = time.monotonic() + 30
        while await dead_letters() < 4:  # the ledger reads what was just written (S6: within ~1 s)
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        counted = await replay.replay_dead_letters(
            h.settings, ledger, sub.id, dry_run=True, source=h.pipeline.registry
        )
        assert counted["dead_letters"] == 2  # deliveries, not dead letters (4 of them)
        started = await replay.replay_dead_letters(
            h.settings, ledger, sub.id, rate=50, source=h.pipeline.registry
        )
        assert started["job_id"]
        await h.wait_for(lambda: running.finished_jobs >= 1, 60)
        await h.wait_for(lambda: len(receiver.requests_to("/ok")) >= 2, 30)
        await asyncio.sleep(2)  # a second copy of either would arrive now

        got = receiver.requests_to("/ok")
        assert sorted(r.headers["webhook-id"] for r in got) == sorted(
            d.delivery_id for d in deliveries
        )
        assert [orjson.loads(r.body)["attempt"] for r in got] == [5, 5]

        def numbers(found: dict[str, object] | None) -> list[int]:
            assert found is not None
            return sorted(int(a["attempt"]) for a in found["attempts"])  # type: ignore[attr-defined]

        for delivery in deliveries:
            deadline = time.monotonic() + 30
            while numbers(await ledger.delivery(delivery.delivery_id)) != [1, 2, 3, 4, 5]:
                assert time.monotonic() < deadline, await ledger.delivery(delivery.delivery_id)
                await asyncio.sleep(0.3)
            found = await ledger.delivery(delivery.delivery_id)
            assert found is not None and found["summary"]["state"] == "success"
            assert found["summary"]["attempts"] == 5


async def test_r3_s6_a_range_replay_continues_each_deliverys_attempt_count(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """A time-range replay from the archive numbers each delivery after its lifetime count
    from the ledger (D7): a delivered event comes back as attempt 2, never attempt 1 again."""
    receiver = receiver_factory()
    url = receiver.route("/ok", Respond(200))
    async with PipelineHarness(make_settings()) as h, runner(h) as running:
        sub = await h.subscribe(url, ["*"])
        since = int(time.time() * 1000) - 1000
        event = make_event("acme", "invoice.paid", 1)
        key = delivery_id(event.id, sub.id)
        await h.publish([event])
        ledger = h.ledger()
        await ledger.wait_ready(60)  # S6: its partitions read up (until then a read says "moving")
        deadline = time.monotonic() + 60
        while (await ledger.delivery(key)) is None:  # the first attempt, in the ledger
            assert time.monotonic() < deadline
            await asyncio.sleep(0.3)
        await asyncio.to_thread(
            replay.replay_range, h.settings, since, int(time.time() * 1000) + 1000,
            subscription_id=sub.id, rate=50, source=h.pipeline.registry,
        )  # fmt: skip
        await h.wait_for(lambda: running.finished_jobs >= 1, 60)
        await h.wait_for(lambda: len(receiver.requests_to("/ok")) >= 2, 30)
        got = receiver.requests_to("/ok")
        assert [r.headers["webhook-id"] for r in got] == [key, key]
        assert [orjson.loads(r.body)["attempt"] for r in got] == [1, 2]
