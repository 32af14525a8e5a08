"""The delivery pipeline of one worker process: registry, router and dispatcher lanes.

`Pipeline` owns the shared producer and HTTP transport and runs each lane as a task until
`stop` is called. The worker starts it inside the Faust app (see `register_pipeline`); tests and
`hookstream demo` can run it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from mode import Service

from streams.adapters import stage_clock
from streams.adapters.breaker_log import BreakerLog
from streams.adapters.http import Transport
from streams.adapters.kafka_admin import load_topology
from streams.adapters.kafka_clients import make_producer
from streams.adapters.loop_lag import watch_loop_lag
from streams.adapters.registry import SubscriptionRegistry
from streams.adapters.runtime_config import RuntimeConfig
from streams.adapters.ssrf import guarded_transport
from streams.adapters.task_cpu import TaskCpu, install_task_cpu
from streams.lanes.dispatcher import Dispatcher
from streams.lanes.router import Router
from streams.metrics.families import REGISTRY
from streams.settings import Settings

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        transport_factory: Callable[[Settings], Transport] | None = None,
    ) -> None:
        self.settings = settings
        self._transport_factory = transport_factory or _default_transport
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.config = RuntimeConfig()
        self.registry = SubscriptionRegistry(settings, self.config)
        self.producer = make_producer(settings)
        # the dispatcher's records, on a producer of their own when `outbox_linger` is set
        self.outbox_producer = (
            make_producer(settings, **{"linger.ms": settings.outbox_linger * 1000})
            if settings.outbox_linger is not None
            else self.producer
        )
        self.transport: Transport | None = None
        self.router: Router | None = None
        self.dispatcher: Dispatcher | None = None
        self.breakers: BreakerLog | None = None
        self.task_cpu: TaskCpu | None = None

    async def start(self) -> None:
        if self.settings.task_cpu:  # before the lanes' tasks, so that each is timed
            self.task_cpu = install_task_cpu(asyncio.get_running_loop(), REGISTRY)
        if self.settings.stage_clock is not None:
            stage_clock.start(self.settings.stage_clock, asyncio.get_running_loop())
        self.transport = self._transport_factory(self.settings)
        self.router = Router(self.settings, self.registry, self.producer)
        topology = load_topology(self.settings)
        self.breakers = BreakerLog(self.settings).start()
        self.dispatcher = Dispatcher(
            self.settings,
            self.registry,
            self.outbox_producer,
            self.transport,
            list(topology.retry_tiers),
            topology.lane_partitions,
            self.breakers,
        )
        for name, coro in (
            ("registry", self.registry.run(self._stop)),
            ("router", self.router.run(self._stop)),
            ("dispatcher", self.dispatcher.run(self._stop)),
            ("loop-lag", watch_loop_lag(self._stop)),
        ):
            task = asyncio.create_task(coro, name=f"hookstream-{name}")
            task.add_done_callback(self._lane_done)
            self._tasks.append(task)

    def _lane_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stop.is_set():
            return
        exc = task.exception()
        log.critical("lane %s stopped unexpectedly: %r", task.get_name(), exc)
        self._stop.set()

    @property
    def failed(self) -> BaseException | None:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        await asyncio.wait_for(self.registry.ready.wait(), timeout_s)

    async def stop(self) -> None:
        self._stop.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=30)
        for task in self._tasks:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.transport is not None:
            await self.transport.aclose()
        if self.breakers is not None:
            await asyncio.to_thread(self.breakers.stop)
        await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, 10)
        if self.outbox_producer is not self.producer:
            await asyncio.get_running_loop().run_in_executor(None, self.outbox_producer.flush, 10)
        if self.task_cpu is not None:
            REGISTRY.unregister(self.task_cpu)
            self.task_cpu = None
        stage_clock.stop()


def _default_transport(settings: Settings) -> Transport:
    """aiohttp behind the SSRF guard (Q4), unless private destinations are allowed."""
    return guarded_transport(
        settings,
        max_connections=settings.dispatch_concurrency,
        body_cap=settings.response_body_cap,
    )


def pipeline_component(app: Any, settings: Settings) -> None:
    """Faust component: run the delivery pipeline for as long as the worker's app runs.

    The pipeline object exists from registration on (``app.hookstream_pipeline``), so the
    agents and views registered after it can reach its registry and producer; its lanes start
    with the app and stop, with one deadline, before the app stops.
    """
    pipeline = Pipeline(settings)
    app.hookstream_pipeline = pipeline

    class PipelineService(Service):
        async def on_start(self) -> None:
            await pipeline.start()

        async def on_stop(self) -> None:
            await pipeline.stop()

    app.service(PipelineService)
