"""Fan-out cost (SPEC P7): routing with few vs many subscriptions when the same few match.

In-process and broker-free, on real records: the registry is filled through
`SubscriptionRegistry.apply` with Avro-encoded subscriptions (as the worker reads them from the
topic), and `Router.route` is fed JSON ingest records exactly as the worker consumes them. The
router's producer is replaced by one that drops records, so only hookstream's own work is
timed: decode, archive encode, index lookup and one encoded delivery per match.

Of the non-matching subscriptions, half belong to the benchmark's tenant with other event types
and half to other tenants with the very filter that matches, so neither a big tenant nor a
popular filter elsewhere may cost anything.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, cast

from confluent_kafka import Message

from streams.adapters import codec
from streams.adapters.ingest import encode_json_event
from streams.adapters.registry import SubscriptionRegistry
from streams.domain.models import Event, Secret, Subscription
from streams.domain.signing import generate_secret
from streams.lanes.router import Router
from streams.settings import load_settings

TENANT = "acme"
EVENT_TYPE = "order.created"
_MATCHING_FILTERS = (("order.created",), ("order.*",), ("*",))


class _DroppingProducer:
    """Stands in for confluent-kafka's Producer: accepts records and drops them."""

    def __init__(self) -> None:
        self.produced = 0

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.produced += 1

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 0.0) -> int:
        return 0


def build_registry(total: int, matching: int) -> SubscriptionRegistry:
    registry = SubscriptionRegistry(load_settings(topic_prefix="fanout."))
    secret = (Secret(generate_secret(os.urandom)),)
    for i in range(total):
        if i < matching:
            tenant, filters = TENANT, _MATCHING_FILTERS[i % len(_MATCHING_FILTERS)]
        elif i % 2:
            tenant, filters = TENANT, (f"other{i}.created",)
        else:
            tenant, filters = f"tenant{i % 1000}", ("order.*",)
        sub = Subscription(
            id=f"sub_{i:07d}",
            tenant_id=tenant,
            name=f"fanout {i}",
            url="https://example.com/hook",
            filters=filters,
            secrets=secret,
        )
        registry.apply(sub.id.encode(), codec.encode(sub))
    return registry


def _messages(count: int) -> list[Message]:
    now = int(time.time() * 1000)
    pad = "x" * 880
    out = []
    for n in range(count):
        event = Event(f"evt_fanout_{n}", TENANT, EVENT_TYPE, now, f'{{"pad":"{pad}"}}', now)
        out.append(
            Message(
                topic="fanout.events",
                partition=0,
                offset=n,
                key=TENANT.encode(),
                value=encode_json_event(event),
                headers=[("content-type", b"application/json")],
            )
        )
    return out


def _time_match(registry: SubscriptionRegistry, calls: int) -> float:
    started = time.thread_time()  # CPU time: waiting for a core on a shared box is not counted
    for _ in range(calls):
        registry.match(TENANT, EVENT_TYPE)
    return (time.thread_time() - started) / calls * 1e6


def _time_route(registry: SubscriptionRegistry, messages: list[Message]) -> float:
    producer = _DroppingProducer()
    router = Router(load_settings(topic_prefix="fanout."), registry, cast(Any, producer))
    started = time.thread_time()
    for msg in messages:
        router.route(msg)
    return (time.thread_time() - started) / len(messages) * 1e6


def run_fanout(
    small: int, large: int, matching: int, runs: int, events: int = 5000
) -> dict[str, Any]:
    """µs per match and per routed event at both sizes, interleaved; medians and ratios."""
    registries = {size: build_registry(size, matching) for size in (small, large)}
    found = {size: len(reg.match(TENANT, EVENT_TYPE)) for size, reg in registries.items()}
    messages = _messages(events)
    keys = [f"{kind}_{size}" for kind in ("match", "route") for size in (small, large)]
    samples: dict[str, list[float]] = {key: [] for key in keys}
    for _ in range(runs):
        for size, registry in registries.items():
            samples[f"match_{size}"].append(_time_match(registry, events * 10))
            samples[f"route_{size}"].append(_time_route(registry, messages))
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return {
        "sizes": [small, large],
        "matching": found,
        "events_per_sample": events,
        "samples_us": samples,
        "median_us": medians,
        "match_ratio": medians[f"match_{large}"] / medians[f"match_{small}"],
        "route_ratio": medians[f"route_{large}"] / medians[f"route_{small}"],
    }
