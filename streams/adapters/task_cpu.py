"""The event loop's CPU time by kind of task, for profiling (``HOOKSTREAM_TASK_CPU``, O1).

The router, the dispatcher's reads, one task per delivery attempt, the HTTP responses and
faust's agents share the worker's event loop, and the event loop thread does most of the
worker's computing. A sampling profiler attributes that thread's samples to functions, but on
a busy box its samples of the loop are few and skewed: py-spy's GIL samples of a saturated
worker put routing at 35% of the loop, where this count, taken over the same drain, puts it at
15% (docs/benchmarks.md, "Where the event loop's CPU goes, by task").

With the setting on, every task created after the lanes start runs its coroutine through
`TimedCoroutine`, which adds the thread's CPU time (`time.thread_time`) of each step the task
takes to a total per coroutine name (``Router.run``, ``FlowControl._run``, ...). The totals are
served as ``hookstream_task_cpu_seconds_total{task}``, beside the loop thread's whole CPU time
(``hookstream_event_loop_cpu_seconds_total``): what no task step ran (transport callbacks, timers,
tasks started before the lanes, such as faust's) is the difference. It costs about 7 µs of
CPU a task (a task of two steps created and awaited 100,000 times on uvloop: 14.5-16.1 µs each
timed against 7.2-7.5 untimed), one task per delivery attempt, 2-3% of a worker's CPU per
delivery: off by default; `bench.e2e`'s profiled run, which P1 does not count, turns it on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Generator, Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

_clock = time.thread_time


class TaskCpu(Collector):
    """CPU seconds of the loop thread per coroutine name, and of the whole thread."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._thread_clock = time.pthread_getcpuclockid(threading.get_ident())

    def loop_seconds(self) -> float:
        """The CPU time the thread that installed this has used so far (the event loop's)."""
        return time.clock_gettime(self._thread_clock)

    def collect(self) -> Iterator[Metric]:
        tasks = CounterMetricFamily(
            "hookstream_task_cpu_seconds",
            "CPU time of the event loop thread spent in the steps of tasks, by the name of the "
            "task's coroutine (only with HOOKSTREAM_TASK_CPU on).",
            labels=["task"],
        )
        for name, seconds in sorted(self.seconds.items()):
            tasks.add_metric([name], seconds)
        yield tasks
        yield CounterMetricFamily(
            "hookstream_event_loop_cpu_seconds",
            "CPU time of the event loop thread (only with HOOKSTREAM_TASK_CPU on).",
            value=self.loop_seconds(),
        )


class TimedCoroutine(Coroutine[Any, Any, Any]):
    """A coroutine that adds the CPU time of each of its steps to ``totals[name]``."""

    __slots__ = ("_coro", "_name", "_totals")

    def __init__(self, coro: Coroutine[Any, Any, Any], name: str, totals: dict[str, float]):
        self._coro = coro
        self._name = name
        self._totals = totals

    def send(self, value: Any) -> Any:
        began = _clock()
        try:
            return self._coro.send(value)
        finally:
            totals = self._totals
            totals[self._name] = totals.get(self._name, 0.0) + _clock() - began

    def throw(self, *args: Any) -> Any:
        began = _clock()
        try:
            return self._coro.throw(*args)
        finally:
            totals = self._totals
            totals[self._name] = totals.get(self._name, 0.0) + _clock() - began

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()


def install_task_cpu(
    loop: asyncio.AbstractEventLoop, registry: CollectorRegistry | None = None
) -> TaskCpu:
    """Time every task ``loop`` creates from now on; call on the loop's own thread.

    The totals are served by ``registry`` when one is given (the worker's `/metrics`)."""
    counts = TaskCpu()

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        name = getattr(coro, "__qualname__", type(coro).__name__)
        return asyncio.Task(TimedCoroutine(coro, name, counts.seconds), loop=loop, **kwargs)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    if registry is not None:
        registry.register(counts)
    return counts
