"""F3, adaptive concurrency: an origin's in-flight limit under AIMD, pure and through FlowControl.

`AimdLimit` starts at the configured cap, goes down by a quarter on an overload signal (429,
5xx, timeout, or attempts slower than twice the origin's long-run average), at most once per
window, and climbs back by one per window of successes. `FlowControl` runs an origin's attempts
under that limit when ``adaptive`` is on.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.domain.concurrency import AimdLimit, overloaded
from streams.domain.models import Delivery, Event, FailureKind, Secret, Subscription
from streams.lanes.flow import Ended, FlowControl

TP = ("routed", 0)


def test_f3_overload_signals_are_429_5xx_and_timeouts_only() -> None:
    assert overloaded(429, None)
    assert overloaded(503, None)
    assert overloaded(500, None)
    assert overloaded(None, FailureKind.TIMEOUT)
    assert not overloaded(200, None)
    assert not overloaded(404, None)
    assert not overloaded(410, None)
    assert not overloaded(None, FailureKind.CONNECT_REFUSED)


def test_f3_a_healthy_origin_keeps_the_full_cap() -> None:
    limit = AimdLimit(64)
    for n in range(1000):
        assert limit.observe(0.01, False, now=n * 0.01) is None
    assert limit.current == 64
    assert limit.decreases == 0


def test_f3_overload_cuts_the_limit_once_per_window() -> None:
    limit = AimdLimit(64)
    # a burst of 503s from attempts that all started before the first of them ended
    reasons = [limit.observe(0.1, True, now=1.0 + i * 0.001) for i in range(20)]
    assert reasons.count("overload") == 1
    assert limit.current == 48
    # an attempt started after that decrease cuts again
    assert limit.observe(0.1, True, now=1.2) == "overload"
    assert limit.current == 36


def test_f3_a_persistently_overloaded_origin_goes_down_to_the_minimum_and_no_further() -> None:
    limit = AimdLimit(64, minimum=2)
    for n in range(100):
        limit.observe(0.05, True, now=n * 1.0)
    assert limit.current == 2


def test_f3_successes_raise_the_limit_back_by_one_per_window() -> None:
    limit = AimdLimit(64)
    for n in range(10):
        limit.observe(0.05, True, now=n * 1.0)
    low = limit.current
    assert low < 10
    # one window (as many successes as the limit) adds one
    for i in range(low):
        limit.observe(0.05, False, now=100.0 + i)
    assert limit.current == low + 1
    for i in range(20000):
        limit.observe(0.05, False, now=200.0 + i)
    assert limit.current == 64


def test_f3_an_origin_that_slows_down_is_a_latency_signal() -> None:
    limit = AimdLimit(64)
    for n in range(200):
        limit.observe(0.010, False, now=n * 0.01)
    assert limit.current == 64
    reasons = [limit.observe(0.200, False, now=3.0 + n * 0.3) for n in range(5)]
    assert "latency" in reasons
    assert limit.current < 64


def test_f3_a_slower_steady_state_stops_counting_as_a_signal() -> None:
    """A worker that is itself busy stretches every attempt for good: the average catches up."""
    limit = AimdLimit(64)
    for n in range(200):
        limit.observe(0.010, False, now=n * 0.01)
    for n in range(2000):
        limit.observe(0.050, False, now=10.0 + n * 0.05)
    decreases = limit.decreases
    for n in range(2000):
        limit.observe(0.050, False, now=200.0 + n * 0.05)
    assert limit.decreases == decreases
    assert limit.current == 64


@given(
    st.lists(st.tuples(st.floats(0.0001, 5.0), st.booleans()), max_size=300),
    st.integers(1, 256),
)
def test_f3_the_limit_stays_between_minimum_and_cap(
    attempts: list[tuple[float, bool]], cap: int
) -> None:
    limit = AimdLimit(cap)
    for n, (seconds, signal) in enumerate(attempts):
        limit.observe(seconds, signal, now=n * 0.01)
        assert 1 <= limit.current <= cap


def test_f3_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="minimum"):
        AimdLimit(4, minimum=5)
    with pytest.raises(ValueError, match="backoff"):
        AimdLimit(4, backoff=1.0)


def _sub(n: int) -> Subscription:
    return Subscription(
        id=f"sub_{n}",
        tenant_id="t1",
        name=f"sub_{n}",
        url="https://busy.example/hook",
        filters=("*",),
        secrets=(Secret("whsec_dGVzdA=="),),
    )


async def _run_origin(adaptive: bool, capacity: int) -> tuple[int, int]:
    """40 subscriptions of one origin that serves `capacity` requests at once and answers 503
    beyond that; returns (rejected attempts, most running at once) over 1,200 attempts."""
    subs = {f"sub_{n}": _sub(n) for n in range(40)}
    running = 0
    peak = 0
    rejected = 0
    done = asyncio.Event()
    settled = 0
    total = 1200

    async def attempt(sub: Subscription, delivery: Delivery) -> Ended:
        nonlocal running, peak, rejected
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.002)
            if running > capacity:
                rejected += 1
                return Ended(overloaded=True)
            return Ended()
        finally:
            running -= 1

    def settle(tp: tuple[str, int], offset: int) -> None:
        nonlocal settled
        settled += 1
        if settled == total:
            done.set()

    control = FlowControl(
        slots=256,
        origin_max_in_flight=32,
        attempt=attempt,
        defer=lambda delivery, due_ms, reason: None,
        settled=settle,
        lookup=subs.get,
        adaptive=adaptive,
    )
    for n in range(total):
        sub = subs[f"sub_{n % 40}"]
        event = Event(f"evt_{n}", "t1", "order.created", 0, "{}", 0)
        control.submit(TP, n, Delivery(f"dlv_{n}", sub.id, "t1", event), sub)
        if n % 40 == 39:
            await asyncio.sleep(0.001)
    await asyncio.wait_for(done.wait(), 30)
    return rejected, peak


async def test_f3_adaptive_limit_sends_an_overloaded_origin_far_fewer_rejected_attempts() -> None:
    fixed_rejected, fixed_peak = await _run_origin(adaptive=False, capacity=4)
    adaptive_rejected, _ = await _run_origin(adaptive=True, capacity=4)
    assert fixed_peak == 32
    assert fixed_rejected > 300
    assert adaptive_rejected < fixed_rejected / 3
