"""The Faust agents' consumer fetches in batches (SPEC P2, §5: fewer per-record stages).

`create_app` gives every worker `PacedFetchTransport`; its consumer thread builds the aiokafka
consumer with the settings' fetch size and wait. No broker is needed: nothing here starts.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, cast

import pytest

from streams.adapters.agent_fetch import (
    PacedFetchConsumer,
    PacedFetchConsumerThread,
    PacedFetchTransport,
    apply_fetch_pacing,
    first_inline,
)
from streams.app import DEFAULT_COMPONENTS, create_app
from streams.settings import load_settings
from tests.conftest import REPO


def test_p2_worker_app_builds_its_agents_consumer_with_the_fetch_settings(tmp_path: Path) -> None:
    async def build() -> tuple[Any, Any, Any, Any]:
        settings = load_settings(
            data_dir=tmp_path,
            topics_file=REPO / "topics.yaml",
            agent_fetch_min_bytes=12345,
            agent_fetch_wait="250ms",
        )
        app = create_app(settings, DEFAULT_COMPONENTS)
        thread = cast(Any, app.consumer)._thread
        consumer = thread._create_worker_consumer(app.transport)
        try:
            return app.transport, app.consumer, thread, consumer
        finally:
            await consumer.stop()
            thread.thread_loop.close()  # the thread never ran, so it did not close its loop

    transport, agents_consumer, thread, consumer = asyncio.run(build())
    assert isinstance(transport, PacedFetchTransport)
    assert isinstance(agents_consumer, PacedFetchConsumer)  # its wait_first: first_inline
    assert isinstance(thread, PacedFetchConsumerThread)
    assert (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms) == (12345, 250)


def test_p2_pacing_refuses_a_consumer_without_the_fetch_attributes() -> None:
    with pytest.raises(RuntimeError, match="_fetch_min_bytes"):
        apply_fetch_pacing(object(), 1, 1)


# --- handing a record to its stream (first_inline) ------------------------------------------------


def _race() -> Any:
    """mode's own wait_first, on a plain service: what `first_inline` falls back to."""
    from mode import Service

    return Service().wait_first


def test_p2_a_hand_over_that_never_waits_wins_without_a_task() -> None:
    async def main() -> tuple[Any, Any, int]:
        loop = asyncio.get_running_loop()
        created = 0

        def counting(loop: Any, coro: Any, **kwargs: Any) -> Any:
            nonlocal created
            created += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(counting)
        suspended = asyncio.Event()

        async def hand_over() -> str:
            return "queued"

        other = suspended.wait()
        result = await first_inline([hand_over(), other], _race())
        return result, other, created

    result, other, created = asyncio.run(main())
    assert result.done and result.results == ["queued"] and not result.stopped
    assert created == 0
    assert inspect.getcoroutinestate(other) == inspect.CORO_CLOSED  # closed, never awaited


def test_p2_a_hand_over_that_waits_finishes_through_the_race() -> None:
    async def main() -> tuple[Any, list[str]]:
        suspended = asyncio.Event()
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        queue.put_nowait("earlier")
        steps: list[str] = []

        async def hand_over() -> str:
            steps.append("started")
            await queue.put("record")  # the stream's queue is full: waits
            steps.append("queued")
            return "queued"

        async def stream_reads() -> None:
            await asyncio.sleep(0.01)
            steps.append(queue.get_nowait())

        reader = asyncio.create_task(stream_reads())
        result = await first_inline([hand_over(), suspended.wait()], _race())
        await reader
        steps.append(queue.get_nowait())
        return result, steps

    result, steps = asyncio.run(main())
    assert result.results == ["queued"]
    assert steps == ["started", "earlier", "queued", "record"]


def test_p2_a_hand_over_waiting_when_the_flow_is_suspended_is_dropped() -> None:
    async def main() -> tuple[Any, list[str], int]:
        suspended = asyncio.Event()
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        queue.put_nowait("earlier")
        steps: list[str] = []

        async def hand_over() -> None:
            try:
                await queue.put("record")
                steps.append("queued")
            except asyncio.CancelledError:
                steps.append("dropped")
                raise

        async def rebalance() -> None:
            await asyncio.sleep(0.01)
            suspended.set()

        asyncio.get_running_loop().create_task(rebalance())
        result = await first_inline([hand_over(), suspended.wait()], _race())
        await asyncio.sleep(0)  # the cancelled hand-over runs its handler
        return result, steps, queue.qsize()

    result, steps, size = asyncio.run(main())
    assert result.results == [True]  # the suspension won
    assert steps == ["dropped"] and size == 1


@pytest.mark.parametrize("waits_first", [False, True])
def test_p2_a_hand_over_that_fails_raises(waits_first: bool) -> None:
    async def main() -> Any:
        suspended = asyncio.Event()

        async def hand_over() -> None:
            if waits_first:
                await asyncio.sleep(0)
            raise ValueError("bad record")

        other = suspended.wait()
        with pytest.raises(ValueError, match="bad record"):
            await first_inline([hand_over(), other], _race())
        return other

    other = asyncio.run(main())
    assert inspect.getcoroutinestate(other) == inspect.CORO_CLOSED


def test_p2_anything_but_a_coroutine_goes_to_the_race_unchanged() -> None:
    async def main() -> Any:
        flag = asyncio.Event()
        flag.set()
        return await first_inline([flag], _race())

    assert asyncio.run(main()).done
