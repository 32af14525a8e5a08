"""The load of a chaos run or soak: which subscriptions exist, and a steady-rate publisher.

Each tenant gets the same mix of subscriptions, spread over the farm's origins: mostly healthy
endpoints, one flaky one (503 on some first attempts), and a 410 and a 404 endpoint that only
match ``invoice.*`` so that a small share of the deliveries ends as dead letters. Events are
keyed by tenant, so several tenants spread the ingest topic's partitions over both routers.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message

from chaos.cluster import Cluster
from chaos.farm import ReceiverFarm
from streams.adapters.ingest import encode_json_event
from streams.adapters.kafka_clients import make_producer, produce
from streams.domain.filters import matches
from streams.domain.models import Event
from streams.services.events import JSON_HEADERS

EVENT_TYPES = ("order.created", "order.paid", "invoice.paid", "user.signed_up")
# (behaviour, filters) of every tenant's subscriptions
SUBSCRIPTION_MIX: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ok", ("*",)),
    ("ok", ("order.*",)),
    ("ok", ("order.created", "invoice.paid")),
    ("slow", ("*",)),
    ("ok", ("user.*", "invoice.*")),
    ("flaky", ("order.*",)),
    ("gone", ("invoice.*",)),
    ("missing", ("invoice.paid",)),
)


def subscribe_all(cluster: Cluster, farm: ReceiverFarm, tenants: int) -> None:
    for t in range(tenants):
        for index, (behaviour, filters) in enumerate(SUBSCRIPTION_MIX):
            url = farm.url(t + index, behaviour)
            cluster.subscribe(f"tenant{t}", url, list(filters), f"{behaviour}-{t}-{index}")


class EventSource:
    """An endless, seeded sequence of events and the deliveries each one fans out to."""

    def __init__(self, cluster: Cluster, run: str, rng: random.Random) -> None:
        self._run = run
        self._rng = rng
        self._tenants = sorted({s.tenant_id for s in cluster.subscriptions})
        self._fanout = {
            (tenant, etype): sum(
                1
                for s in cluster.subscriptions
                if s.tenant_id == tenant and matches(s.filters, etype)
            )
            for tenant in self._tenants
            for etype in EVENT_TYPES
        }
        self._n = 0
        self.generated: Counter[tuple[str, str]] = Counter()  # (tenant, type) -> events made

    def __iter__(self) -> Iterator[tuple[Event, int]]:
        return self

    def __next__(self) -> tuple[Event, int]:
        tenant = self._tenants[self._n % len(self._tenants)]
        etype = self._rng.choice(EVENT_TYPES)
        now = int(time.time() * 1000)
        event = Event(
            id=f"evt_{self._run}_{self._n}",
            tenant_id=tenant,
            type=etype,
            timestamp=now,
            data_json=orjson.dumps({"n": self._n, "pad": "x" * 200}).decode(),
            published_at=now,
        )
        self._n += 1
        self.generated[(tenant, etype)] += 1
        return event, self._fanout[(tenant, etype)]


class Publisher:
    """Publishes events at a steady rate of deliveries per second, tracking Kafka's acks.

    The producer keeps retrying through a broker restart (its message timeout is longer than
    any outage of the run); an event whose report is still an error is published again, with the
    same id, so the run's list of published events is exactly what Kafka acknowledged.
    """

    def __init__(self, cluster: Cluster, source: EventSource, rate: float) -> None:
        self._topic = cluster.settings.topic("events")
        self._producer = make_producer(
            cluster.settings, **{"message.timeout.ms": 300000, "linger.ms": 20, "log_level": 2}
        )
        self._source = source
        self._rate = rate
        self._lock = threading.Lock()
        self._pending: dict[str, Event] = {}
        self._retry: list[Event] = []
        self.acked: dict[str, Event] = {}
        self.deliveries = 0
        self.republished = 0
        self._debt = 0.0
        self._last = time.monotonic()

    def _report(self, event: Event) -> Any:
        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            with self._lock:
                self._pending.pop(event.id, None)
                if err is None:
                    self.acked[event.id] = event
                else:
                    self._retry.append(event)

        return on_delivery

    def _send(self, event: Event) -> None:
        with self._lock:
            self._pending[event.id] = event
        value = encode_json_event(event)
        produce(
            self._producer,
            self._topic,
            event.tenant_id,
            value,
            headers=JSON_HEADERS,
            on_delivery=self._report(event),
        )

    def tick(self, target: int) -> None:
        """Publish what the rate allows since the last tick, up to ``target`` deliveries."""
        now = time.monotonic()
        self._debt += (now - self._last) * self._rate
        self._last = now
        with self._lock:
            again, self._retry = self._retry, []
        for event in again:
            self.republished += 1
            self._send(event)
        while self._debt > 0 and self.deliveries < target:
            event, fanout = next(self._source)
            self._send(event)
            self.deliveries += fanout
            self._debt -= fanout
        self._producer.poll(0)

    def settle(self, timeout_s: float) -> int:
        """Flush until every event is acknowledged (re-sending failures); returns what is left."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._producer.flush(5)
            with self._lock:
                again, self._retry = self._retry, []
                left = len(self._pending)
            for event in again:
                self.republished += 1
                self._send(event)
            if not again and left == 0:
                return 0
        with self._lock:
            return len(self._pending) + len(self._retry)
