"""`lane_thread.LaneThread`: a lane's blocking Kafka calls on one thread of its own (D1).

The lanes read through it; every lane test on the broker covers it end to end. Here: answers
and errors reach the caller, calls run one at a time in the order made, on one thread, and a
caller that stopped waiting does not break the thread for the next call.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from streams.adapters.lane_thread import LaneThread


async def test_d1_a_call_returns_what_the_function_returned_from_the_lane_thread() -> None:
    lane = LaneThread("test-reads")
    try:
        name = await lane.call(lambda: threading.current_thread().name)
        assert name == "test-reads"
        assert await lane.call(lambda: 41 + 1) == 42
    finally:
        lane.stop()


async def test_d1_an_error_reaches_the_caller_and_the_thread_goes_on() -> None:
    lane = LaneThread("test-reads")

    def fail() -> None:
        raise ValueError("broker away")

    try:
        with pytest.raises(ValueError, match="broker away"):
            await lane.call(fail)
        assert await lane.call(lambda: "still serving") == "still serving"
    finally:
        lane.stop()


async def test_d1_calls_run_one_at_a_time_in_the_order_made_on_one_thread() -> None:
    """A consumer must never be used by two threads at once; a rebalance callback runs inside
    a read, on the thread of that read."""
    lane = LaneThread("test-reads")
    running = 0
    overlaps = 0
    seen: list[tuple[int, int]] = []

    def step(n: int) -> int:
        nonlocal running, overlaps
        running += 1
        overlaps += running > 1
        time.sleep(0.002)
        seen.append((n, threading.get_ident()))
        running -= 1
        return n

    try:
        results = await asyncio.gather(
            *(lane.call(lambda n=n: step(n)) for n in range(20))  # type: ignore[misc]
        )
    finally:
        lane.stop()
    assert results == list(range(20))
    assert [n for n, _ in seen] == list(range(20))
    assert len({ident for _, ident in seen}) == 1
    assert overlaps == 0


async def test_d1_a_cancelled_wait_drops_its_answer_and_the_next_call_is_served() -> None:
    lane = LaneThread("test-reads")
    started = threading.Event()

    def slow() -> str:
        started.set()
        time.sleep(0.1)
        return "late"

    try:
        waiting = asyncio.ensure_future(lane.call(slow))
        await asyncio.to_thread(started.wait, 5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await lane.call(lambda: "next") == "next"
    finally:
        lane.stop()


def test_stop_ends_the_thread_after_the_calls_already_made() -> None:
    lane = LaneThread("test-reads")
    lane.stop()
    assert not lane._thread.is_alive()
