"""Re-enable behind a probe, bounded and paced backfills, crash resume and replay (R1-R3, F4).

Real broker, real receivers: the harness runs the registry, router and dispatcher lanes, and
`recovery_support.runner` runs the backfill runner beside them as a worker does. Subscriptions
are suspended by writing the version the control agent writes (H3).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest

from streams.domain.idempotency import delivery_id
from streams.domain.models import DeliveryState, Lane, SubscriptionStatus
from streams.errors import ConflictError
from streams.services import recovery, replay
from streams.services.subscriptions import disable_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.integration.recovery_support import (
    backfill_records,
    control_events,
    notifications,
    runner,
    suspend,
)
from tests.receivers import Receiver, Respond

pytestmark = pytest.mark.integration


def _now_ms() -> int:
    return int(time.time() * 1000)


async def test_r1_failed_probe_keeps_it_suspended_tells_the_owner_and_backfills_nothing(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/down", Respond(503, body=b"still down"))
    async with PipelineHarness(make_settings()) as h:
        sub = await h.subscribe(url, ["*"], owner_emails=["ops@example.com"])
        await h.publish([make_event("acme", "a.b", 1)])
        await h.wait_for(lambda: len(receiver.requests) >= 1, 30)
        sub = await suspend(h, sub, _now_ms())
        await h.publish([make_event("acme", "a.b", n) for n in range(2, 6)])
        assert h.pipeline.transport is not None
        result = await recovery.reenable(h.settings, sub.id, h.pipeline.transport)
        assert not result.ok
        assert result.probe.status == 503 and result.probe.outcome == "retryable"
        kept = result.subscription
        assert kept.status is SubscriptionStatus.SUSPENDED
        assert kept.status_reason == "reenable_probe_failed"
        assert kept.suspended_at == sub.suspended_at  # kept for the backfill to come
        probe = receiver.requests[-1]
        assert probe.headers["webhook-id"] == result.probe.delivery_id
        assert b"endpoint.probe" in probe.body and "webhook-signature" in probe.headers
        notes = await asyncio.to_thread(notifications, h.settings)
        assert [n.kind for n in notes if n.subscription_id == sub.id] == ["endpoint.probe_failed"]
        assert notes[-1].recipients == ("ops@example.com",)
        kinds = [e.kind for e in await asyncio.to_thread(control_events, h.settings)]
        assert "replay_requested" not in kinds and "reenabled" not in kinds
        assert await asyncio.to_thread(backfill_records, h.settings) == []
        with pytest.raises(ConflictError, match="already active"):
            other = await h.subscribe(url, ["*"])
            await recovery.reenable(h.settings, other.id, h.pipeline.transport)


async def test_r2_backfill_is_bounded_by_suspension_and_retention_each_event_once(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """Events: A (outside retention), B (inside, before sub1's suspension), C (after it).
    sub1 gets C only; sub2, suspended before everything, gets B and C (retention caps it)."""
    receiver = receiver_factory()
    urls = [receiver.route(f"/s{i}", Respond(200)) for i in (1, 2)]
    settings = make_settings(archive_retention="20s")
    async with PipelineHarness(settings) as h, runner(h) as running:
        t0 = _now_ms()
        sub1 = await suspend(h, await h.subscribe(urls[0], ["invoice.*"]), t0)
        sub2 = await suspend(h, await h.subscribe(urls[1], ["invoice.*"]), t0 - 60_000)
        batch_a = [make_event("acme", "invoice.paid", n, "a") for n in range(4)]
        await h.publish(batch_a)
        await asyncio.sleep(16)
        batch_b = [make_event("acme", "invoice.paid", n, "b") for n in range(4)]
        await h.publish(batch_b)
        await asyncio.sleep(4)
        sub1 = await suspend(h, sub1, _now_ms())  # sub1's suspension: after B, before C
        await asyncio.sleep(1)
        batch_c = [make_event("acme", "invoice.paid", n, "c") for n in range(4)]
        noise = [
            make_event("acme", "user.created", 9, "c"),
            make_event("other", "invoice.paid", 9, "c"),
        ]
        await h.publish(batch_c + noise)
        await asyncio.sleep(6)  # re-enable ~27 s after A: A is past the 20 s retention
        assert h.pipeline.transport is not None
        for sub in (sub1, sub2):
            result = await recovery.reenable(h.settings, sub.id, h.pipeline.transport, rate=50)
            assert result.ok, result.probe
        await h.wait_for(lambda: running.finished_jobs >= 2, 60)
        await asyncio.sleep(2)  # anything extra would arrive now
        progress = await asyncio.to_thread(recovery.backfill_progress, settings, sub2.id)
    got = {
        path: Counter(r.headers["webhook-id"] for r in receiver.requests_to(path)
                      if b"invoice.paid" in r.body)
        for path in ("/s1", "/s2")
    }  # fmt: skip
    assert got["/s1"] == Counter({delivery_id(e.id, sub1.id): 1 for e in batch_c})
    assert got["/s2"] == Counter({delivery_id(e.id, sub2.id): 1 for e in batch_b + batch_c})
    assert progress is not None
    assert progress == {"job_id": progress["job_id"], "state": "finished", "done": 8, "total": 8}


BACKFILLED = 300  # 15 s at 20/s: the live events are all published and delivered meanwhile


async def test_f4_p5_backfill_is_paced_and_live_traffic_keeps_its_latency(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """A 20/s backfill of 300 events: the rate over 100 arrivals stays within 10%,
    and live deliveries of another subscription do not queue behind it.

    The rate is measured over 100 intervals (5 s), so one late wake-up moves it by well under
    1%. Live traffic is checked by order, not by a latency threshold (latency is a benchmark
    figure, not a test): 30 live events published at once, early in the backfill, all arrive
    while at least 100 backfilled deliveries (5 s of it) are still to come. A backfill that
    held live traffic up would deliver them behind its remaining records, after its last one.
    """
    receiver = receiver_factory()
    slow_url = receiver.route("/backfilled", Respond(200))
    live_url = receiver.route("/live", Respond(200))
    # The re-enable starts the origin's recovery ramp (F4) from 5/s, as in production. The
    # backfill is paced where it is written, so the ramp neither holds nor counts what is read
    # from its lane; when it did, this window measured the ramp: 5.2/s in CI of 2026-12-04
    # 13:28, and 23.8/s at 12:40 (the backlog it held let out above the backfill's pace).
    settings = make_settings()
    async with PipelineHarness(settings) as h, runner(h) as running:
        target = await suspend(h, await h.subscribe(slow_url, ["invoice.*"]), _now_ms())
        await h.subscribe(live_url, ["order.*"])
        await h.publish([make_event("acme", "invoice.paid", n) for n in range(BACKFILLED)])

        async def live_arrivals(count: int) -> list[float]:
            run = f"l{time.monotonic_ns()}"
            await h.publish([make_event("acme", "order.created", n, run) for n in range(count)])
            await h.wait_for(lambda: sum(run in r.body.decode() for r in
                                         receiver.requests_to("/live")) >= count, 30)  # fmt: skip
            return [r.at for r in receiver.requests_to("/live") if run in r.body.decode()]

        assert h.pipeline.transport is not None
        result = await recovery.reenable(h.settings, target.id, h.pipeline.transport, rate=20)
        assert result.ok
        await h.wait_for(lambda: len(receiver.requests_to("/backfilled")) >= 10, 30)
        during = await live_arrivals(30)
        await h.wait_for(lambda: running.finished_jobs >= 1, 60)
        await h.wait_for(lambda: len(receiver.requests_to("/backfilled")) > BACKFILLED, 30)
        attempts = await h.attempts()
    # The pace is judged on when the dispatcher started each backfill attempt (the ledger, D7),
    # not on when the receiver logged it: that thread shares the GIL with this process's
    # pipeline and can log a backlog late and at once under load. Both figures are printed.
    started = sorted(
        a.started_at / 1000
        for a in attempts
        if a.subscription_id == target.id and a.lane is Lane.BACKFILL
    )
    window = started[10:111]
    rate = (len(window) - 1) / (window[-1] - window[0])
    arrivals = sorted(r.at for r in receiver.requests_to("/backfilled")[1:])  # after the probe
    logged = arrivals[10:111]
    logged_rate = (len(logged) - 1) / (logged[-1] - logged[0])
    print(f"F4: backfill {rate:.2f}/s (ledger), {logged_rate:.2f}/s (receiver's log)")
    assert len(window) == 101, len(started)
    assert 18.0 <= rate <= 22.0, f"backfill ran at {rate:.2f}/s, asked 20/s"
    still_to_come = sum(at > max(during) for at in arrivals)
    spans = (min(during) - arrivals[0], max(during) - arrivals[0], arrivals[-1] - arrivals[0])
    assert len(during) == 30 and still_to_come >= 100, (still_to_come, spans)


async def test_r3_replay_of_a_success_needs_confirmation_and_keeps_the_webhook_id(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/ok", Respond(200))
    async with PipelineHarness(make_settings()) as h:
        sub = await h.subscribe(url, ["*"])
        event = make_event("acme", "invoice.paid", 1)
        await h.publish([event])
        key = delivery_id(event.id, sub.id)
        await h.wait_for(lambda: len(receiver.requests) >= 1, 30)

        async def succeeded() -> bool:
            return any(a.delivery_id == key and a.state is DeliveryState.SUCCESS
                       for a in await h.attempts())  # fmt: skip

        deadline = time.monotonic() + 20
        while not await succeeded():
            assert time.monotonic() < deadline, "the ledger never showed the success"
            await asyncio.sleep(0.3)
        await h.ledger().wait_ready(60)  # S6: read up to where the topics end now
        with pytest.raises(ConflictError, match="already succeeded"):
            await replay.replay_delivery(h.settings, h.ledger(), key)
        done = await replay.replay_delivery(h.settings, h.ledger(), key, confirm_duplicate=True)
        assert done["attempt"] == 2 and done["lane"] == Lane.REPLAY.value
        await h.wait_for(lambda: len(receiver.requests) >= 2, 30)
        assert [r.headers["webhook-id"] for r in receiver.requests] == [key, key]
        await asyncio.to_thread(disable_subscription, h.settings, sub.id)
        await h.wait_for(lambda: h.pipeline.registry.get(sub.id).status.value == "disabled", 20)  # type: ignore[union-attr]
        with pytest.raises(ConflictError, match="disabled"):
            await replay.replay_delivery(
                h.settings, h.ledger(), key, confirm_duplicate=True, source=h.pipeline.registry
            )
        with pytest.raises(ConflictError, match="disabled"):
            await asyncio.to_thread(
                replay.replay_range, h.settings, 0, _now_ms(), subscription_id=sub.id,
                source=h.pipeline.registry,
            )  # fmt: skip
