"""A whole hookstream pipeline in the test's event loop, on the real broker.

`PipelineHarness` applies topics.yaml under the test's own prefix, runs the registry, router and
dispatcher lanes in-process with the real aiohttp transport, and offers helpers to create
subscriptions, publish events and read the ledger and dead letters back from Kafka.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.agents.ledger import LedgerState, standalone
from streams.domain.models import Attempt, DeadLetter, Event, Subscription
from streams.lanes.pipeline import Pipeline
from streams.services.audit import all_attempts, list_dead_letters
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription
from streams.settings import Settings


def make_event(tenant: str, etype: str, n: int, run: str | None = None) -> Event:
    now = int(time.time() * 1000)
    return Event(
        id=f"evt_{run or uuid.uuid4().hex[:6]}_{n}",
        tenant_id=tenant,
        type=etype,
        timestamp=now,
        data_json=orjson.dumps({"n": n}).decode(),
        published_at=now,
    )


class PipelineHarness:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pipeline = Pipeline(settings)
        self._ledger: LedgerState | None = None

    def ledger(self) -> LedgerState:
        """The ledger state of every partition, read in this process (S6), started on first use."""
        if self._ledger is None:
            self._ledger = standalone(self.settings, self.settings.data_dir / "ledger")
        return self._ledger

    async def __aenter__(self) -> PipelineHarness:
        await asyncio.to_thread(apply_topics, self.settings)
        await self.pipeline.start()
        await self.pipeline.wait_ready(60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pipeline.stop()
        if self._ledger is not None:
            await asyncio.to_thread(self._ledger.close)
        topology = load_topology(self.settings)
        names = [spec.full_name for spec in topology.topics]
        await asyncio.to_thread(delete_topics, self.settings, names)

    async def subscribe(
        self, url: str, filters: list[str], tenant: str = "acme", **extra: Any
    ) -> Subscription:
        data = {"tenant_id": tenant, "url": url, "filters": filters, **extra}
        sub = await asyncio.to_thread(create_subscription, self.settings, data)
        await self.wait_for(lambda: self.pipeline.registry.get(sub.id) is not None, 20)
        return sub

    async def publish(self, events: list[Event], *, avro: bool = False) -> None:
        await asyncio.to_thread(publish_events, self.settings, events, avro=avro)

    async def attempts(self) -> list[Attempt]:
        return await asyncio.to_thread(all_attempts, self.settings)

    async def dead_letters(self) -> list[DeadLetter]:
        return await asyncio.to_thread(list_dead_letters, self.settings)

    async def dead_letters_until(self, count: int, timeout_s: float) -> list[DeadLetter]:
        """Poll the DLQ until it holds at least ``count`` records."""
        deadline = time.monotonic() + timeout_s
        while True:
            letters = await self.dead_letters()
            if len(letters) >= count or time.monotonic() > deadline:
                return letters
            await asyncio.sleep(0.3)

    def settled_count(self) -> int:
        """Deliveries the dispatcher has settled since the pipeline started."""
        dispatcher = self.pipeline.dispatcher
        assert dispatcher is not None, "the pipeline has not started its dispatcher"
        return dispatcher.settled_count

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            failed = self.pipeline.failed
            if failed is not None:
                raise AssertionError(f"a pipeline lane died: {failed!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s}s")
            await asyncio.sleep(0.1)
