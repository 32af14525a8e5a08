"""Helpers of the recovery tests: suspend a subscription, run the backfill runner, read topics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

from streams.adapters import codec
from streams.adapters.registry import SubscriptionRegistry
from streams.adapters.topic_reader import scan
from streams.domain.models import ControlEvent, Delivery, Notification, Subscription
from streams.domain.models import SubscriptionStatus as Status
from streams.lanes.backfill import BackfillRunner
from streams.services.subscriptions import _save
from streams.settings import Settings
from tests.integration.pipeline_harness import PipelineHarness


async def suspend(h: PipelineHarness, sub: Subscription, suspended_at: int) -> Subscription:
    """Write the suspended version the control agent would write (H3), and wait to see it."""
    suspended = dataclasses.replace(
        sub,
        status=Status.SUSPENDED,
        status_reason="auto_suspend:retryable:25",
        suspended_at=suspended_at,
        updated_at=sub.updated_at + 1,
    )
    await asyncio.to_thread(_save, h.settings, suspended)
    await h.wait_for(lambda: _status(h.pipeline.registry, sub.id) is Status.SUSPENDED, 20)
    return suspended


def _status(registry: SubscriptionRegistry, sub_id: str) -> Status | None:
    sub = registry.get(sub_id)
    return None if sub is None else sub.status


@contextlib.asynccontextmanager
async def runner(h: PipelineHarness) -> AsyncIterator[BackfillRunner]:
    """The backfill runner next to the harness's lanes, as the worker runs it."""
    stop = asyncio.Event()
    letters = h.ledger()
    running = BackfillRunner(h.settings, h.pipeline.registry, letters)
    task = asyncio.create_task(running.run(stop))
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def backfill_records(settings: Settings) -> list[Delivery]:
    return [
        codec.decode(Delivery, m.value() or b"") for m in scan(settings, settings.topic("backfill"))
    ]


def control_events(settings: Settings) -> list[ControlEvent]:
    return [
        codec.decode(ControlEvent, m.value() or b"")
        for m in scan(settings, settings.topic("control"))
    ]


def notifications(settings: Settings) -> list[Notification]:
    topic = settings.topic("notifications")
    return [codec.decode(Notification, m.value() or b"") for m in scan(settings, topic)]
