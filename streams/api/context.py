"""What the admin API's views share in one worker: settings, registries, a transport, a clock.

Reads come from the worker's live subscription registry (the pipeline's, when the worker runs
one; otherwise the API follows the topic itself). Writes go through ``streams.services``; after
each, `settled` waits (bounded) until the live registry shows the write, so a client reads its
own change on the next request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from streams.adapters.http import Transport
from streams.adapters.kafka_clients import make_producer
from streams.adapters.registry import ApiKeyRegistry, SubscriptionRegistry
from streams.adapters.ssrf import guarded_transport
from streams.domain.models import Subscription
from streams.errors import NotFoundError, UnavailableError
from streams.services.auth import Principal
from streams.services.ingest import IngestLimiter
from streams.settings import Settings

#: How long a write waits for the live registry to show it before answering anyway.
READ_YOUR_WRITE_S = 5.0
#: How long a read waits for a starting worker's registry to catch up.
READY_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One parsed request: who asks, the path parameters, the query and the JSON body."""

    principal: Principal
    params: dict[str, str]
    query: dict[str, str]
    body: Any = None


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any


@dataclass
class ApiContext:
    settings: Settings
    app: Any = None
    keys: ApiKeyRegistry | None = None
    own_registry: SubscriptionRegistry | None = None
    clock: Callable[[], float] = time.time
    routes: tuple[Any, ...] = ()
    _transport: Transport | None = field(default=None, repr=False)
    _producer: Producer | None = field(default=None, repr=False)
    _ingest_limiter: IngestLimiter | None = field(default=None, repr=False)

    def producer(self) -> Producer:
        """The worker's producer (the pipeline's), or one of the API's own."""
        pipeline = getattr(self.app, "hookstream_pipeline", None)
        if pipeline is not None:
            shared: Producer = pipeline.producer
            return shared
        if self._producer is None:
            self._producer = make_producer(self.settings)
        return self._producer

    def ingest_limiter(self) -> IngestLimiter:
        """The per-producer token buckets of this worker (F5)."""
        if self._ingest_limiter is None:
            self._ingest_limiter = IngestLimiter(
                self.settings.ingest_rate, self.settings.ingest_burst
            )
        return self._ingest_limiter

    @property
    def registry(self) -> SubscriptionRegistry:
        pipeline = getattr(self.app, "hookstream_pipeline", None)
        if pipeline is not None:
            registry: SubscriptionRegistry = pipeline.registry
            return registry
        if self.own_registry is None:
            raise UnavailableError("the subscription registry is not running yet")
        return self.own_registry

    async def ready_registry(self) -> SubscriptionRegistry:
        registry = self.registry
        if not registry.ready.is_set():
            try:
                await asyncio.wait_for(registry.ready.wait(), READY_WAIT_S)
            except TimeoutError:
                raise UnavailableError("the subscription registry is still loading") from None
        return registry

    @property
    def transport(self) -> Transport:
        """The transport of test sends: guarded like deliveries (Q4)."""
        if self._transport is None:
            self._transport = guarded_transport(
                self.settings, body_cap=self.settings.response_body_cap
            )
        return self._transport

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None

    async def visible(self, principal: Principal, subscription_id: str) -> Subscription:
        """The subscription, or NotFoundError when it is missing or another tenant's."""
        sub = (await self.ready_registry()).get(subscription_id)
        if sub is None or not principal.sees(sub.tenant_id):
            raise NotFoundError(f"subscription {subscription_id} not found")
        return sub

    async def settled(self, subscription_id: str, version: int | None) -> None:
        """Wait until the live registry shows ``version`` of the subscription (None: deleted)."""
        registry = self.registry
        deadline = time.monotonic() + READ_YOUR_WRITE_S

        def shown() -> bool:
            sub = registry.get(subscription_id)
            if version is None:
                return sub is None
            return sub is not None and sub.updated_at >= version

        # the registry is applied from a consumer thread: it has no event to wait on
        while not shown() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
