"""Flow control on the real pipeline (F1, F2, F3): delayed, never failed, never counted."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streams.domain.models import DeliveryState
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.receivers import PerId, Receiver, Respond, Silent

pytestmark = pytest.mark.integration

FAST = {
    "retry_schedule": "1s,2s",
    "retry_window": "1m",
    "breaker_failures": 100000,
    "breaker_min_attempts": 1000000,
}


async def test_f1_throttled_deliveries_arrive_later_at_the_rate_and_never_fail(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/slow-lane", Respond(200))
    async with PipelineHarness(make_settings(**FAST)) as h:
        await h.subscribe(url, ["*"], rate_limit=5.0, max_in_flight=2)
        await h.publish([make_event("acme", "order.created", n) for n in range(20)])
        await h.wait_for(lambda: len(receiver.requests) >= 20, timeout_s=60)
        attempts = await h.attempts()
    times = sorted(r.at for r in receiver.requests)
    span = times[-1] - times[0]
    # one at once, then one every 0.2 s: 19 more take >= 3.8 s
    assert span >= 3.6, f"20 deliveries at 5/s took only {span:.2f}s"
    windows = [sum(1 for t in times if start <= t < start + 1.0) for start in times]
    assert max(windows) <= 5 + 1, "never more than the rate (plus one) in any second"
    assert {a.state for a in attempts} == {DeliveryState.SUCCESS}, "throttling never fails"
    assert len(attempts) == 20, "a throttled delivery is not an attempt"


async def test_f2_retry_after_holds_the_subscriptions_next_deliveries(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    busy = PerId((Respond(429, headers=(("Retry-After", "2"),)), Respond(200)))
    url = receiver.route("/busy", busy)
    async with PipelineHarness(make_settings(**FAST)) as h:
        await h.subscribe(url, ["*"], max_in_flight=1)
        await h.publish([make_event("acme", "order.created", n) for n in range(3)])
        await h.wait_for(lambda: len(receiver.requests) >= 6, timeout_s=60)
    first = receiver.requests[0]
    assert first.at is not None
    later = [r for r in receiver.requests[1:]]
    # every request after the 429 waits out its Retry-After (2 s), retries included
    assert all(r.at >= first.at + 1.95 for r in later), [round(r.at - first.at, 2) for r in later]


async def test_f3_a_dead_endpoint_does_not_hold_the_others(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    dead = receiver_factory()
    healthy = receiver_factory()
    dead_url = dead.route("/never", Silent())
    ok_url = healthy.route("/ok", Respond(200))
    settings = make_settings(**FAST, dispatch_concurrency=8, origin_max_in_flight=2)
    async with PipelineHarness(settings) as h:
        await h.subscribe(dead_url, ["*"], timeout_s=5.0)
        await h.subscribe(ok_url, ["*"])
        await h.publish([make_event("acme", "order.created", n) for n in range(40)])
        # with 8 slots and the dead origin capped at 2, the healthy endpoint gets its 40
        # deliveries long before the dead one's first timeouts (5 s) free any slot
        await h.wait_for(lambda: len(healthy.requests) >= 40, timeout_s=4.5)
    assert len(dead.requests) <= 2 + 2, "the dead origin never held more than its cap"
