"""A whole hookstream installation for endpoint-health tests: topics, workers, SMTP, receivers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.adapters.kafka_admin import apply_topics, delete_topics, load_topology
from streams.domain.models import Event, Subscription, SubscriptionStatus
from streams.services.config import set_policy
from streams.services.events import publish_events
from streams.services.subscriptions import create_subscription, get_subscription
from streams.settings import Settings
from tests.integration.pipeline_harness import make_event
from tests.integration.workers import WorkerProcess

# Short retries, a breaker that stays out of the way unless a test turns it on.
FAST: dict[str, Any] = {
    "retry_schedule": "500ms",
    "retry_window": "1m",
    "breaker_failures": 100000,
    "breaker_min_attempts": 1000000,
}


class HealthEnv:
    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.workers: list[WorkerProcess] = []
        self._published = 0

    def __enter__(self) -> HealthEnv:
        apply_topics(self.settings)
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop(20)
        topology = load_topology(self.settings)
        delete_topics(self.settings, [spec.full_name for spec in topology.topics])

    def start_workers(self, count: int = 1) -> None:
        for _ in range(count):
            worker = WorkerProcess(self.settings, f"worker{len(self.workers)}", self.log_dir)
            self.workers.append(worker.start())
        for worker in self.workers:
            worker.wait_ready(120)

    def policy(self, **updates: str) -> None:
        set_policy(self.settings, {k.replace("__", "."): v for k, v in updates.items()})

    def subscribe(self, url: str, **extra: Any) -> Subscription:
        data = {"tenant_id": "acme", "url": url, "filters": ["*"], **extra}
        return create_subscription(self.settings, data)

    def publish(self, count: int, etype: str = "order.created") -> list[Event]:
        events = [make_event("acme", etype, self._published + i) for i in range(count)]
        self._published += count
        publish_events(self.settings, events)
        return events

    def status(self, sub: Subscription) -> Subscription:
        return get_subscription(self.settings, sub.id)

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                logs = "\n".join(w.tail(15) for w in self.workers)
                raise AssertionError(f"{what}: not within {timeout_s}s\n{logs}")
            time.sleep(0.3)

    def wait_suspended(self, sub: Subscription, timeout_s: float = 90) -> Subscription:
        self.wait(
            lambda: self.status(sub).status is SubscriptionStatus.SUSPENDED,
            timeout_s,
            f"{sub.id} suspended",
        )
        return self.status(sub)
