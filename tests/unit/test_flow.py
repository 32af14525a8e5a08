"""F1, F2, F7: token buckets, fair ordering across tenants, fair dispatch slots."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.fairness import FairOrder
from streams.domain.ratelimit import TokenBucket, queue_cap
from streams.lanes.flow import FairSlots


def test_f1_bucket_paces_at_the_rate() -> None:
    bucket = TokenBucket(rate=5, now=0.0)
    assert bucket.wait(0.0) == 0
    bucket.take(0.0)
    assert bucket.wait(0.0) == pytest.approx(0.2)
    assert bucket.wait(0.2) == pytest.approx(0.0)


def test_f1_a_burst_can_be_allowed() -> None:
    bucket = TokenBucket(rate=5, burst=5, now=0.0)
    for _ in range(5):
        assert bucket.wait(0.0) == 0
        bucket.take(0.0)
    assert bucket.wait(0.0) > 0


@given(st.floats(min_value=0.5, max_value=500), st.integers(min_value=1, max_value=400))
def test_f1_bucket_never_exceeds_rate_over_any_run(rate: float, attempts: int) -> None:
    bucket = TokenBucket(rate=rate, now=0.0)
    now = 0.0
    for _ in range(attempts):
        now += bucket.wait(now)
        bucket.take(now)
    # one token up front, then one per 1/rate seconds
    assert attempts <= 1 + now * rate + 1e-6


def test_f2_pause_holds_the_next_deliveries() -> None:
    bucket = TokenBucket(rate=100, now=0.0)
    bucket.pause(until=2.0)
    assert bucket.wait(1.0) == pytest.approx(1.0)
    assert bucket.wait(2.0) == 0


def test_f1_rate_change_applies_at_once() -> None:
    bucket = TokenBucket(rate=10, now=0.0)
    bucket.take(0.0)
    bucket.set_rate(2)
    assert bucket.wait(0.0) == pytest.approx(0.5)


def test_f1_queue_cap_is_bounded() -> None:
    assert queue_cap(None) == 256
    assert queue_cap(0.5) == 8
    assert queue_cap(50) == 100
    assert queue_cap(1_000_000) == 256


def test_f7_round_robin_between_a_flood_and_a_trickle() -> None:
    order = FairOrder()
    for i in range(100):
        order.push("flood", i)
    order.push("trickle", 1000)
    first_two = [order.pop(), order.pop()]
    assert ("trickle", 1000) in first_two, "the trickle waits at most one turn"


@given(st.dictionaries(st.sampled_from("abcd"), st.integers(min_value=1, max_value=30)))
def test_f7_every_waiter_is_served_once(counts: dict[str, int]) -> None:
    order = FairOrder()
    ids = 0
    for tenant, count in counts.items():
        for _ in range(count):
            order.push(tenant, ids)
            ids += 1
    served = []
    while (turn := order.pop()) is not None:
        served.append(turn[1])
    assert sorted(served) == list(range(ids))


def test_f7_weights_share_in_proportion() -> None:
    order = FairOrder({"big": 3.0, "small": 1.0})
    for i in range(300):
        order.push("big", i)
        order.push("small", 1000 + i)
    shares = Counter(order.pop()[0] for _ in range(200))  # type: ignore[index]
    assert shares["big"] == pytest.approx(150, abs=3)


async def test_f7_fair_slots_hand_freed_slots_to_the_waiting_tenant() -> None:
    slots = FairSlots(1)
    await slots.acquire("flood")
    served: list[str] = []

    async def want(tenant: str) -> None:
        await slots.acquire(tenant)
        served.append(tenant)
        await asyncio.sleep(0)
        slots.release()

    tasks = [asyncio.create_task(want("flood")) for _ in range(5)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(want("trickle")))
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*tasks)
    assert served.index("trickle") <= 1
