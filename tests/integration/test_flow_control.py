"""Flow control on the real pipeline (F1, F2, F3, F7): delayed, never failed, never counted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer

from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import consumer_config, partition_of
from streams.domain.models import DeliveryState
from streams.services.subscriptions import create_subscription, update_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness, make_event
from tests.receivers import Capacity, PerId, Receiver, Respond, Silent

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


async def _update(h: PipelineHarness, sub_id: str, **patch: Any) -> None:
    """Update a subscription through the service and wait until the pipeline's registry has it."""
    await asyncio.to_thread(update_subscription, h.settings, sub_id, patch)
    registry = h.pipeline.registry

    def applied() -> bool:
        current = registry.get(sub_id)
        return current is not None and all(getattr(current, k) == v for k, v in patch.items())

    await h.wait_for(applied, timeout_s=20)


async def test_f1_a_rate_limit_update_takes_effect_without_a_restart(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/raised", Respond(200))
    async with PipelineHarness(make_settings(**FAST)) as h:
        sub = await h.subscribe(url, ["*"], rate_limit=1.0, max_in_flight=1)
        await h.publish([make_event("acme", "order.created", n) for n in range(30)])
        await h.wait_for(lambda: len(receiver.requests) >= 3, timeout_s=60)
        paced = sorted(r.at for r in receiver.requests)
        await _update(h, sub.id, rate_limit=1000.0)
        raised_at = time.time()
        left = 30 - len(receiver.requests)
        await h.wait_for(lambda: len(receiver.requests) >= 30, timeout_s=60)
        attempts = await h.attempts()
    # at the old 1/s the first three took at least ~2 s
    assert paced[2] - paced[0] >= 1.8, paced
    # at the old rate the rest would take `left` seconds; the running worker sends them at once
    last = max(r.at for r in receiver.requests)
    assert left >= 15, f"only {left} deliveries were left when the limit was raised"
    assert last - raised_at < left / 2, f"{left} deliveries took {last - raised_at:.1f}s"
    assert len(attempts) == 30, "a throttled delivery is not an attempt"
    assert {a.state for a in attempts} == {DeliveryState.SUCCESS}


async def test_f1_a_max_in_flight_update_takes_effect_without_a_restart(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    url = receiver.route("/widened", Respond(200, delay_s=1.0))
    async with PipelineHarness(make_settings(**FAST)) as h:
        sub = await h.subscribe(url, ["*"], max_in_flight=1)
        await h.publish([make_event("acme", "order.created", n) for n in range(14)])
        await h.wait_for(lambda: len(receiver.requests) >= 2, timeout_s=60)
        await _update(h, sub.id, max_in_flight=16)
        widened_at = time.time()
        left = 14 - len(receiver.requests)
        await h.wait_for(lambda: len(receiver.requests) >= 14, timeout_s=60)
        await h.wait_for(lambda: h.settled_count() >= 14, timeout_s=30)
        attempts = await h.attempts()
    # one at a time, each answered after 1 s, the rest would take `left` seconds more
    assert left >= 8, f"only {left} deliveries were left when the limit was raised"
    last = max(r.at for r in receiver.requests)
    assert last - widened_at < left / 2, f"{left} deliveries took {last - widened_at:.1f}s"
    assert len(attempts) == 14
    assert {a.state for a in attempts} == {DeliveryState.SUCCESS}


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


async def _subscribe(h: PipelineHarness, subscriptions: dict[str, dict[str, Any]]) -> None:
    """Create each subscription (id -> fields) and wait until the pipeline's registry has all."""
    for sub_id, data in subscriptions.items():
        await asyncio.to_thread(create_subscription, h.settings, data, subscription_id=sub_id)
    registry = h.pipeline.registry
    await h.wait_for(lambda: all(registry.get(i) for i in subscriptions), 20)


async def test_f3_a_dead_endpoint_does_not_hold_the_others(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    dead = receiver_factory()
    healthy = receiver_factory()
    dead_url = dead.route("/never", Silent())
    ok_url = healthy.route("/ok", Respond(200))
    settings = make_settings(**FAST, dispatch_concurrency=8, origin_max_in_flight=2)
    # In different partitions of `routed` (the next test puts them in one)
    partitions = load_topology(settings).lane_partitions
    dead_id, ok_id = "sub_f3_dead", "sub_f3_ok"
    assert partition_of(dead_id, partitions) != partition_of(ok_id, partitions)
    async with PipelineHarness(settings) as h:
        await _subscribe(
            h,
            {
                dead_id: {"tenant_id": "acme", "url": dead_url, "filters": ["*"], "timeout_s": 5.0},
                ok_id: {"tenant_id": "acme", "url": ok_url, "filters": ["*"]},
            },
        )
        await h.publish([make_event("acme", "order.created", n) for n in range(40)])
        # with 8 slots and the dead origin capped at 2, the healthy endpoint gets its 40
        # deliveries long before the dead one's first timeouts (5 s) free any slot
        await h.wait_for(lambda: len(healthy.requests) >= 40, timeout_s=4.5)
    assert len(dead.requests) <= 2 + 2, "the dead origin never held more than its cap"


async def test_f3_a_dead_endpoint_does_not_hold_its_own_partition(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """F3 within one partition: the dead endpoint's backlog fills the partition's intake share
    (4 x 8 = 32) and pauses it; once its origin has stalled (1 s without an attempt ending),
    its queued deliveries are deferred to a retry tier, the partition is read again, and the
    healthy subscription in the same partition gets its deliveries long before the dead
    one's 5 s timeouts."""
    dead = receiver_factory()
    healthy = receiver_factory()
    dead_url = dead.route("/never", Silent())
    ok_url = healthy.route("/ok", Respond(200))
    settings = make_settings(**FAST, dispatch_concurrency=8, origin_max_in_flight=2)
    partitions = load_topology(settings).lane_partitions
    dead_id, ok_id = "sub_f3_dead", "sub_f3_near6"
    assert partition_of(dead_id, partitions) == partition_of(ok_id, partitions)
    async with PipelineHarness(settings) as h:
        await _subscribe(
            h,
            {
                dead_id: {
                    "tenant_id": "acme",
                    "url": dead_url,
                    "filters": ["dead.*"],
                    "timeout_s": 5.0,
                },
                ok_id: {"tenant_id": "acme", "url": ok_url, "filters": ["ok.*"]},
            },
        )
        # the dead endpoint's backlog first, then the healthy one's deliveries behind it
        await h.publish([make_event("acme", "dead.created", n) for n in range(60)])
        await h.wait_for(lambda: len(dead.requests) >= 2, timeout_s=10)
        await h.publish([make_event("acme", "ok.created", n) for n in range(20)])
        await h.wait_for(lambda: len(healthy.requests) >= 20, timeout_s=4.0)
    assert len(dead.requests) <= 2 + 2, "the dead origin never held more than its cap"


async def test_f7_a_tenant_out_of_slots_does_not_keep_another_partitions_deliveries_waiting(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """F7 at intake: the big tenant's 300 deliveries to an endpoint that takes 0.2 s pile up
    behind 4 dispatch slots. Its partition stops being read once it holds its share of the
    intake buffer, so the small tenant's deliveries, published after them in another
    partition, are read and attempted in the next free fair slot, long before the big
    tenant's backlog drains. Checked by order: the small tenant's 5 arrive before the big
    tenant's 100th (without the pause, at least 172 of its 300 came first: the intake buffer
    of 128 had to drain below its cap before anything else was read)."""
    slow, fast = receiver_factory(), receiver_factory()
    big_url = slow.route("/big", Respond(200, delay_s=0.2))
    small_url = fast.route("/small", Respond(200))
    settings = make_settings(**FAST, dispatch_concurrency=4)
    partitions = load_topology(settings).lane_partitions
    big_id, small_id = "sub_f7_big", "sub_f7_small"
    assert partition_of(big_id, partitions) != partition_of(small_id, partitions)
    async with PipelineHarness(settings) as h:
        await _subscribe(
            h,
            {
                big_id: {"tenant_id": "big", "url": big_url, "filters": ["big.*"]},
                small_id: {"tenant_id": "small", "url": small_url, "filters": ["small.*"]},
            },
        )
        await h.publish([make_event("big", "big.created", n) for n in range(300)])
        await h.wait_for(lambda: len(slow.requests) >= 8, timeout_s=30)  # the backlog is there
        await h.publish([make_event("small", "small.created", n) for n in range(5)])
        await h.wait_for(lambda: len(fast.requests) >= 5, timeout_s=60)
        big_before_small = len(slow.requests)
    assert big_before_small < 100, f"{big_before_small} of the big tenant's came first"


async def test_d1_a_paused_partition_is_read_again_after_a_rebalance_gives_it_back(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """D1, F3: the intake pause of a partition holding its share of the buffer must not
    outlive a rebalance. librdkafka keeps a paused partition paused when the group hands it
    back to the same consumer, while the dispatcher forgets its pauses with the revoke; without
    lifting them the partition is never read again and its deliveries wait forever (seen in
    the chaos run). Another member joins the dispatch group while the partition is paused and
    leaves again; every delivery must still arrive."""
    receiver = receiver_factory()
    url = receiver.route("/slow", Respond(200, delay_s=0.05))
    settings = make_settings(**FAST, dispatch_concurrency=2)
    events = 300
    async with PipelineHarness(settings) as h:
        dispatcher = h.pipeline.dispatcher
        assert dispatcher is not None
        await h.subscribe(url, ["*"])
        await h.publish([make_event("acme", "order.created", n) for n in range(events)])
        await h.wait_for(lambda: bool(dispatcher._intake.paused), timeout_s=30)
        await asyncio.to_thread(_join_and_leave, settings)
        await h.wait_for(lambda: len(receiver.requests_to("/slow")) >= events, timeout_s=120)


def _join_and_leave(settings: Settings) -> None:
    """Join the dispatch group (taking some partitions for a moment) and leave it."""
    consumer = Consumer(consumer_config(settings, "dispatch", **{"client.id": "interloper"}))
    consumer.subscribe([settings.topic("routed")])
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the interloper was never given a partition"
            consumer.poll(0.1)
    finally:
        consumer.close()  # leaves without committing: the dispatcher reads all of it again


async def _overflows_of_first_attempts(
    settings: Settings, receiver: Receiver, path: str, events: int
) -> int:
    """Publish `events` to a `Capacity` endpoint and wait for each one's first attempt (retries
    are a minute away); how many of those attempts found the endpoint full."""
    url = receiver.url(path)
    async with PipelineHarness(settings) as h:
        await h.subscribe(url, ["*"])
        await h.publish([make_event("acme", "order.created", n) for n in range(events)])
        await h.wait_for(lambda: len(receiver.requests_to(path)) >= events, timeout_s=120)
    return receiver.overflows(path)


async def test_f3_adaptive_concurrency_backs_off_an_endpoint_that_answers_503_when_full(
    make_settings: Callable[..., Settings], receiver_factory: Callable[..., Receiver]
) -> None:
    """An endpoint that serves 8 requests at once and answers 503 beyond. With the fixed
    origin limit (64) most first attempts find it full; the adaptive limit comes down to what
    it can take after a few windows, so far fewer do (the unit tests show the convergence)."""
    receiver = receiver_factory()
    receiver.route("/fixed", Capacity(limit=8, delay_s=0.05))
    receiver.route("/adaptive", Capacity(limit=8, delay_s=0.05))
    later = {**FAST, "retry_schedule": "1m", "retry_window": "5m"}
    fixed = await _overflows_of_first_attempts(
        make_settings(**later, adaptive_concurrency=False), receiver, "/fixed", 600
    )
    adaptive = await _overflows_of_first_attempts(
        make_settings(**later, adaptive_concurrency=True), receiver, "/adaptive", 600
    )
    assert fixed >= 300, f"the fixed limit overran the endpoint only {fixed} times in 600"
    assert adaptive < 0.6 * fixed, f"adaptive {adaptive} against fixed {fixed} rejected"
