"""The event loop's CPU by kind of task (`streams.adapters.task_cpu`, O1)."""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop
from prometheus_client import CollectorRegistry, generate_latest

from streams.adapters.task_cpu import install_task_cpu


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def computes() -> None:
    _spin(0.03)
    await asyncio.sleep(0)
    _spin(0.03)


async def waits() -> None:
    await asyncio.sleep(0.1)


async def fails() -> None:
    _spin(0.01)
    raise ValueError("a task's own error")


def test_o1_each_kind_of_task_is_charged_its_own_cpu_and_only_that() -> None:
    registry = CollectorRegistry()

    async def main() -> tuple[dict[str, float], float]:
        counts = install_task_cpu(asyncio.get_running_loop(), registry)
        started = counts.loop_seconds()
        await asyncio.gather(computes(), waits(), computes())
        return dict(counts.seconds), counts.loop_seconds() - started

    seconds, loop_spent = uvloop.run(main())
    # two tasks of two 30 ms steps each; the 100 ms wait costs the waiting task nothing
    assert 0.12 <= seconds["computes"] < 0.2
    assert seconds["waits"] < 0.01
    assert loop_spent >= sum(seconds.values())
    text = generate_latest(registry).decode()
    assert 'hookstream_task_cpu_seconds_total{task="computes"}' in text
    assert "hookstream_event_loop_cpu_seconds_total" in text


def test_o1_a_timed_task_still_raises_and_is_cancelled_as_before() -> None:
    async def main() -> dict[str, float]:
        counts = install_task_cpu(asyncio.get_running_loop())
        with pytest.raises(ValueError, match="a task's own error"):
            await asyncio.create_task(fails())
        sleeper = asyncio.create_task(waits())
        await asyncio.sleep(0)
        sleeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeper
        assert sleeper.cancelled()
        return dict(counts.seconds)

    seconds = uvloop.run(main())
    assert seconds["fails"] >= 0.01  # the failing step is counted too
    assert "waits" in seconds  # and the cancelled task's steps (the cancellation is thrown in)
