"""A lane's own thread for its blocking Kafka calls (`LaneThread`)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _settle_future(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the lane stopped waiting; what the call returned is dropped
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class LaneThread:
    """One thread that makes a lane's blocking Kafka calls, one at a time, for its event loop.

    A lane reads with `take` hundreds of times a second. Through ``loop.run_in_executor`` each
    read cost about 80 µs of CPU in the executor's machinery alone (a concurrent future, its
    work queue and thread accounting, then an asyncio future chained to it); a thread of the
    lane's own, handed each call through a queue and answering with one
    ``call_soon_threadsafe``, costs about 28 µs (docs/benchmarks.md, "Lane threads"). Calls run in
    the order made, so a lane's consumer is never used by two threads at once: the rebalance
    callbacks that librdkafka runs inside a read run on this thread, as they ran on the
    executor's.
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the lane's thread and wait for what it returns or raises."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((fn, future, loop))
        return await future

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, future, loop = item
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as exc:  # handed to the caller, as run_in_executor does
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle_future, future, result, error)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Let the calls already made finish, then end the thread."""
        self._calls.put(None)
        self._thread.join(timeout_s)
